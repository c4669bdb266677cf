"""Compare with a second model in the window (File ▸ Compare with…): model B runs the request model A last ran,
and :func:`attnviz.corpus.compare.compare_results` measures every head both have (the CLI's ``attnviz compare``
numbers).  Qt-free: the window runs these in a worker and holds the :class:`HeldComparison` until the model or
the input changes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from attnviz import AttnvizError
from attnviz.core import view as vm

if TYPE_CHECKING:
    from attnviz.core.attention import AttentionResult, Block
    from attnviz.corpus.compare import Comparison
    from attnviz.runtime.protocol import AttnModel
    from attnviz.runtime.request import AnalyzeRequest

# the Head stats columns a held comparison adds: measure -> (title, tooltip); the numbers are compare_results'
COMPARE_COLUMNS = {
    "js_divergence": (
        "JS vs B",
        "Jensen–Shannon divergence between this head's rows in A and in B, bits (0 = same, 1 = disjoint), "
        "mean over the input's real query rows",
    ),
    "max_abs_diff": ("max |Δ| vs B", "largest |A − B| of this head's weights over real query rows and keys"),
    "top1_agreement": (
        "top-1 agree",
        "share of real query rows whose most-attended key is the same in A and in B",
    ),
}


@dataclass(frozen=True)
class HeldComparison:
    """Model B beside model A: B's result on A's request and the per-head rows of the comparison.

    ``result_a`` is the result the rows were measured against: a new result of A makes this one stale."""

    model_b: AttnModel
    path_b: Path
    request: AnalyzeRequest
    result_a: AttentionResult
    result_b: AttentionResult
    comparison: Comparison

    @property
    def name_b(self) -> str:
        return self.model_b.name or self.path_b.name

    def block_rows(self, blk: Block) -> dict[tuple[int, int], dict]:
        """``(layer index in blk, head) -> row`` for the heads of ``blk`` (a block of ``result_a``) that were
        compared; heads of a site B lacks are absent."""
        from attnviz.corpus.compare import row_stack

        by_key = {(r["stack"], r["kind"], r["layer"], r["head"]): r for r in self.comparison.heads}
        out = {}
        for li, i in enumerate(blk.sites):
            s = blk.result.sites[i]
            for h in range(blk.heads_in(li)):
                row = by_key.get((row_stack(s, blk.result.vision_tower), s.kind, int(s.layer), h))
                if row is not None:
                    out[(li, h)] = row
        return out

    def divergence(self, blocks: list[Block]) -> dict[tuple[int, int, int], float]:
        """``(block, layer, head) -> JS divergence in bits`` for every compared head of A's ``blocks`` (the
        Overview frames each thumbnail by it)."""
        return {
            (bi, li, h): row["js_divergence"]
            for bi, b in enumerate(blocks)
            for (li, h), row in self.block_rows(b).items()
        }

    def frames_key(self, blocks: list[Block]) -> vm.FramesKey:
        """The key of the Overview's frames: their colours' scale, white (JS 0) to the darkest red at the most
        divergent head of A's ``blocks`` (every block: the frames of all blocks share it)."""
        return vm.FramesKey(self.name_b, max(self.divergence(blocks).values(), default=0.0))

    def frame_colours(self, blocks: list[Block]) -> dict[tuple[int, int, int], str]:
        """``(block, layer, head) -> colour`` of the Overview's frames: darker red the more a head diverges from
        model B, none where it did not move (one rule, :meth:`frames_key`, for the window and its exported figure)."""
        key = self.frames_key(blocks)
        out = {}
        for head, value in self.divergence(blocks).items():
            colour = key.colour(value)
            if colour is not None:
                out[head] = colour
        return out

    def frames_note(self) -> str:
        return f"frames: divergence from {self.name_b} (darkest red = most)"

    def overview_style(self, blocks: list[Block], block: int, style=None):
        """The figure style that frames the overview of A's ``block`` as the window does."""
        from attnviz.figures.spec import FigureStyle

        frames = tuple((li, h, c) for (bi, li, h), c in sorted(self.frame_colours(blocks).items()) if bi == block)
        return dataclasses.replace(
            style or FigureStyle(),
            head_frames=frames,
            frames_note=self.frames_note(),
            frames_key=self.frames_key(blocks),
        )

    def status(self) -> str:
        """The status-bar line after comparing: how many heads, and the one that moved most (its JS to 4 significant
        digits: an int8 copy's 5e-6 bits read "JS 0.0000", as if nothing had moved)."""
        heads = self.comparison.heads
        top = max(heads, key=lambda r: r["js_divergence"])
        from attnviz.core.words import count

        unmatched = self.comparison.unmatched
        # a few named ("encoder self L2: only in B": a deeper B), more counted
        not_compared = (
            f"; not compared: {', '.join(unmatched)}"
            if 0 < len(unmatched) <= 2
            else (f"; {count(len(unmatched), 'site')} not compared" if unmatched else "")
        )
        return (
            f"compared with {self.name_b}: {len(heads)} heads, most changed {top['stack']} {top['kind']} "
            f"{top['layer']}:{top['head']} (JS {top['js_divergence']:.4g} bits){not_compared}"
        )


