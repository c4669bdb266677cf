"""``attnviz export-hf MODEL_DIR --out DIR``: a local Hugging Face model folder -> a checked, self-described ONNX export."""

from __future__ import annotations

import argparse

from attnviz.core.notice import say

HELP = (
    "export a local Hugging Face model folder (config + weights + tokenizer) to ONNX for attnviz, "
    "with eager attention and metadata, checked against transformers"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_dir", metavar="MODEL_DIR", help="folder with config.json, weights and tokenizer files")
    p.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="new (or empty) folder for model.onnx (a vision-language model: onnx/ with its three files), "
        "tokenizer and configs",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier export already in DIR (once the new one passes its check; a folder of other files "
        "is refused, never replaced)",
    )
    p.add_argument("--opset", type=int, default=17, help="ONNX opset (default 17)")
    p.add_argument(
        "--text", default=None, help="text used for the check against transformers (default: built-in sentences)"
    )


def run(args) -> int:
    from attnviz import AttnvizError

    try:
        import transformers  # noqa: F401
    except ImportError:
        raise AttnvizError("export-hf needs transformers: pip install 'attnviz[hf]'") from None
    from attnviz.training.hf_export import export_hf

    if not 14 <= args.opset <= 23:
        raise AttnvizError(f"--opset {args.opset}: use an opset from 14 to 23 (17 is the tested default)")
    from attnviz.core.writes import guard

    guard({"the model folder": args.model_dir}, {"--out": args.out})
    r = export_hf(args.model_dir, args.out, opset=args.opset, text=args.text, overwrite=args.overwrite)
    if r.missing_weights:
        say(
            f"{len(r.missing_weights)} weights were not in the checkpoint and are random "
            f"({', '.join(r.missing_weights[:4])}{', ...' if len(r.missing_weights) > 4 else ''})"
        )
    print(
        f"wrote {r.path} ({r.family}, task {r.task}): {r.sites} attention maps equal transformers' within "
        f"{r.max_diff:.1e} at {' and '.join(map(str, r.lengths))} tokens; open it with: attnviz open {r.path}"
    )
    return 0
