"""Issue 27's third reference: two checkpoints of a training run of attnviz's own backend, the second with a change
planted in one head (its query weights scaled) -- ``attnviz compare`` names that head as the one that moved most,
and every head the change cannot reach (the layers below it, the other heads of its layer) as unmoved."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

torch = pytest.importorskip("torch")

from attnviz.cli import main  # noqa: E402

TEXT = "3 1 4 1 5 9 2 6"
LAYER, HEAD = 1, 2


def test_the_head_a_planted_change_touched_is_the_one_that_moved(tmp_path, capsys):
    from attnviz.training.checkpoint import read_weights
    from attnviz.training.export import export, read_config
    from attnviz.training.model import AttnModel
    from attnviz.training.tasks import get_task

    run = tmp_path / "run"
    args = ["train", "sequence-classification", "--preset", "tiny", "--steps", "3", "--quiet"]
    assert main([*args, "--set", "n_layers=3", "--set", "n_heads=4", "--out", str(run)]) == 0
    task, mcfg, tcfg, _ = read_config(run / "model.onnx")
    model = AttnModel(mcfg).eval()
    model.load_state_dict(read_weights(run / "checkpoint.safetensors"))  # checkpoint A, as trained
    a = tmp_path / "a.onnx"
    export(model, get_task(task), mcfg, tcfg, a)
    with torch.no_grad():  # checkpoint B: one head's query weights scaled, nothing else
        q = model.encoder.layers[LAYER].self_attn.q_proj
        dh = mcfg.d_model // mcfg.n_heads
        q.weight[HEAD * dh : (HEAD + 1) * dh] *= 4.0
        q.bias[HEAD * dh : (HEAD + 1) * dh] *= 4.0
    b = tmp_path / "b.onnx"
    export(model, get_task(task), mcfg, tcfg, b)
    capsys.readouterr()
    assert main(["compare", str(a), str(b), "--text", TEXT, "--out", str(tmp_path / "cmp")]) == 0
    rows = pq.read_table(tmp_path / "cmp" / "heads.parquet").to_pylist()
    assert len(rows) == 3 * 4
    top = max(rows, key=lambda r: r["js_divergence"])
    assert (top["layer"], top["head"]) == (LAYER, HEAD) and top["js_divergence"] > 1e-4
    unreachable = [r for r in rows if r["layer"] < LAYER or (r["layer"] == LAYER and r["head"] != HEAD)]
    assert unreachable and all(r["js_divergence"] == 0.0 and r["max_abs_diff"] == 0.0 for r in unreachable)
    assert f"encoder self {LAYER}:{HEAD}" in capsys.readouterr().out.splitlines()[2]  # printed first