def _feeds(req: AnalyzeRequest) -> dict | None:
    """The request's raw feeds (their attention masks say which query rows are real), else None."""
    from collections.abc import Mapping

    if isinstance(req.feeds, Mapping):
        return dict(req.feeds)
    if req.feeds is not None:
        from attnviz.runtime.inputs import load_feeds

        return load_feeds(req.feeds)
    return None


def compare_with(
    model_b: AttnModel,
    path_b: str | Path,
    request: AnalyzeRequest | None,
    result_a: AttentionResult,
    progress: Callable[[int, str], None] | None = None,
    cancelled=None,
) -> HeldComparison:
    """Run ``model_b`` on ``request`` (what produced ``result_a``) and compare head by head; one message when
    there is nothing to compare (no request, other tokens, other generated words, no shared site)."""
    from attnviz.corpus.compare import compare_results
    from attnviz.corpus.compare_words import no_shared_site
    from attnviz.runtime.sample import require_input

    name = model_b.name or Path(path_b).name
    if request is None:
        raise _no_request(name)
    if not model_b.sites:
        raise AttnvizError(f"cannot compare with {name}: it has no attention ({model_b.no_attention_reason})")
    require_input(request, model_b.path)
    if progress is not None:
        progress(-1, f"running {name} for the comparison…")
    # in the window's worker pool, whose wording (app/fields.WINDOW) names the field A's run was set with
    result_b = model_b.analyze_request(request, progress=progress, cancelled=cancelled)
    if request.generate and result_a.info.get("generated_ids") != result_b.info.get("generated_ids"):
        raise AttnvizError(
            f"A and {name} generated different words, so their maps are over different sequences; compare them "
            "without generating (generate 0) or on a given target"
        )
    comparison = compare_results(result_a, result_b, _feeds(request), window=True)
    if not comparison.heads:
        raise AttnvizError(no_shared_site(comparison.unmatched, name))
    return HeldComparison(model_b, Path(path_b), request, result_a, result_b, comparison)


def open_and_compare(
    opener: Callable[..., AttnModel],
    path_b: str | Path,
    request: AnalyzeRequest | None,
    result_a: AttentionResult,
    provider: str = "auto",
    tokenizer: str | None = None,
    progress: Callable[[int, str], None] | None = None,
    cancelled=None,
) -> HeldComparison:
    """File ▸ Compare with…: open B (as the window opens models) and compare it with A on A's last request."""
    if request is None:  # say so before opening B
        raise _no_request(Path(path_b).name)
    model_b = opener(str(path_b), provider=provider, tokenizer=tokenizer, probe=False)
    return compare_with(model_b, path_b, request, result_a, progress=progress, cancelled=cancelled)


def _no_request(name: str) -> AttnvizError:
    return AttnvizError(
        f"cannot compare with {name}: the maps shown were loaded from a file, not run; open a model and run an "
        "input first"
    )


# what Head map shows when a comparison is held: model A, model B, or A − B
SHOWN = {"A": "A", "B": "B", "diff": "A − B"}


def compared_figure(held: HeldComparison, shown: str, sel, blocks=None, figure_style=None):
    """The figure of Head map's "B" or "A − B" for the window's selection ``sel`` (on A's ``blocks``)."""
    from attnviz.core.view import matching_selection
    from attnviz.figures import render_diff_figure, render_figure

    if shown == "B":
        sel_b = matching_selection(held.result_a, held.result_b, sel, blocks)
        return render_figure(held.result_b, "heatmap", sel_b, figure_style)
    return render_diff_figure(held.result_a, held.result_b, sel, figure_style)


def save_compared(held: HeldComparison, shown: str, sel, path, blocks=None, figure_style=None):
    """Draw :func:`compared_figure` and write it atomically (File ▸ Export view on Head map's B or A − B)."""
    from attnviz.figures import save_figure

    return save_figure(compared_figure(held, shown, sel, blocks, figure_style), path)
