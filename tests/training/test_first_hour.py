"""A new researcher's first hour with `attnviz train` (session 26's audit): each of these was an internal error
(exit 1), a silent wrong result, or advice that could not work."""

import json
import re

import pytest

pytest.importorskip("torch")

from attnviz import AttnvizError
from attnviz.cli import main
from attnviz.training.loop import Trainer
from attnviz.training.tasks import TASKS, get_task

TRAIN = ["train", "sequence-classification", "--preset", "tiny", "--steps", "3"]


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    errors = [ln for ln in err.splitlines() if ln.startswith("attnviz: error: ")]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0].removeprefix("attnviz: error: ")


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        # torch.device("gpu"): "RuntimeError: Expected one of cpu, cuda, ..." as an internal error
        ("device=gpu", "train config: device='gpu' is not one of auto, cpu, cuda (or cuda:N, the N-th GPU)"),
        # every training example held out: translation's encode() took max() of nothing
        ("validation=1", "train config: validation=1 would hold out every training example"),
        # recorded in config.json as the run's task while another task trained
        ("task=forecasting", "--set task: task is set by the TASK argument, not --set"),
        ("preset=foo", "--set preset: preset is set by --preset, not --set"),
        ("epochs=2", "--set epochs: epochs is set by --epochs N, not --set"),
        # a classifier's labels against per-position logits: "Expected input batch_size (384) to match target ..."
        ("head=lm", "--set head=lm: sequence-classification's data and loss are made for head 'classify'"),
        # token ids fed as a series: KeyError: 'series'
        ("input_kind=series", "--set input_kind=series: sequence-classification's data and loss are made for"),
    ],
)
def test_a_set_value_the_run_cannot_take_is_one_line_before_the_folder(tmp_path, capsys, bad, words):
    out = tmp_path / "r"
    assert main([*TRAIN, "--out", str(out), "--set", bad]) == 2
    assert _one_error_line(capsys).startswith(words)
    assert not out.exists()


def test_a_task_field_set_to_the_tasks_own_value_is_taken(tmp_path, capsys):
    out = tmp_path / "r"
    assert main([*TRAIN, "--out", str(out), "--quiet", "--set", "head=classify", "--set", "device=cpu"]) == 0
    stored = json.loads((out / "config.json").read_text())
    assert stored["train"]["task"] == "sequence-classification" and stored["model"]["head"] == "classify"


@pytest.mark.parametrize("name", sorted(n for n, t in TASKS.items() if not t.val_key and not t.trains_itself))
def test_validation_on_a_task_without_a_validation_split_is_refused(name):
    """sequence-classification's make_split("validation") returned its *test* split, so `--set validation=20`
    selected steps on the held-out data the README says it never looks at; the others raised KeyError."""
    task = get_task(name)
    mcfg, tcfg = task.configs("tiny")
    tcfg.validation, tcfg.eval_every = 20, 5
    with pytest.raises(AttnvizError, match=f"validation=20: {name} has no validation split") as e:
        Trainer(task, mcfg, tcfg)
    assert "translation-synthetic" in str(e.value)  # names the tasks that have one


def test_the_tasks_with_a_validation_split_still_take_one():
    task = get_task("translation-synthetic")
    mcfg, tcfg = task.configs("tiny")
    tcfg.validation = 20
    tr = Trainer(task, mcfg, tcfg)
    train_n, val_n = (len(d["input_ids"]) for d in (tr.train_data, tr.val_data))
    assert val_n > 0 and train_n > 0


def test_a_diverged_run_says_to_lower_the_rate_and_restart_not_to_resume(tmp_path, capsys):
    """The line ended "partial results kept in DIR; rerun the same command to resume", but batches and dropout are
    seeded per step: the resumed run diverges at the same step again (checked here), so it names the fix."""
    out = tmp_path / "r"
    argv = ["train", "translation-synthetic", "--preset", "tiny", "--steps", "4", "--out", str(out), "--quiet"]
    assert main([*argv, "--set", "lr=1e9"]) == 2
    first = _one_error_line(capsys)
    assert first.startswith("training diverged at step ") and "(--set lr=..., now 1e+09)" in first
    assert "--restart" in first and "to resume" not in first
    assert main([*argv, "--set", "lr=1e9"]) == 2  # what the old line advised: the same step diverges again
    assert _one_error_line(capsys) == first
    assert main([*argv, "--set", "lr=1e-3", "--restart"]) == 0  # what the line says now
    assert json.loads(capsys.readouterr().out)["steps"] == 4


