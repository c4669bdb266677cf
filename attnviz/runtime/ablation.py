"""Switch attention heads off and measure what the model's output does: the engine behind ``attnviz ablate``.

One session of a gated copy of the graph (:func:`attnviz.runtime.graph.ablate.gate_heads`, through the model's
public :meth:`~attnviz.runtime.model.AttentionModel.extra_session`) serves every ablation: the per-site head masks
are graph inputs, so the baseline (all ones), a joint ablation and each head alone are one forward each.
The output change is measured on the model's main output (``logits`` where it has one, else its first output)
with :func:`attnviz.core.compare.output_difference` (the largest |Δ| and, for logits, KL(base ‖ ablated) in
bits), plus whether the top prediction (the argmax over the last axis) changed at any real position.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import numpy as np

from attnviz import AttnvizError
from attnviz.core import metadata as md
from attnviz.core.attention import SiteInfo, shown_label, site_stack
from attnviz.core.comma_list import EmptyItem, comma_items
from attnviz.core.compare import is_logits, log_softmax, output_difference
from attnviz.core.quoted import quoted
from attnviz.core.setting_words import fix
from attnviz.runtime import builders as bd
from attnviz.runtime import generate as gen
from attnviz.runtime.graph.ablate import Gate, GateRefused, gate_heads, gate_method
from attnviz.runtime.model import AttentionModel
from attnviz.runtime.request import AnalyzeRequest

# tasks whose output is values, not a distribution's logits (whatever the output is named): no KL, no argmax
REGRESSION_TASKS = ("forecasting",)
HEAD_RE = re.compile(r"^\s*(\S+)\s+(\S+)\s+([0-9]+)\s*:\s*([0-9]+)\s*$")
# every head of one layer: "encoder self 3:*" (a researcher's "switch layer 3 off" without typing its 12 heads)
LAYER_RE = re.compile(r"^\s*(\S+)\s+(\S+)\s+([0-9]+)\s*:\s*\*\s*$")


def parse_heads(spec: str, sites: list[SiteInfo], vision_tower: bool = False) -> dict[int, list[int]]:
    """``"encoder self 2:5,decoder cross 0:1"`` -> {site index: [heads]}, checked against the model's sites.
    ``vision_tower``: a vision–language model's vision file, whose encoder heads are also "vision self 2:5" (as its
    views and tables name them: core.attention.shown_stack)."""
    out: dict[int, list[int]] = {}
    index = {(s.stack, s.kind, s.layer): i for i, s in enumerate(sites)}
    names = ", ".join(f"{shown_label(s, vision_tower)} ({s.heads} heads)" for s in sites)
    try:
        parts = comma_items(spec)
    except EmptyItem as e:  # 'encoder self 0:1,' or ',,': a head left out is named, not skipped
        raise AttnvizError(f"--heads {e}; give e.g. 'encoder self 2:5,decoder cross 0:1', or use --all-heads") from None
    for part in parts:
        m = HEAD_RE.match(part) or LAYER_RE.match(part)
        if m is None:
            raise AttnvizError(
                f"--heads {quoted(part.strip())}: write each head as 'STACK KIND LAYER:HEAD', e.g. 'encoder self 2:5' "
                "(a layer's every head: 'encoder self 2:*')"
            )
        stack, kind, layer = site_stack(m.group(1), vision_tower), m.group(2), int(m.group(3))
        i = index.get((stack, kind, layer))
        if i is None:
            raise AttnvizError(
                f"--heads {quoted(part.strip())}: the model has no site {m.group(1)} {kind} L{layer}; its sites: {names}"
            )
        n = sites[i].heads
        if m.re is LAYER_RE and not n:
            raise AttnvizError(f"--heads {part.strip()!r}: {sites[i].label} declares no head count; name its heads")
        for head in range(n) if m.re is LAYER_RE else [int(m.group(4))]:
            if n is not None and head >= n:
                raise AttnvizError(f"--heads {part.strip()!r}: {sites[i].label} has {n} heads (0 to {n - 1})")
            if head not in out.setdefault(i, []):
                out[i].append(head)
    if not out:
        raise AttnvizError("--heads names no head; give e.g. 'encoder self 0:1', or use --all-heads")
    return out


@dataclass(frozen=True)
class Change:
    """What ablating some heads did to the main output on one input."""

    kl_bits: float | None  # mean KL(base ‖ ablated) of the softmax over the last axis, bits (logits only)
    max_dlogit: float  # largest |base − ablated|
    prediction_changed: bool | None  # the argmax over the last axis differs at some real position (None: values)
    changed_positions: int | None  # how many positions' argmax changed
    generation_changed: bool | None = None  # with generation: the greedy tokens differ
    generated: list[int] | None = None
    positions: int | None = None  # the real positions the argmax was compared at ("changed at 2 of 9")


class Ablation:
    """A model with gates on ``sites`` (indices into ``model.sites``), on one input."""

    def __init__(self, model: AttentionModel, sites: list[int], mode: str, req: AnalyzeRequest):
        self.model = model
        known_heads(model)
        try:
            edited, gates = gate_heads(model.graph, model.graph_sites, sites, mode)
        except GateRefused as e:
            raise AttnvizError(str(e)) from None
        self.gates: dict[int, Gate] = {g.site: g for g in gates}
        # the key names everything the edit depends on: the same key is the same session
        self.sess = model.extra_session(edited, f"ablate sites={sorted(sites)} mode={mode}")
        names = [o.name for o in model.outputs]
        self.output = "logits" if "logits" in names else names[0]
        # a forecaster's "logits" are the forecast values, and an encoder's features (last_hidden_state, a vision
        # tower's image_features) are no distribution either: the largest |Δ| is the measure there, no KL, no
        # argmax "prediction" (as the corpus ablation decides it: ablate_plan)
        self.distribution = model.meta.get("task") not in REGRESSION_TASKS and is_logits(self.output)
        self.prep = bd.prepare(model, req)
        self.steps = req.generate
        self.eos = md.section(model.meta, "special").get("eos")
        self.base_generated: list[int] = []
        if self.steps:
            if self.prep.prompts is None or self.prep.batch > 1:
                raise AttnvizError(fix("generate_ablate"))
            self.base_generated = self.generate({})
        self.feeds = self._feeds(self.base_generated)
        t0 = time.perf_counter()
        self.base = self.run({})
        self.base_s = time.perf_counter() - t0
        self.rows = self._real_rows(self.base)
        # the base's log-probabilities once, not once per ablation (the measures cost a third of a small model's
        # forward per head otherwise: the translation demo's logits, measured)
        rows = self.base[self.rows] if self.rows is not None else self.base
        self.base_log = log_softmax(rows) if self.distribution and rows.size else None

    def _feeds(self, generated: list[int]) -> dict[str, np.ndarray]:
        """The feeds of the one run the output change is measured on (after generation: the base sequence)."""
        if self.prep.prompts is not None:
            rows = [list(p) + generated[:-1] for p in self.prep.prompts]
            return self.model.check_feeds(bd.decoder_feeds(self.model, self.prep, rows))
        feeds = dict(self.prep.feeds)
        bd.fill_auxiliary(self.model, feeds, self.prep.batch, None)
        return self.model.check_feeds(feeds)

    def masks(self, off: dict[int, list[int]]) -> dict[str, np.ndarray]:
        """Every gate's mask: ones, with zeros at the heads in ``off`` (site -> heads)."""
        out = {}
        for i, g in self.gates.items():
            m = np.ones(g.heads, np.float32)
            m[off.get(i, [])] = 0.0
            out[g.input] = m
        return out

    def run(self, off: dict[int, list[int]], feeds: dict[str, np.ndarray] | None = None) -> np.ndarray:
        """The main output with the heads in ``off`` ablated (``{}``: the model as it is)."""
        try:
            return self.sess.run([self.output], {**(self.feeds if feeds is None else feeds), **self.masks(off)})[0]
        except Exception as e:  # onnxruntime's words (a gate that does not fit this graph's layout) in one line
            raise AttnvizError(f"the ablated model failed to run: {' '.join(str(e).split())[:300]}") from None

    def generate(self, off: dict[int, list[int]]) -> list[int]:
        """Greedy tokens from the prompt with the heads in ``off`` ablated (the whole sequence re-run per step)."""
        assert self.prep.prompts is not None

        def next_logits(ids: list[int]) -> np.ndarray:
            out = self.run(off, self.model.check_feeds(bd.decoder_feeds(self.model, self.prep, [ids])))
            return out[0, -1] if out.ndim == 3 else out[0]

        return list(gen.greedy_steps(next_logits, self.prep.prompts[0], self.steps, self.eos))

    def _real_rows(self, out: np.ndarray) -> np.ndarray | None:
        """[B, T] bool: the positions of a per-token output that are real tokens (None: every position)."""
        if out.ndim < 3:
            return None
        role = "mask" if self.prep.prompts is None or self.prep.decoder_is_tokens else "decoder_mask"
        name = next((n for n, r in self.model.roles.items() if r == role and n in self.feeds), None)
        mask = self.feeds.get(name) if name is not None else None
        if mask is None or mask.shape != out.shape[:2]:
            return None
        return mask != 0

    def change(self, off: dict[int, list[int]], got: np.ndarray | None = None) -> Change:
        """Ablate the heads in ``off`` together and measure the output change (``got``: that run's output, when
        the caller has it already)."""
        got = self.run(off) if got is None else got
        d = output_difference(self.output, self.base, got, self.rows, self.base_log)
        changed, positions = None, None
        if self.distribution:
            a, b = self.base.argmax(-1), got.argmax(-1)
            if self.rows is not None:
                a, b = a[self.rows], b[self.rows]
            changed, positions = int(np.sum(a != b)), int(a.size)
        gen_changed, ids = None, None
        if self.steps:
            ids = self.generate(off)
            gen_changed = ids != self.base_generated
        kl = d.kl_bits if self.distribution else None
        return Change(
            kl, d.max_abs_diff, None if changed is None else changed > 0, changed, gen_changed, ids, positions
        )

    def words(self, ids: list[int]) -> list[str]:
        """Token ids as the target tokenizer writes them (the ids themselves without one)."""
        tok = self.prep.tgt_tok
        return [tok.label(int(i)) if tok is not None else str(int(i)) for i in ids]

    def top1(self, got: np.ndarray) -> Top1 | None:
        """The top prediction before → after of an input of one row: a classifier's label, else the token
        predicted after the last real position (a language model's next token); None for a batch, a forecaster's values or
        features.  The baseline beside the ablated run: "prediction changed" alone left a user asking from what."""
        base = self.base
        # (a batch of several rows from --inputs: row 0's prediction alone would read as the batch's)
        if not self.distribution or base.ndim not in (2, 3) or base.shape[0] != 1:
            return None
        if base.ndim == 2:
            labels = self.model.meta.get("labels")
            i, j = int(base[0].argmax()), int(got[0].argmax())
            if isinstance(labels, list) and len(labels) == base.shape[-1]:
                return Top1(str(labels[i]), str(labels[j]), last_position=False)
            return Top1(str(i), str(j), last_position=False)
        rows = self.rows
        last = int(np.flatnonzero(rows[0])[-1]) if rows is not None and rows[0].any() else base.shape[1] - 1
        before, after = self.words([int(base[0, last].argmax()), int(got[0, last].argmax())])
        return Top1(before, after, last_position=True)


