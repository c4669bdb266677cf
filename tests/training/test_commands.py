"""`attnviz train` / `attnviz eval` end to end, and their one-line errors."""

import json

import pytest

pytest.importorskip("torch")

from attnviz.cli import main


def test_train_then_eval(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(["train", "sequence-classification", "--preset", "tiny", "--steps", "20", "--out", str(out), "--quiet"])
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["parity"]["sites"] == 1 and "accuracy" in summary["metrics"]
    assert {p.name for p in out.iterdir()} == {
        "model.onnx",
        "checkpoint.safetensors",
        "checkpoint.json",
        "config.json",
        "metrics.json",
    }
    assert main(["eval", str(out / "model.onnx")]) == 0
    ev = json.loads(capsys.readouterr().out)
    assert ev["task"] == "sequence-classification"
    assert ev["metrics"] == summary["metrics"]  # eval reproduces the numbers stored at export time


def test_unknown_task(tmp_path, capsys):
    assert main(["train", "nope", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown task 'nope'" in err and "sequence-classification" in err and len(err.strip().splitlines()) == 1


def test_unwritable_out(tmp_path, capsys):
    f = tmp_path / "f"
    f.write_text("")
    assert main(["train", "forecasting", "--preset", "tiny", "--out", str(f / "x")]) == 2
    assert "cannot write to output folder" in capsys.readouterr().err


def test_eval_bad_files(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not an onnx file at all")
    assert main(["eval", str(bad)]) == 2
    assert "not a readable ONNX file" in capsys.readouterr().err
    assert main(["eval", str(tmp_path / "missing.onnx")]) == 2
    assert "no such model file" in capsys.readouterr().err
    import onnx

    g = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])],
    )
    plain = tmp_path / "plain.onnx"
    onnx.save(onnx.helper.make_model(g), str(plain))
    assert main(["eval", str(plain)]) == 2
    assert "no attnviz training config" in capsys.readouterr().err


def test_interrupted_training_resumes(tmp_path, capsys, monkeypatch):
    from attnviz.training.tasks import get_task

    task = get_task("sequence-classification")
    real_loss = type(task).loss
    calls = {"n": 0}

    def flaky_loss(self, logits, batch):
        calls["n"] += 1
        if calls["n"] == 8:
            raise KeyboardInterrupt
        return real_loss(self, logits, batch)

    monkeypatch.setattr(type(task), "loss", flaky_loss)
    out = tmp_path / "run"
    args = ["train", "sequence-classification", "--preset", "tiny", "--steps", "12", "--out", str(out), "--quiet"]
    assert main(args) == 130  # a Ctrl-C's exit, as every command's
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"attnviz: interrupted; training stopped at step 7/12; checkpoint saved in {out}, "
        "run the same command again to resume"
    )
    assert not (out / "model.onnx").exists()  # nothing half-written where the model is expected
    assert main(args) == 0
    assert any(
        line.startswith("attnviz: note: resumed from step 7/12") for line in capsys.readouterr().err.splitlines()
    )
    assert (out / "model.onnx").exists()


def test_interrupted_export_exports_on_the_same_command_without_training_again(tmp_path, capsys, monkeypatch):
    """Ctrl-C after the last step, while exporting, left a finished checkpoint and no model.onnx; the same command
    then said "already holds a finished run; pass --restart to train again", so the training was lost."""
    import attnviz.training.export as export_module
    from attnviz.training.tasks import get_task

    def args(out):
        return ["train", "sequence-classification", "--preset", "tiny", "--steps", "12", "--out", str(out), "--quiet"]

    assert main(args(tmp_path / "whole")) == 0
    whole = json.loads(capsys.readouterr().out)

    real_export = export_module.export
    monkeypatch.setattr(export_module, "export", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    out = tmp_path / "run"
    assert main(args(out)) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"attnviz: interrupted; stopped while exporting; training finished and is saved in {out}, "
        "run the same command again to export it"
    )
    assert not (out / "model.onnx").exists()

    monkeypatch.setattr(export_module, "export", real_export)
    task = get_task("sequence-classification")
    monkeypatch.setattr(type(task), "loss", lambda *a: pytest.fail("a finished run was trained again"))
    assert main(args(out)) == 0
    captured = capsys.readouterr()
    assert "training had finished at step 12" in captured.err and "exporting it now" in captured.err
    resumed = json.loads(captured.out)
    assert (out / "model.onnx").is_file() and resumed["metrics"] == whole["metrics"]
    assert main(args(out)) == 2  # exported now: a finished run, as before
    assert "already holds a finished run" in capsys.readouterr().err


def test_corrupt_checkpoint_cli(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoint.json").write_text("{oops")
    assert main(["train", "sequence-classification", "--preset", "tiny", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "corrupt" in err and "--restart" in err


def test_epochs_set_steps(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "forecasting", "--preset", "tiny", "--epochs", "1", "--out", str(out), "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["steps"] == 16  # 512 training series / batch 32
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["train"]["epochs"] == 1 and cfg["train"]["steps"] == 16


def test_tiny_preset_says_it_is_a_smoke_preset(tmp_path, capsys):
    from attnviz.cli import build_parser, main

    help_text = build_parser()._subparsers._group_actions[0].choices["train"].format_help()
    assert "smoke preset" in " ".join(help_text.split())
    assert (
        main(["train", "toy-reverse", "--preset", "tiny", "--steps", "2", "--quiet", "--out", str(tmp_path / "run")])
        == 0
    )
    assert capsys.readouterr().err.splitlines()[0].startswith("attnviz: note: --preset tiny is a smoke preset")
