"""``attnviz train TASK --out DIR``: train a model on a built-in task and export it to DIR/model.onnx."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from attnviz.core.notice import say
from attnviz.training.config import DEVICES  # (no torch: config.py is plain dataclasses)

HELP = "train a small transformer on a built-in task and export it, self-described, to DIR/model.onnx"

# kept here (not imported from tasks) so `attnviz --help` does not import torch
TASK_NAMES = (
    "sequence-classification, forecasting, vit-classification, translation, captioning, "
    "translation-synthetic, toy-reverse, toy-caption, spoken-digits"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("task", metavar="TASK", help=f"task name ({TASK_NAMES})")
    p.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="run folder: model.onnx, checkpoint.safetensors, checkpoint.json, config.json, metrics.json (and "
        "sample.png for an image task, snapshots/ with --set snapshot_every=N); an unfinished run there is resumed",
    )
    p.add_argument(
        "--preset",
        default="demo",
        choices=("tiny", "demo"),
        help="model/training size (default: demo; tiny is a smoke preset for tests: "
        "seconds of training, maps near chance)",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument("--epochs", type=int, metavar="N", help="train N passes over the training set (sets --steps)")
    g.add_argument("--steps", type=int, metavar="N", help="optimizer steps (default: the preset's)")
    p.add_argument("--seed", type=int, default=None, help="seed for parameters, batches and dropout (default 0)")
    p.add_argument("--device", default=None, choices=DEVICES, help="default: auto (CUDA when available)")
    p.add_argument(
        "--restart",
        "--overwrite",
        dest="restart",
        action="store_true",
        help="start over in DIR, replacing a run (or other files of ours) already there",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="FIELD=JSON",
        help="override one model or training config field, e.g. --set dropout=0.2 --set 'align_heads=[[2,0]]' "
        "(repeatable; the value is JSON, or a bare string)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _clock(seconds: float) -> str:
    """0:07, 12:34, 1:02:03 (a demo run's "eta 9180s" had to be divided by hand)."""
    h, rest = divmod(int(round(seconds)), 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _bar(ev, start: int = 0, width: int = 20) -> str:
    """One progress line: steps, loss, rate, elapsed and ETA.  ``start``: the step this process began at.  The ETA
    was elapsed / fraction done, which counts a resumed run's earlier steps as done in this process's seconds: resumed
    at step 100 of 3000, it said 2:20 left at step 200 where 4:40 were (100 steps took 10 s, 2800 to go)."""
    frac = ev.step / max(1, ev.total)
    filled = int(frac * width)
    done = ev.step - start
    rate = done / ev.elapsed if ev.elapsed > 0 and done > 0 else 0.0
    speed = f"{rate:6.1f} steps/s" if rate >= 1 else f"{1 / rate:6.1f} s/step" if rate else "   ? steps/s"
    eta = _clock((ev.total - ev.step) / rate) if rate else "?"
    return (
        f"\r[{'#' * filled}{'.' * (width - filled)}] {ev.step}/{ev.total} loss {ev.loss:.4f} {speed} "
        f"{_clock(ev.elapsed)} eta {eta} "
    )


def _fitted(line: str) -> str:
    """The bar cut to the terminal's width: a line that wraps is not redrawn by "\r" (each update a new row)."""
    import shutil

    return line[: max(20, shutil.get_terminal_size().columns - 1)]


# what a --set value may be, by the field's annotation (the config modules use postponed annotations, so these
# are the names as written): an int field takes no float or bool, a float field takes an int (JSON writes 1.0 as 1)
_SET_ACCEPTS: dict[str, tuple[tuple[type, ...], str]] = {
    "bool": ((bool,), "true or false"),
    "int": ((int,), "a whole number"),
    "float": ((int, float), "a number"),
    "list": ((list,), "a JSON list"),
}


def _checked(name: str, raw: str, value: Any, annotation: str) -> Any:
    """``value`` (``raw`` read as JSON) for a config field annotated ``annotation``; one line when it is of another
    kind (a bare word for a number field would otherwise fail deep inside training as a TypeError)."""
    from attnviz import AttnvizError

    if annotation == "str":  # a string field takes the text as typed, even one that reads as JSON (a folder "2024")
        return value if isinstance(value, str) else raw
    if annotation not in _SET_ACCEPTS:
        return value
    accepts, what = _SET_ACCEPTS[annotation]
    if not isinstance(value, accepts) or (annotation != "bool" and isinstance(value, bool)):
        raise AttnvizError(f"--set {name}={raw}: {name} takes {what}")
    return float(raw) if annotation == "float" else value


# config fields a run records but --set does not take, each with what sets it: `--set task=forecasting` on a
# sequence-classification run trained that task and stored "forecasting" in its config.json
_SET_ELSEWHERE = {
    "task": "the TASK argument",
    "preset": "--preset",
    "epochs": "--epochs N",
    "average_of": "'attnviz average'",
}
# model fields the task's data and loss are made for (`--set head=lm` on a classifier, `input_kind=series` on a
# token task): another value failed inside torch on the first batch as an internal error
_TASK_FIXED = ("arch", "head", "input_kind")


def _settable(task: str, name: str, raw: str, cfg, value: Any) -> None:
    from attnviz import AttnvizError

    if name in _SET_ELSEWHERE:
        raise AttnvizError(f"--set {name}: {name} is set by {_SET_ELSEWHERE[name]}, not --set")
    if name in _TASK_FIXED and value != getattr(cfg, name):
        raise AttnvizError(
            f"--set {name}={raw}: {task}'s data and loss are made for {name} {getattr(cfg, name)!r}; "
            f"leave {name} to the task (attnviz train --help lists the tasks)"
        )


def _apply_overrides(mcfg, tcfg, overrides: list[str]) -> None:
    """``--set FIELD=VALUE`` onto the model or training config (the field name says which), re-validated."""
    from dataclasses import fields

    from attnviz import AttnvizError
    from attnviz.core.untrusted import parse_json

    for item in overrides:
        name, sep, raw = item.partition("=")
        if not sep:
            raise AttnvizError(f"--set {item!r}: expected FIELD=VALUE")
        try:
            value = parse_json(raw, f"--set {name}")
        except AttnvizError:  # not JSON: the bare word is the value (a string field), checked below
            value = raw
        for cfg in (mcfg, tcfg):
            annotations = {f.name: str(f.type) for f in fields(cfg)}
            if name in annotations:
                value = _checked(name, raw, value, annotations[name])
                _settable(tcfg.task, name, raw, cfg, value)
                setattr(cfg, name, value)
                break
        else:
            raise AttnvizError(f"--set {name}: no such model or training config field")
    mcfg.validate()
    tcfg.__post_init__()


def run(args) -> int:
    from attnviz.core.extras import require

    require("train", "torch", "safetensors")  # before any work: safetensors was first needed after the last step
    from attnviz.core.writes import results_folder_on_failure
    from attnviz.training.checkpoint import STATE

    # a run that fails before its first checkpoint leaves no folder it made (a later `train --out` refused it as
    # "not empty"); one with a checkpoint keeps it, and the line says the same command resumes
    with results_folder_on_failure(args.out, STATE):
        return _run(args)


def _run(args) -> int:
    from attnviz import AttnvizError
    from attnviz.training import checkpoint as ckpt
    from attnviz.training.checkpoint import MODEL, atomic_write_json, check_run_folder
    from attnviz.training.export import export
    from attnviz.training.loop import Trainer, cpu_build_beside_gpu, steps_for_epochs
    from attnviz.training.tasks import get_task

    task = get_task(args.task)
    if task.trains_itself:
        return _run_own(task, args)
    mcfg, tcfg = task.configs(args.preset)
    _apply_overrides(mcfg, tcfg, args.overrides)
    if args.seed is not None:
        tcfg.seed = args.seed
    if args.device is not None:
        tcfg.device = args.device
    if args.epochs is not None:
        if args.epochs < 1:
            raise AttnvizError("--epochs must be at least 1")
        tcfg.epochs = args.epochs
        tcfg.steps = steps_for_epochs(args.epochs, tcfg)  # for now: the trainer counts the split it builds
    elif args.steps is not None:
        if args.steps < 1:
            raise AttnvizError("--steps must be at least 1")
        tcfg.steps = args.steps
    if not tcfg.epochs:  # (with --epochs the trainer shortens the warm-up once it knows the steps)
        tcfg.warmup = min(tcfg.warmup, max(1, tcfg.steps // 10))
    out = Path(args.out)
    from attnviz.core.writes import guard

    outs = [out / n for n in (MODEL, "metrics.json", ckpt.CONFIG, ckpt.STATE, ckpt.TENSORS)]
    guard({"the run it starts from (init_from)": tcfg.init_from or None}, {"--out": outs})
    if not args.restart:
        check_run_folder(args.out, task.name)  # the trainer makes it once the configuration fits the task's data
    tty = sys.stderr.isatty() and not args.quiet
    trainer = Trainer(task, mcfg, tcfg, out=out, restart=args.restart, exported=MODEL)
    if trainer.device.type == "cpu" and tcfg.device == "auto" and (why := cpu_build_beside_gpu()):
        say(f"training on the CPU: {why}")  # auto fell back without a word, at CPU speed
    if args.preset == "tiny":
        say(
            "--preset tiny is a smoke preset (a few seconds of training, for tests): expect chance-level "
            "metrics and unstructured maps; use the default demo preset for a model worth looking at"
        )
    print(
        f"training {task.name} ({args.preset}: {mcfg.arch}, {sum(p.numel() for p in trainer.model.parameters())} "
        f"parameters) on {trainer.n_train} training examples for {tcfg.steps} steps on {trainer.device}, seed "
        f"{tcfg.seed}",  # the examples as built: translation's n_train is a cap (7,391 verses), gloss pairs add
        file=sys.stderr,
    )
    for note in _setting_notes(task, mcfg, tcfg, trainer.n_train):
        say(note)
    t0 = time.perf_counter()
    start = trainer.step  # where a resumed run took up: the rate and ETA count this process's steps only
    events = trainer.events()
    last = None
    try:
        for ev in events:
            last = ev
            if ev.message:
                say(ev.message)
            elif ev.done:
                pass
            elif len(ev.metrics) > 1 and not args.quiet:  # a held-out evaluation (eval_every)
                held = {k: v for k, v in ev.metrics.items() if k != "lr"}
                what = "validation" if "validation" in held else "held-out"
                if isinstance(held.get(what), dict):  # the validation split's numbers, said once as "validation"
                    held = {**{k: v for k, v in held.items() if k != what}, **held[what]}
                print(("\n" if tty else "") + f"step {ev.step}: {what} {_headline(held)}", file=sys.stderr)
            elif tty:
                print(_fitted(_bar(ev, start)), end="", file=sys.stderr, flush=True)
            elif not args.quiet and (ev.step % max(1, tcfg.steps // 20) < tcfg.log_every or ev.step == ev.total):
                print(_bar(ev, start).strip(), file=sys.stderr)
    except KeyboardInterrupt as e:  # told as the stop it was (exit 130, or 143 for a SIGTERM), with how to go on
        events.close()
        raise type(e)(
            f"training stopped at step {trainer.step}/{tcfg.steps}; checkpoint saved in {out}, "
            f"run the same command again to resume"
        ) from None
    if tty:
        print(file=sys.stderr)
    train_s = time.perf_counter() - t0
    held = last.metrics if last is not None else {}  # a finished run resumed yields no progress
    print(f"trained in {train_s:.1f}s; held-out (PyTorch): {_headline(held)}", file=sys.stderr)
    try:
        result = export(trainer.model, task, mcfg, tcfg, out / MODEL, evaluate=True, validation=trainer.best)
    except KeyboardInterrupt as e:  # the finished checkpoint stands: the same command exports it without training
        raise type(e)(
            f"stopped while exporting; training finished and is saved in {out}, run the same command again to export it"
        ) from None
    summary = {
        "task": task.name,
        "preset": args.preset,
        "seed": tcfg.seed,
        "steps": tcfg.steps,
        "train_seconds": round(train_s, 1),
        "device": str(trainer.device),
        "metrics": result["metrics"],
        "parity": result["parity"],
        "model": str(out / MODEL),
    }
    if hasattr(task, "sample_image"):  # attnviz.sample's image for this run's model (runtime/sample.py finds it)
        from PIL import Image

        from attnviz.core.writes import atomic_path
        from attnviz.runtime.sample import RUN_SAMPLE

        with atomic_path(out / RUN_SAMPLE, "--out") as tmp:
            Image.fromarray(task.sample_image(mcfg)).save(tmp, format="PNG")
    atomic_write_json(out / "metrics.json", summary)
    print(json.dumps(summary, indent=2))
    # where it went and what to do next (the JSON above is for scripts; export-hf ends the same way)
    model = out / MODEL
    print(f"wrote {model} and {out / 'metrics.json'}; open it with: attnviz open {model}", file=sys.stderr)
    return 0


def _run_own(task, args) -> int:
    """A task that trains and exports by itself (spoken-digits: a Whisper folder); the --set fields are the loop's."""
    from attnviz import AttnvizError

    if args.overrides or args.epochs is not None or args.restart:
        used = "--set" if args.overrides else "--epochs" if args.epochs is not None else "--restart"
        raise AttnvizError(f"{used}: {task.name} takes --preset, --steps and --seed only (it trains a Whisper folder)")
    if args.steps is not None and args.steps < 1:
        raise AttnvizError("--steps must be at least 1")
    out = Path(args.out)
    summary = task.run(
        out, args.preset, args.seed, args.steps, lambda line: None if args.quiet else print(line, file=sys.stderr)
    )
    print(json.dumps(summary, indent=2))
    print(
        f"wrote {summary['model']} and {out / 'metrics.json'}; open it with: attnviz open {summary['model']}",
        file=sys.stderr,
    )
    return 0


def _headline(metrics: dict) -> str:
    """The metrics' top-level numbers, "accuracy 0.994, n 2000": translation's whole dict (per-head AER tables,
    example translations) made one stderr line of 3,000 characters."""
    shown = [f"{k} {v:.4g}" for k, v in metrics.items() if isinstance(v, int | float) and not isinstance(v, bool)]
    return ", ".join(shown) or "none measured"


def _setting_notes(task, mcfg, tcfg, n_train: int) -> list[str]:
    """What a configuration does that its numbers do not say (each a line at the run's start)."""
    from attnviz.training.export import extra_class_names

    notes = []
    if tcfg.batch_size > n_train:
        notes.append(
            f"batch_size {tcfg.batch_size} is more than the {n_train} training examples: every batch repeats "
            "examples (batches are drawn with replacement); lower --set batch_size or raise n_train"
        )
    labels = task.metadata(mcfg).get("labels") if mcfg.head == "classify" else None
    if labels is not None and mcfg.n_classes > len(labels):
        notes.append(
            f"n_classes {mcfg.n_classes} is more than {task.name}'s {len(labels)} labels ({', '.join(labels)}): "
            f"no example has class {len(labels)} or above; the export names them "
            f"{', '.join(extra_class_names(len(labels), mcfg.n_classes))}"
        )
    return notes