@dataclass(frozen=True)
class Top1:
    """The top prediction of the base run and of the ablated run (row 0)."""

    before: str
    after: str
    last_position: bool  # a per-token output's last real position (a classifier's one label: False)

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def said(self) -> str:
        """``prediction unchanged: B → B`` / ``last position's top-1 changed: Spirit → poor``: which prediction
        it is, since a per-token output's top-1 can change elsewhere while the last position's holds."""
        what = "last position's top-1" if self.last_position else "prediction"
        return f"{what} {'changed' if self.changed else 'unchanged'}: {self.before} → {self.after}"

    def base_said(self) -> str:
        """The base run's prediction alone (the line above a ranking of heads, each against it)."""
        return f"base {'top-1 at the last position' if self.last_position else 'prediction'}: {self.before}"


def positions_said(change: Change) -> str | None:
    """``top-1 changed at 2 of 9 positions`` (None for an output with no argmax)."""
    if change.changed_positions is None:
        return None
    n, total = change.changed_positions, change.positions
    if n == 0:  # ("changed at 0 of 6 positions" read as a change)
        return f"top-1 unchanged at all {total} positions" if total is not None else "top-1 unchanged"
    of = f" of {total}" if total is not None else ""
    return f"top-1 changed at {n}{of} position{'s' if (total or n) != 1 else ''}"


def known_heads(model: AttentionModel) -> None:
    """Head counts the graph does not declare come from the model's short dummy run (the gates need them)."""
    if model.needs_probe or not all(s.heads for s in model.graph_sites):
        model.probe()


def gateable(model: AttentionModel) -> tuple[list[int], list[str]]:
    """The sites ablation can gate, and a line for each it cannot."""
    known_heads(model)
    ok, refused = [], []
    for i, s in enumerate(model.graph_sites):
        try:
            gate_method(model.graph, s)
            ok.append(i)
        except GateRefused as e:
            refused.append(str(e))
    return ok, refused
