"""Arguments shared by commands that run a model on an input (extract, figure, open)."""

from __future__ import annotations

import argparse


class DeprecatedAlias(argparse.Action):
    """An old spelling of a flag: still works, with a one-line note naming the new one (kept for one release)."""

    def __init__(self, option_strings, dest, new: str = "", **kw):
        self.new = new
        super().__init__(option_strings, dest, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        import sys

        print(f"attnviz: note: {option_string} is deprecated here; use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_input_arguments(p: argparse.ArgumentParser, model_required: bool = True) -> None:
    if model_required:
        p.add_argument(
            "model", metavar="MODEL", help="ONNX model file, or an export folder (optimum encoder + decoder files)"
        )
    src = p.add_argument_group("input (one of)")
    src.add_argument("--inputs", metavar="FEEDS.npz", help="raw feeds: .npz keyed by ONNX input name")
    src.add_argument("--text", metavar="T", help="text (tokenised with the model's tokenizer)")
    src.add_argument(
        "--text-pair", metavar="T2", help="second text: sentence B for encoders, the forced target for encoder-decoders"
    )
    src.add_argument("--image", metavar="PATH", help="image file for vision models")
    src.add_argument("--audio", metavar="FILE", help="sound file (WAV, FLAC, OGG) for speech models (Whisper)")
    p.add_argument("--tokenizer", metavar="FILE", help="tokenizer.json (default: from metadata or beside the model)")
    p.add_argument(
        "--max-tokens",
        type=int,
        metavar="N",
        help="keep only the first N tokens of the text (the model's "
        "position limit is checked and named when a text is longer)",
    )
    p.add_argument(
        "--max-seconds",
        type=float,
        metavar="S",
        help="keep only the first S seconds of the audio (a clip longer than the model's window is refused)",
    )
    p.add_argument(
        "--generate",
        type=int,
        default=0,
        metavar="N",
        help="greedy generation steps for decoder / encoder-decoder models",
    )
    p.add_argument(
        "--provider", choices=("auto", "cpu", "cuda"), default="auto", help="execution provider (default auto)"
    )
    p.add_argument(
        "--memory",
        dest="mode",
        choices=("auto", "dense", "ondemand"),
        default="auto",
        help="dense keeps all maps; ondemand keeps Q/K and recomputes heads (long inputs); auto picks by memory",
    )
    # --mode meant memory here but aggregation in `open`: one meaning per flag now
    p.add_argument(
        "--mode",
        dest="mode",
        choices=("auto", "dense", "ondemand"),
        action=DeprecatedAlias,
        new="--memory",
        help=argparse.SUPPRESS,
    )
    p.add_argument(
        "--image-size",
        type=int,
        nargs=2,
        metavar=("H", "W"),
        help="resize images to H W (default: metadata / input shape)",
    )
    p.add_argument(
        "--image-mean", type=float, nargs="+", metavar="M", help="per-channel mean (default: metadata, else 0.5)"
    )
    p.add_argument(
        "--image-std", type=float, nargs="+", metavar="S", help="per-channel std (default: metadata, else 0.5)"
    )


def analyze_from_args(args):
    """Open args.model and run it on the input the arguments name; returns (model, result)."""
    from attnviz import AttnvizError
    from attnviz.runtime import open_model

    given = [x for x in (args.inputs, args.text, args.image, args.audio) if x is not None]
    if not given:
        raise AttnvizError(no_input(args.model))
    from attnviz.runtime.host import prestart

    prestart()  # the isolation child starts while the model is read
    model = open_model(args.model, provider=args.provider, tokenizer=args.tokenizer)
    result = model.analyze(
        text=args.text,
        text_pair=args.text_pair,
        image=args.image,
        feeds=args.inputs,
        generate=args.generate,
        mode=args.mode,
        image_size=tuple(args.image_size) if args.image_size else None,
        image_mean=args.image_mean,
        image_std=args.image_std,
        max_tokens=getattr(args, "max_tokens", None),
        audio=args.audio,
        max_seconds=args.max_seconds,
    )
    return model, result


def no_input(model_path) -> str:
    """The line for a command given no input: what this model takes, shown by its own sample when it has one
    (a forecaster's series goes in --text as numbers, which the generic line never said)."""
    from pathlib import Path

    from attnviz.core.words import with_article
    from attnviz.runtime.sample import sample_for_path

    generic = "no input: give --text T, --image PATH, --audio FILE or --inputs FEEDS.npz"
    path = Path(str(model_path))
    sample = sample_for_path(path) if path.is_file() else None
    if sample is None or not (set(sample.values) & {"text", "image"}):
        return generic
    flag, value = next((f"--{k}", str(sample.values[k])) for k in ("text", "image") if k in sample.values)
    what = sample.describe().split(",")[0]
    what = what if what == "text" else with_article(what)  # "text", "an image", "a numeric series"
    shown = value if len(value) <= 40 else value[:40] + "…"
    return f"no input: {path.name} takes {what}; give {flag} (its sample: {flag} {shown!r}) or --inputs FEEDS.npz"