def test_eval_on_cuda_where_onnxruntime_has_none_is_one_line_not_cpu_numbers(tmp_path, capsys):
    """`eval --provider cuda` on a CPU onnxruntime printed onnxruntime's UserWarning and then the CPU's metrics as
    if they came from the GPU (exit 0).  Now the viewer's session rules: one line, exit 2; the output names the
    provider that ran."""
    import onnxruntime as ort

    out = tmp_path / "r"
    assert main([*TRAIN, "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["eval", str(out / "model.onnx")]) == 0
    assert json.loads(capsys.readouterr().out)["provider"] == "CPUExecutionProvider"
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has a CUDA provider")
    assert main(["eval", str(out / "model.onnx"), "--provider", "cuda"]) == 2
    assert _one_error_line(capsys).startswith("CUDA was requested but this onnxruntime has no CUDA provider")


def test_average_without_out_of_a_run_without_validation_is_refused(tmp_path, capsys):
    """It averaged the snapshots, measured nothing (no validation split) and printed the file list, exit 0."""
    run = tmp_path / "r"
    argv = [*TRAIN[:-1], "4", "--out", str(run), "--quiet", "--set", "snapshot_every=2"]
    assert main(argv) == 0
    capsys.readouterr()
    snaps = sorted(str(p) for p in (run / "snapshots").iterdir())
    assert len(snaps) == 2
    assert main(["average", str(run), "--weights", *snaps]) == 2
    assert "pass --out DIR to export it and measure it on the test split" in _one_error_line(capsys)
    assert main(["average", str(run), "--weights", *snaps, "--out", str(tmp_path / "avg")]) == 0
    assert "accuracy" in json.loads(capsys.readouterr().out)["metrics"]


def test_the_progress_line_counts_a_resumed_runs_rate_from_where_it_took_up():
    """Resumed at step 100 of 3000, 100 more steps in 10 s: 10 steps/s, 2800 steps (4:40) to go.  The ETA was
    elapsed / fraction done (10 / (200/3000) - 10 = 140 s), as if the first 100 steps had taken no time."""
    from types import SimpleNamespace

    from attnviz.training.commands.train import _bar

    ev = SimpleNamespace(step=200, total=3000, loss=0.25, elapsed=10.0)
    line = _bar(ev, start=100).strip()
    assert line.endswith("200/3000 loss 0.2500   10.0 steps/s 0:10 eta 4:40"), line
    slow = SimpleNamespace(step=4, total=9004, loss=1.0, elapsed=10.0)  # 2.5 s a step: 9000 steps, 6:15:00
    assert _bar(slow).strip().endswith("2.5 s/step 0:10 eta 6:15:00"), _bar(slow)
    assert len(_bar(slow).strip()) < 80  # a line wider than the terminal wraps, and "\r" then redraws nothing
    first = SimpleNamespace(step=100, total=3000, loss=1.0, elapsed=0.0)  # resumed, nothing timed yet
    assert _bar(first, start=100).strip().endswith("? steps/s 0:00 eta ?")


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("Translation", "translation"),
        ("seq", "sequence-classification"),
        ("captionning", "captioning"),
        ("translation_synthetic", "translation-synthetic"),
        ("toy", None),
        ("nope", None),
    ],
)
def test_an_unknown_task_names_the_one_it_most_likely_meant(tmp_path, capsys, typed, meant):
    assert main(["train", typed, "--out", str(tmp_path / "r")]) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"unknown task {typed!r}; ") and "choose one of: sequence-classification" in line
    assert (f"did you mean {meant}? " in line) if meant else ("did you mean" not in line)  # toy: two toy tasks


