"""Switch heads off in the window (a right-click on a head in the Overview or in Head stats), Qt-free.

The window holds an :class:`AblationState` (which heads are off: several at once) and, in a worker, measures
what switching them off does to the model's output on the input it last ran: the engine of ``attnviz ablate``
(:class:`attnviz.runtime.ablation.Ablation`: a gated in-memory copy of the graph, run in the isolation child; the
user's file is never written).  One :class:`Ablator` gates every site that can be gated, so one session serves
every toggle on one input (the masks are graph inputs); a new input or model gets a new one.

The maps shown stay the model's own: the outcome is about the output (largest |Δlogit|, KL of the output
distribution, the top prediction before → after, the greedy words before → after when the input generated).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from attnviz import AttnvizError
from attnviz.core.attention import shown_stack
from attnviz.core.setting_words import fix

if TYPE_CHECKING:
    from attnviz.core.attention import Block, SiteInfo
    from attnviz.runtime.ablation import Ablation, Change, Top1
    from attnviz.runtime.protocol import AttnModel
    from attnviz.runtime.request import AnalyzeRequest


@dataclass(frozen=True, order=True)
class HeadRef:
    """One head, named as ``attnviz ablate --heads`` names it (``tower`` only for a dual encoder's sites)."""

    stack: str
    kind: str
    layer: int
    head: int
    tower: str | None = None
    # a vision–language model's encoder: named "vision" as its views name it (the same head either way)
    vision_tower: bool = field(default=False, compare=False)

    @property
    def label(self) -> str:
        """``"encoder self 2:5"`` (``"vision self 2:5"`` on a VLM's vision tower): the CLI's ``--heads`` spelling."""
        stack = shown_stack(self.stack, self.vision_tower)
        return f"{stack}{f' ({self.tower})' if self.tower else ''} {self.kind} {self.layer}:{self.head}"

    def matches(self, site: SiteInfo) -> bool:
        return (site.stack, site.kind, int(site.layer), site.tower) == (self.stack, self.kind, self.layer, self.tower)


def layer_heads(blocks: list[Block], block: int, layer: int) -> frozenset[HeadRef]:
    """Every head of the layer at an Overview row ``(block, layer index in the block)``."""
    return frozenset(head_at(blocks, block, layer, h) for h in range(blocks[block].heads_in(layer)))


def head_at(blocks: list[Block], block: int, layer: int, head: int) -> HeadRef:
    """The head at an Overview cell ``(block, layer index in the block, head)`` or a Head stats row."""
    blk = blocks[block]
    s = blk.result.sites[blk.sites[layer]]
    return HeadRef(s.stack, s.kind, int(s.layer), int(head), s.tower, blk.result.vision_tower)


@dataclass(frozen=True)
class AblationState:
    """The heads switched off (none: the model as it is).  Immutable: each toggle is a new state."""

    off: frozenset[HeadRef] = frozenset()

    def toggled(self, ref: HeadRef) -> AblationState:
        return AblationState(self.off ^ {ref})

    def layer_toggled(self, refs: frozenset[HeadRef]) -> AblationState:
        """A layer's heads ``refs`` all off, or all back on when every one of them is off already."""
        return AblationState(self.off - refs if refs <= self.off else self.off | refs)

    def is_off(self, ref: HeadRef) -> bool:
        return ref in self.off

    def cells(self, blocks: list[Block]) -> set[tuple[int, int, int]]:
        """The Overview cells ``(block, layer, head)`` of the heads that are off (crossed out there)."""
        out = set()
        for bi, blk in enumerate(blocks):
            for li in range(blk.n_layers):
                for h in range(blk.heads_in(li)):
                    if head_at(blocks, bi, li, h) in self.off:
                        out.add((bi, li, h))
        return out

    def summary(self) -> str:
        return ", ".join(r.label for r in sorted(self.off)) if self.off else "none"

    def overview_style(self, blocks: list[Block], block: int, style=None):
        """The figure style that crosses out this block's switched-off heads in the exported overview, as the
        window's Overview does (``style``: another's, e.g. a comparison's frames, kept)."""
        from attnviz.figures.spec import FigureStyle

        off = tuple(sorted((li, h) for bi, li, h in self.cells(blocks) if bi == block))
        return replace(style or FigureStyle(), heads_off=off)


@dataclass(frozen=True)
class AblationOutcome:
    """What switching ``off`` off did to the output on one input (``off`` empty: the run with every gate open,
    which must equal the model's own output exactly)."""

    off: frozenset[HeadRef]
    output: str  # the output measured (logits where the model has them)
    change: Change
    top1: Top1 | None  # the top prediction before → after (classifier label / the last position's next token)
    generated: tuple[list[str], list[str]] | None  # greedy words before → after (the input generated)
    ablated_output: np.ndarray = field(repr=False, compare=False)  # the measured output itself
    ablator: Ablator | None = field(default=None, repr=False, compare=False)  # reused by the next toggle

    def lines(self) -> list[str]:
        """The output panel's lines."""
        c = self.change
        if not self.off:
            return [
                "All heads on: the model as it is.",
                f"max |Δ{self.output}| {c.max_dlogit:.3g} against its own run (0: restored exactly)",
            ]
        out = [f"Off: {', '.join(r.label for r in sorted(self.off))}"]
        kl = f"KL(base ‖ ablated) {c.kl_bits:.4g} bits · " if c.kl_bits is not None else ""
        out.append(f"{kl}max |Δ{self.output}| {c.max_dlogit:.4g}")
        if self.top1 is not None:
            out.append(self.top1.said())
        if c.changed_positions and (self.top1 is None or self.top1.last_position):
            # "of N": 2 changed positions of 3 and of 300 are different findings (a classifier's one row: the
            # label line says it)
            from attnviz.runtime.ablation import positions_said

            out.append(positions_said(c) or "")
        if self.generated is not None:
            before_w, after_w = self.generated
            if before_w == after_w:
                out.append(f"generation unchanged: “{' '.join(before_w)}”")
            else:
                out.append(f"generation changed: “{' '.join(before_w)}” → “{' '.join(after_w)}”")
        return out


def check_ablatable(model: AttnModel | None, request: AnalyzeRequest | None) -> None:
    """One line when the window cannot switch heads off: maps loaded from a file, an export folder, a decoder
    paired with its encoder (the CLI refuses the same)."""
    from attnviz.runtime.model import AttentionModel

    if model is None or request is None:
        raise AttnvizError("switching heads off needs a model run: open a model and run an input first")
    if not isinstance(model, AttentionModel):
        raise AttnvizError(
            f"{model.name or model.path.name}: switching heads off runs one ONNX file, and this is an export "
            "folder of several; open one of its files"
        )
    if request.feeds is None and model.pair_with_encoder() is not None:
        raise AttnvizError(
            f"{model.path.name} is the decoder of an export: switching its heads off needs the encoder's states "
            f"{fix('ablate_feeds')}"
        )


class Ablator:
    """One gated session of ``model`` on ``request``: every gateable site, all heads on unless switched off."""

    def __init__(self, model: AttnModel, request: AnalyzeRequest):
        from attnviz.runtime.ablation import Ablation, gateable

        check_ablatable(model, request)
        self.model, self.request = model, request
        chosen, self.refused = gateable(model)  # type: ignore[arg-type]  # an AttentionModel: checked above
        if not chosen:
            raise AttnvizError(f"no head of {model.path.name} can be switched off: {'; '.join(self.refused)}")
        self.ab: Ablation = Ablation(model, chosen, "zero", request)  # type: ignore[arg-type]
        self.lock = threading.Lock()  # one toggle at a time through the session and the measures

    def serves(self, model: AttnModel | None, request: AnalyzeRequest | None) -> bool:
        # the same objects: the window's request of the result shown (a request's raw feeds are arrays, whose ==
        # has no single truth value); a new input is a new request, and a new Ablator
        return model is self.model and request is self.request

    def off_sets(self, off: frozenset[HeadRef]) -> dict[int, list[int]]:
        """``off`` as ``{site index: heads}`` for :meth:`Ablation.change` (a head of a site with no gate is one
        line naming why)."""
        sites = self.model.sites
        out: dict[int, list[int]] = {}
        for ref in sorted(off):
            i = next((i for i, s in enumerate(sites) if ref.matches(s)), None)
            if i is None or i not in self.ab.gates:
                why = next((r for r in self.refused if f"{ref.stack} {ref.kind} L{ref.layer} " in r), "")
                raise AttnvizError(f"cannot switch {ref.label} off{': ' + why if why else ''}")
            if ref.head >= sites[i].heads:
                raise AttnvizError(f"{ref.label}: {sites[i].label} has {sites[i].heads} heads")
            out.setdefault(i, []).append(ref.head)
        return out

    def outcome(self, off: frozenset[HeadRef]) -> AblationOutcome:
        with self.lock:
            ab = self.ab
            offsets = self.off_sets(off)
            got = ab.run(offsets)
            change = ab.change(offsets, got)
        gen = None
        if ab.steps:
            gen = (self._words(ab.base_generated), self._words(change.generated or []))
        return AblationOutcome(off, ab.output, change, ab.top1(got), gen, got, self)

    def _words(self, ids: list[int]) -> list[str]:
        return self.ab.words(ids)


def ablate(
    model: AttnModel,
    request: AnalyzeRequest,
    off: frozenset[HeadRef],
    ablator: Ablator | None = None,
    progress=None,
) -> AblationOutcome:
    """The window's job: switch ``off`` off on ``request`` (reusing ``ablator`` when it serves this model and
    input) and measure the output change."""
    if ablator is None or not ablator.serves(model, request):
        if progress is not None:
            progress(-1, "building the gated copy of the graph…")
        ablator = Ablator(model, request)
    if progress is not None:
        progress(-1, f"running with {len(off)} head{'s' if len(off) != 1 else ''} off…")
    return ablator.outcome(off)
