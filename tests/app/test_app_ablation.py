"""The window's head ablation without Qt (attnviz/app/ablation.py): right-click ▸ Switch head off, as state and job.

References: ``attnviz ablate --heads`` run here on the same model and input (its heads.parquet / run.json numbers
must equal the window's within 1e-6), a fresh run of the model (its maps after any number of toggles must equal
the first run's exactly, and the all-on gated run must reproduce the base output bit for bit), and the user's file
(byte-identical)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from attnviz import AttnvizError
from attnviz.app.ablation import AblationState, HeadRef, ablate, check_ablatable, head_at
from attnviz.cli import main
from attnviz.runtime import open_model
from attnviz.runtime.request import AnalyzeRequest

MODELS = Path(__file__).resolve().parents[2] / "models"
CLASSIFIER = MODELS / "sequence-classification.onnx"
TRANSLATION = MODELS / "translation.onnx"
TEXT = "3 1 4 1 5 9 2 6"
GREEK = "μακάριοι οἱ πτωχοὶ τῷ πνεύματι"


def _cli(tmp_path: Path, model: Path, heads: str, *extra: str) -> tuple[dict, dict]:
    out = tmp_path / f"abl{len(list(tmp_path.iterdir()))}"
    assert main(["ablate", str(model), "--heads", heads, "--provider", "cpu", "--out", str(out), *extra]) == 0
    row = pq.read_table(out / "heads.parquet").to_pylist()[0]
    return row, json.loads((out / "run.json").read_text())


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_switching_heads_off_equals_attnviz_ablate_and_back_on_restores_exactly(tmp_path, capsys):
    sha = _sha(CLASSIFIER)
    model = open_model(CLASSIFIER, provider="cpu")
    req = AnalyzeRequest(text=TEXT)
    first = model.analyze_request(req)
    blocks = first.blocks(0)
    # right-click on the Overview cell (block 0, layer 1, head 2), then on (0, 0, 3): two heads off together
    a, b = head_at(blocks, 0, 1, 2), head_at(blocks, 0, 0, 3)
    assert a == HeadRef("encoder", "self", 1, 2) and a.label == "encoder self 1:2"
    state = AblationState().toggled(a)
    one = ablate(model, req, state.off)
    row, _ = _cli(tmp_path, CLASSIFIER, "encoder self 1:2", "--text", TEXT)
    assert one.change.max_dlogit > 0  # the head does something: the comparison below compares real numbers
    assert abs(one.change.max_dlogit - row["ablation_max_dlogit"]) <= 1e-6
    assert abs(one.change.kl_bits - row["ablation_kl"]) <= 1e-6
    assert one.change.prediction_changed == row["prediction_changed"]

    state = state.toggled(b)
    assert state.off == {a, b} and state.cells(blocks) == {(0, 1, 2), (0, 0, 3)}
    two = ablate(model, req, state.off, one.ablator)
    assert two.ablator is one.ablator  # one gated session serves every toggle on this input
    row2, run2 = _cli(tmp_path, CLASSIFIER, "encoder self 1:2,encoder self 0:3", "--text", TEXT)
    assert run2["joint"]["heads"] == ["encoder self 0:3", "encoder self 1:2"]
    assert abs(two.change.max_dlogit - row2["ablation_max_dlogit"]) <= 1e-6
    assert abs(two.change.kl_bits - row2["ablation_kl"]) <= 1e-6
    labels = model.meta["labels"]
    want = (labels[int(one.ablator.ab.base[0].argmax())], labels[int(two.ablated_output[0].argmax())])
    assert (two.top1.before, two.top1.after) == want and not two.top1.last_position

    # toggling both back: every gate open reproduces the model's output bit for bit, and its maps are untouched
    state = state.toggled(a).toggled(b)
    assert state == AblationState()
    back = ablate(model, req, state.off, two.ablator)
    assert back.change.max_dlogit == 0.0 and back.change.kl_bits == 0.0 and not back.change.prediction_changed
    assert np.array_equal(back.ablated_output, one.ablator.ab.base)
    assert back.lines()[0] == "All heads on: the model as it is."
    again = model.analyze_request(req)
    assert len(again.maps) == len(first.maps)
    for m0, m1 in zip(first.maps, again.maps):
        assert np.array_equal(m0.array(), m1.array())
    np.testing.assert_allclose(back.ablated_output, first.outputs["logits"], atol=1e-6)
    assert _sha(CLASSIFIER) == sha


def test_generation_before_and_after_as_attnviz_ablate_says(tmp_path, capsys):
    model = open_model(TRANSLATION, provider="cpu")
    req = AnalyzeRequest(text=GREEK, generate=8)
    result = model.analyze_request(req)
    cross = next(i for i, b in enumerate(result.blocks(0)) if (b.stack, b.kind) == ("decoder", "cross"))
    ref = head_at(result.blocks(0), cross, 2, 1)
    got = ablate(model, req, frozenset({ref}))
    row, run = _cli(tmp_path, TRANSLATION, ref.label, "--text", GREEK, "--generate", "8")
    before, after = got.generated
    assert before == run["base_generated"] and after == run["joint"]["generated"]
    assert before == list(result.generated)  # the window's own generation is the base
    assert (before != after) == row["generation_changed"]
    assert abs(got.change.max_dlogit - row["ablation_max_dlogit"]) <= 1e-6
    assert abs(got.change.kl_bits - row["ablation_kl"]) <= 1e-6
    text = "\n".join(got.lines())
    assert f"Off: {ref.label}" in text and ("generation changed" if before != after else "unchanged") in text
    # the prediction line says which prediction: the base's last position predicts the last generated word (the
    # greedy step chose it), and the positions are the start token and the words before it, one per word
    top = got.top1
    assert top.last_position and top.before == before[-1] and got.change.positions == len(before)
    assert run["base_prediction"] == before[-1] and run["joint"]["prediction"] == top.after
    said = "changed" if top.before != top.after else "unchanged"
    assert f"last position's top-1 {said}: {before[-1]} → {top.after}" in text
    n = row["changed_positions"]
    assert n == got.change.changed_positions and n > 0  # (decoder cross 2:1 moves a word: a real count)
    assert f"top-1 changed at {n} of {len(before)} position{'s' if len(before) != 1 else ''}" in text


def test_what_cannot_be_switched_off_is_one_line(tmp_path):
    model = open_model(CLASSIFIER, provider="cpu")
    with pytest.raises(AttnvizError, match="open a model and run an input first"):
        check_ablatable(None, None)
    with pytest.raises(AttnvizError, match="open a model and run an input first"):
        check_ablatable(model, None)  # maps loaded from a .npz: nothing was run
    with pytest.raises(AttnvizError, match=r"encoder self 9:0"):
        ablate(model, AnalyzeRequest(text=TEXT), frozenset({HeadRef("encoder", "self", 9, 0)}))
