"""``attnviz average RUN --weights F...``: average checkpoints of a run, score the average, optionally export it."""

from __future__ import annotations

import argparse
import json

HELP = (
    "average the weights of several checkpoints of one run (e.g. its snapshots/), measure the average on the "
    "run's validation split and, with --out, export it like 'attnviz train' does"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="the finished 'attnviz train' run folder the checkpoints belong to")
    p.add_argument(
        "--weights", nargs="+", required=True, metavar="FILE", help="safetensors checkpoints to average (2 or more)"
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="export the average there (model.onnx, measured on the test split once, checkpoint.safetensors, "
        "metrics.json); without it only the validation split is measured",
    )


def run(args) -> int:
    import time
    from pathlib import Path

    from attnviz.core.extras import require

    require("average", "torch", "safetensors")
    from attnviz import AttnvizError
    from attnviz.core.untrusted import read_json
    from attnviz.training import checkpoint as ckpt
    from attnviz.training.average import average_weights, check_fits
    from attnviz.training.config import ModelConfig, TrainConfig
    from attnviz.training.export import export
    from attnviz.training.loop import Trainer
    from attnviz.training.runners import TorchRunner
    from attnviz.training.tasks import get_task

    run_dir = Path(args.run)
    seen: dict[Path, str] = {}
    for f in args.weights:  # twice would weigh one checkpoint double in the mean: a slip (a glob plus a name)
        key = Path(f).resolve()
        if key in seen:
            raise AttnvizError(f"--weights names {f} twice (as {seen[key]}); list each checkpoint once")
        seen[key] = f
    if args.out is not None:
        from attnviz.core.writes import guard

        outs = [Path(args.out) / n for n in (ckpt.CONFIG, ckpt.TENSORS, "model.onnx", "metrics.json")]
        guard({"the run folder": run_dir, "a --weights file": args.weights}, {"--out": outs})
    cfg_file = run_dir / ckpt.CONFIG
    if not cfg_file.is_file() or not (run_dir / "model.onnx").is_file():
        raise AttnvizError(f"{run_dir} is not a finished 'attnviz train' run folder (config.json and model.onnx)")
    try:
        cfg = read_json(cfg_file, "run config", fix="pass a run folder")
        task = get_task(cfg["task"])
        mcfg, tcfg = ModelConfig.from_dict(cfg["model"]), TrainConfig.from_dict(cfg["train"])
    except (ValueError, KeyError, TypeError) as e:
        raise AttnvizError(f"{cfg_file} is not a run configuration ({e}); pass a run folder") from None
    if len(args.weights) < 2:
        raise AttnvizError("--weights needs at least two checkpoint files to average")
    if args.out is None and not tcfg.validation:  # it averaged, measured nothing and printed the file list, exit 0
        raise AttnvizError(
            f"{run_dir} was trained without a validation split (--set validation=N), so there is nothing to measure "
            "the average on without exporting it: pass --out DIR to export it and measure it on the test split"
        )
    if args.out is not None:
        ckpt.check_run_folder(args.out, task.name)
        out = ckpt.ensure_writable_dir(args.out)
    weights = average_weights(args.weights)
    tcfg.init_from = str(run_dir)  # the run's task state (tokenizers); its weights are replaced below
    tcfg.average_of = [str(Path(f)) for f in args.weights]
    trainer = Trainer(task, mcfg, tcfg)
    check_fits(weights, trainer.model, args.weights, run_dir)
    trainer.model.load_state_dict(weights, strict=True)
    trainer.model.eval()
    t0 = time.perf_counter()
    summary: dict = {"run": str(run_dir), "weights": tcfg.average_of}
    if tcfg.validation and trainer.val_data is not None:
        task.val_bleu = bool(getattr(task, "decodes", False))  # translation: BLEU beside the alignment
        summary["validation"] = task.validate(TorchRunner(trainer.model, trainer.device), trainer.val_data, mcfg)
    if args.out is not None:
        ckpt.atomic_write_json(out / ckpt.CONFIG, {"task": task.name, "model": mcfg.to_dict(), "train": tcfg.to_dict()})
        ckpt.save_weights(out / ckpt.TENSORS, trainer.model, tcfg.steps)
        val = {"averaged": True, "metrics": summary["validation"]} if "validation" in summary else None
        result = export(trainer.model, task, mcfg, tcfg, out / "model.onnx", evaluate=True, validation=val)
        summary.update(metrics=result["metrics"], parity=result["parity"], model=str(out / "model.onnx"))
        ckpt.atomic_write_json(out / "metrics.json", summary)
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(summary, indent=2))
    return 0
