"""Weight snapshots during training (TrainConfig.snapshot_every) and checkpoint averaging (`attnviz average`)."""

import json

import pytest
import torch
from safetensors.torch import save_file

from attnviz import AttnvizError
from attnviz.cli import main
from attnviz.training import checkpoint as ckpt
from attnviz.training.average import average_weights
from attnviz.training.export import read_config
from attnviz.training.loop import Trainer
from attnviz.training.tasks import get_task


def test_average_weights_is_the_elementwise_mean(tmp_path):
    a, b, c = tmp_path / "a.safetensors", tmp_path / "b.safetensors", tmp_path / "c.safetensors"
    save_file({"model.w": torch.tensor([1.0, 2.0]), "model.n": torch.tensor([7]), "optim.0.x": torch.ones(1)}, a)
    save_file({"model.w": torch.tensor([3.0, 6.0]), "model.n": torch.tensor([7]), "optim.0.x": torch.zeros(1)}, b)
    save_file({"model.w": torch.tensor([2.0, -2.0]), "model.n": torch.tensor([7])}, c)
    avg = average_weights([a, b, c])
    assert set(avg) == {"w", "n"}  # optimizer state is not a weight
    assert avg["w"].tolist() == [2.0, 2.0] and avg["w"].dtype == torch.float32  # (1+3+2)/3, (2+6-2)/3
    assert avg["n"].tolist() == [7]


@pytest.mark.parametrize(
    "other, words",
    [
        ({"model.w": torch.zeros(3), "model.n": torch.tensor([7])}, "not a checkpoint of the same model"),
        ({"model.v": torch.zeros(2), "model.n": torch.tensor([7])}, "not a checkpoint of the same model"),
        ({"model.w": torch.zeros(2), "model.n": torch.tensor([8])}, "integer buffer"),
        ({"optim.0.x": torch.zeros(2)}, "no model tensors"),
    ],
)
def test_average_weights_refuses_checkpoints_of_another_model(tmp_path, other, words):
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    save_file({"model.w": torch.tensor([1.0, 2.0]), "model.n": torch.tensor([7])}, a)
    save_file(other, b)
    with pytest.raises(AttnvizError, match=words):
        average_weights([a, b])
    with pytest.raises(AttnvizError, match="cannot read weights"):
        average_weights([a, tmp_path / "missing.safetensors"])


def _tiny_run(out, steps=20, snapshot_every=5):
    task = get_task("translation-synthetic")
    mcfg, tcfg = task.configs("tiny")
    tcfg.steps, tcfg.snapshot_every, tcfg.checkpoint_every = steps, snapshot_every, 0
    tcfg.validation, tcfg.eval_every = 4, 10
    tcfg.align_weight, tcfg.align_heads = 0.5, [[0, 0]]
    return task, mcfg, tcfg


def test_snapshots_keep_the_weights_of_every_nth_step(tmp_path):
    task, mcfg, tcfg = _tiny_run(tmp_path)
    tr = Trainer(task, mcfg, tcfg, out=tmp_path / "run")
    at_step = {}
    for ev in tr.events():
        if ev.step % 5 == 0 and not ev.done:  # the weights right after that step, before the next update
            at_step[ev.step] = {k: v.clone() for k, v in tr.model.state_dict().items()}
    snaps = sorted(p.name for p in (tmp_path / "run" / ckpt.SNAPSHOTS).iterdir())
    assert snaps == [f"step-{s:06d}.safetensors" for s in (5, 10, 15, 20)]
    for s in (5, 20):
        saved = ckpt.read_weights(ckpt.snapshot_path(tmp_path / "run", s))
        for k, v in at_step[s].items():
            assert torch.equal(saved[k], v), (s, k)


def test_average_command_exports_the_mean_of_two_snapshots(tmp_path, capsys):
    task, mcfg, tcfg = _tiny_run(tmp_path)
    run = tmp_path / "run"
    for _ in Trainer(task, mcfg, tcfg, out=run).events():
        pass
    from attnviz.training.export import export

    export(Trainer(task, mcfg, tcfg).model, task, mcfg, tcfg, run / "model.onnx")  # a finished run has one
    files = [str(ckpt.snapshot_path(run, s)) for s in (10, 20)]
    out = tmp_path / "avg"
    assert main(["average", str(run), "--weights", *files, "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert "aer_select" in summary["validation"] and "bleu" in summary["validation"]
    assert summary["parity"]["logits_max_diff"] < 1e-4 and "aer_declared" in summary["metrics"]
    # the exported weights are the hand-computed mean of the two snapshot files
    s10, s20, got = (ckpt.read_weights(p) for p in (files[0], files[1], out / ckpt.TENSORS))
    for k in s10:
        if s10[k].is_floating_point():
            torch.testing.assert_close(got[k], (s10[k] + s20[k]) / 2, rtol=0, atol=1e-7)
    _, _, tc, meta = read_config(out / "model.onnx")
    assert tc.average_of == files and meta["metrics"]["validation"]["averaged"] is True
    # and `attnviz eval` re-measures the exported file to the same numbers
    assert main(["eval", str(out / "model.onnx")]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"]["aer_declared"] == summary["metrics"]["aer_declared"]


def test_average_command_errors_are_one_line(tmp_path, capsys):
    assert main(["average", str(tmp_path), "--weights", "a", "b"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnviz: error:") and "not a finished" in err and len(err.splitlines()) == 1


def test_average_command_refuses_checkpoints_of_another_run_in_one_line(tmp_path, capsys):
    """Checkpoints that agree with each other but not with RUN's model (another task's or size's run) reached
    torch's load_state_dict: an internal error (exit 1) listing every missing key.  One line now, naming the file
    and the first tensor that differs, nothing written."""
    task, mcfg, tcfg = _tiny_run(tmp_path, steps=2, snapshot_every=1)
    run = tmp_path / "run"
    for _ in Trainer(task, mcfg, tcfg, out=run).events():
        pass
    from attnviz.training.export import export

    export(Trainer(task, mcfg, tcfg).model, task, mcfg, tcfg, run / "model.onnx")
    own = ckpt.read_weights(ckpt.snapshot_path(run, 1))
    name = sorted(own)[0]
    stranger = {"model.w": torch.zeros(2)}  # another model's tensors: the run's model has no 'w'
    wider = {f"model.{k}": v for k, v in own.items()}
    wider[f"model.{name}"] = torch.zeros(*own[name].shape[:-1], own[name].shape[-1] + 1)  # one tensor reshaped
    for case, (tensors, words) in {
        "stranger": (stranger, ["it has no ", "not a checkpoint of the run in"]),
        "wider": (wider, [f"its {name} is ", "the run's "]),
    }.items():
        files = [tmp_path / f"{case}-{i}.safetensors" for i in (1, 2)]
        for f in files:
            save_file(tensors, f)
        out = tmp_path / f"avg-{case}"
        capsys.readouterr()
        assert main(["average", str(run), "--weights", *map(str, files), "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"attnviz: error: {files[0]} "), err
        assert all(w in err[0] for w in words), (words, err)
        assert not out.exists() or not any(out.iterdir())