def test_the_run_ends_saying_where_the_model_went_in_short_lines(tmp_path, capsys):
    """The held-out line printed translation's whole metrics dict (per-head AER tables, example translations):
    one stderr line of ~3,000 characters; and nothing but the JSON's "model" field said where the file went."""
    out = tmp_path / "r"
    argv = ["train", "translation-synthetic", "--preset", "tiny", "--steps", "3", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    metrics = json.loads(captured.out)["metrics"]
    err = captured.err.strip().splitlines()
    held = next(ln for ln in err if ln.startswith("trained in "))
    shown = held.split("held-out (PyTorch): ")[1].split(", ")
    numbers = [k for k, v in metrics.items() if isinstance(v, int | float)]  # the ONNX file's, the same keys
    assert [item.split(" ")[0] for item in shown] == numbers and "bleu" in numbers and "aer_best_head" in numbers
    assert len(held) < 200 and "{" not in held
    model = out / "model.onnx"
    assert err[-1] == f"wrote {model} and {out / 'metrics.json'}; open it with: attnviz open {model}"


def test_epochs_count_the_training_split_as_built(tmp_path, capsys):
    """--epochs computed steps from n_train; translation carves its validation split out of those examples (and
    adds gloss pairs, and drops long verses), so `--epochs 1` trained a fraction of a pass.  Tiny
    translation-synthetic: 512 sentences, every 4th held out for validation: 384 left, batches of 32: 12 steps."""
    out = tmp_path / "r"
    argv = ["train", "translation-synthetic", "--preset", "tiny", "--epochs", "1", "--out", str(out), "--quiet"]
    assert main([*argv, "--set", "validation=4"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["steps"] == 12  # was 16 (512 / 32)
    # and the first line says what it trains on (n_train is a cap for translation: its verses, or 4,000 synthetic)
    assert "parameters) on 384 training examples for 12 steps on " in captured.err
    stored = json.loads((out / "config.json").read_text())["train"]
    assert (stored["epochs"], stored["steps"], stored["warmup"]) == (1, 12, 1)  # warm-up at most a tenth of the run
    assert (
        main([*argv, "--set", "validation=4"]) == 2
    )  # the same command again: a finished run (steps agree with the stored ones)
    assert "already holds a finished run" in _one_error_line(capsys)


def test_init_from_a_run_of_another_size_names_the_differences_and_how_it_was_trained(tmp_path, capsys):
    """It said only "that run's model configuration differs from this one": not in what, nor what to type."""
    base = tmp_path / "base"
    assert main([*TRAIN, "--out", str(base), "--quiet"]) == 0  # the tiny preset: d_model 16
    capsys.readouterr()
    argv = ["train", "sequence-classification", "--steps", "2", "--out", str(tmp_path / "ft"), "--quiet"]
    assert main([*argv, "--set", f"init_from={base}"]) == 2  # the demo preset: d_model 64
    line = _one_error_line(capsys)
    assert "(d_ff 32, now 128; d_model 16, now 64; n_dec_layers 1, now 2; and 2 more)" in line
    assert f"attnviz train sequence-classification --preset tiny, and the model fields it set; see {base}" in line
    assert main([*argv, "--preset", "tiny", "--set", f"init_from={base}"]) == 0  # as the line says


def test_a_cpu_build_of_torch_beside_a_gpu_is_named_as_the_reason(tmp_path, capsys, monkeypatch):
    """The README installs torch from PyTorch's CPU index; on a machine with an NVIDIA GPU, --device cuda said
    "PyTorch sees no CUDA GPU" (a driver hunt) and auto trained on the CPU without a word."""
    import torch

    from attnviz.runtime import isolation

    if torch.version.cuda is not None:
        pytest.skip("a CUDA build of torch")
    monkeypatch.setattr(isolation, "gpu_present", lambda: True)  # the device nodes of a GPU machine
    out = tmp_path / "r"
    assert main([*TRAIN, "--out", str(out), "--quiet", "--device", "cuda"]) == 2
    line = _one_error_line(capsys)
    assert f"this PyTorch ({torch.__version__}) is a CPU-only build and cannot use this machine's GPU" in line
    assert line.endswith("use --device cpu or auto") and not out.exists()
    assert main([*TRAIN, "--out", str(out), "--quiet"]) == 0
    notes = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("attnviz: note: training on the CPU")]
    assert len(notes) == 1 and "CPU-only build" in notes[0]
    monkeypatch.setattr(isolation, "gpu_present", lambda: False)  # no GPU: nothing to say
    assert main([*TRAIN, "--out", str(tmp_path / "r2"), "--quiet"]) == 0
    assert "training on the CPU" not in capsys.readouterr().err


def test_validation_2_and_3_carve_a_split_and_too_few_pairs_are_one_line(tmp_path, capsys):
    """Every N-th training pair from offset 3: with N = 2 or 3 no index i has i % N == 3, so the validation split was
    empty and translation's encode() failed on it (internal error); too few pairs for both splits did the same."""
    from attnviz.training import data_translation as dt

    pairs = dt.synthetic_pairs(12, seed=3)
    for every, picked in ((2, [1, 3, 5, 7, 9, 11]), (3, [0, 3, 6, 9]), (4, [3, 7, 11])):  # 4: as before
        fit, val = dt.carve_validation(pairs, every)
        assert [p.id for p in val] == [pairs[i].id for i in picked]
        assert len(fit) + len(val) == 12 and {p.id for p in fit}.isdisjoint({p.id for p in val})
    argv = ["train", "translation-synthetic", "--preset", "tiny", "--steps", "2", "--quiet"]
    assert main([*argv, "--out", str(tmp_path / "a"), "--set", "validation=2", "--set", "eval_every=1"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"]["validation"]["step"] in (1, 2)
    out = tmp_path / "b"
    assert main([*argv, "--out", str(out), "--set", "validation=2", "--set", "n_train=1"]) == 2
    assert _one_error_line(capsys).startswith("validation=2: 1 training pairs leave 0 for validation and 1 to train on")
    assert not out.exists()


def test_a_finished_run_asked_for_more_steps_says_how_to_train_it_further(tmp_path, capsys):
    """`--steps 6` on a finished 3-step run offered only --restart (overwrite) or another --out (from scratch)."""
    run = tmp_path / "r"
    assert main([*TRAIN, "--out", str(run), "--quiet"]) == 0
    capsys.readouterr()
    longer = [*TRAIN[:-1], "6", "--quiet"]
    assert main([*longer, "--out", str(run)]) == 2
    line = _one_error_line(capsys)
    assert "checkpoint.json: steps 3, now 6)" in line and line.endswith(f"(--set init_from={run} --out NEW)")
    new = tmp_path / "new"
    assert main([*longer, "--out", str(new), "--set", f"init_from={run}"]) == 0  # what it says works
    assert json.loads(capsys.readouterr().out)["steps"] == 6


def test_eval_takes_the_run_folder_as_open_and_inspect_do(tmp_path, capsys):
    run = tmp_path / "r"
    assert main([*TRAIN, "--out", str(run), "--quiet"]) == 0
    trained = json.loads(capsys.readouterr().out)["metrics"]
    assert main(["eval", str(run)]) == 0  # it said "model r: is a folder; give a file"
    ev = json.loads(capsys.readouterr().out)
    assert ev["model"] == str(run / "model.onnx") and ev["metrics"] == trained
    (tmp_path / "empty").mkdir()
    assert main(["eval", str(tmp_path / "empty")]) == 2
    assert "is a folder; give a file" in _one_error_line(capsys)


def test_the_nth_gpu_is_still_a_device_and_refused_where_torch_has_no_cuda(tmp_path, capsys):
    import torch

    from attnviz.training.config import TrainConfig

    assert TrainConfig(device="cuda:1").device == "cuda:1"  # --set device=cuda:1, and such a run's stored config
    if torch.cuda.is_available():
        pytest.skip("torch sees a GPU here")
    assert main([*TRAIN, "--out", str(tmp_path / "r"), "--set", "device=cuda:1"]) == 2
    assert _one_error_line(capsys).startswith("device 'cuda:1' requested but ")


def test_more_classes_than_the_task_has_labels_are_named_in_the_export_and_said(tmp_path, capsys):
    """`--set n_classes=3` on a two-label task wrote labels ["A", "B"] beside three logits: the viewer named the
    third score from nothing.  Now the run says so at its start and the export names every logit."""
    import onnx

    from attnviz.core import metadata

    out = tmp_path / "r"
    assert main([*TRAIN, "--out", str(out), "--quiet", "--set", "n_classes=3"]) == 0
    err = capsys.readouterr().err
    assert "n_classes 3 is more than sequence-classification's 2 labels (A, B)" in err
    proto = onnx.load(str(out / "model.onnx"))
    logits = next(o for o in proto.graph.output if o.name == "logits")
    assert logits.type.tensor_type.shape.dim[-1].dim_value == 3  # one name per logit, as the graph has them
    assert metadata.parse({p.key: p.value for p in proto.metadata_props})["labels"] == ["A", "B", "class 2"]


def test_a_batch_larger_than_the_training_set_is_said(tmp_path, capsys):
    out = tmp_path / "r"
    argv = [*TRAIN, "--out", str(out), "--quiet", "--set", "n_train=20", "--set", "batch_size=32"]
    assert main(argv) == 0
    assert (
        "batch_size 32 is more than the 20 training examples: every batch repeats examples" in capsys.readouterr().err
    )


def test_validation_progress_lines_are_numbers_not_the_metrics_json(tmp_path, capsys):
    """translation's validation line printed the whole dict (per-head AER tables, example translations)."""
    out = tmp_path / "r"
    argv = ["train", "translation-synthetic", "--preset", "tiny", "--steps", "4", "--out", str(out)]
    assert main([*argv, "--set", "validation=4", "--set", "eval_every=2"]) == 0
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("step 2: ")]
    assert len(lines) == 1 and "{" not in lines[0] and len(lines[0]) < 300, lines
    assert re.fullmatch(r"step 2: validation \w+ [-+.\de]+(, \w+ [-+.\de]+)*", lines[0]), lines[0]
