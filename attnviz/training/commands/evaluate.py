"""``attnviz eval MODEL.onnx``: score an exported model with onnxruntime on its task's held-out data."""

from __future__ import annotations

import argparse
import json

HELP = "run a model exported by 'attnviz train' on its task's held-out data and print the metrics as JSON"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "model",
        metavar="MODEL.onnx",
        help="a model written by 'attnviz train' (metadata names its task), or its run folder (spoken-digits: the "
        "exported speech folder)",
    )
    p.add_argument("--n", type=int, default=None, metavar="N", help="score only the first N held-out examples")
    p.add_argument("--provider", default="cpu", choices=("cpu", "cuda"), help="onnxruntime execution provider")


def run(args) -> int:
    import copy
    import time
    from pathlib import Path

    from attnviz import AttnvizError
    from attnviz.training.exported import read_config
    from attnviz.training.runners import OnnxRunner, take
    from attnviz.training.tasks import get_task
    from attnviz.training.tasks.spoken_digits import evaluate_folder, is_task_folder

    if args.n is not None and args.n < 1:
        raise AttnvizError("--n must be at least 1")
    speech = Path(args.model)
    if speech.is_dir() and not is_task_folder(speech) and is_task_folder(speech / "model"):  # its run folder
        speech = speech / "model"
    if speech.is_dir() and is_task_folder(speech):  # a spoken-digits Whisper folder
        args.model = str(speech)
        t0 = time.perf_counter()
        metrics = evaluate_folder(Path(args.model), args.n)
        out = {"model": args.model, "task": "spoken-digits", "split": "test", "provider": "cpu", "metrics": metrics}
        print(json.dumps(out | {"seconds": round(time.perf_counter() - t0, 2)}, indent=2))
        return 0
    run_model = Path(args.model) / "model.onnx"
    if Path(args.model).is_dir() and run_model.is_file():  # a run folder, as open / inspect / extract take it
        args.model = str(run_model)  # (it said "is a folder; give a file")
    name, mcfg, tcfg, meta = read_config(args.model)
    task = get_task(name)
    if hasattr(task, "restore"):  # tasks whose state lives in the model (translation: its trained tokenizers)
        # into a copy: the registry's task is every later caller's in this process (a test suite, a session)
        task = copy.copy(task)
        task.restore(meta)
    runner = OnnxRunner(args.model, provider=args.provider)
    data = task.make_split("test", mcfg, tcfg)
    if args.n is not None:
        data = take(data, slice(0, args.n))
    t0 = time.perf_counter()
    metrics = task.evaluate(runner, data, mcfg)
    out = {
        "model": args.model,
        "task": name,
        "split": "test",
        "provider": runner.provider,
        "metrics": metrics,
        "seconds": round(time.perf_counter() - t0, 2),
    }
    print(json.dumps(out, indent=2))
    return 0
