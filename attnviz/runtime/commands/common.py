"""Arguments shared by commands that run a model on an input (extract, figure, open)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from attnviz.core.notice import say
from attnviz.core.steps_default import DEFAULT_GENERATE

if TYPE_CHECKING:
    from attnviz.runtime.request import AnalyzeRequest


class DeprecatedAlias(argparse.Action):
    """An old spelling of a flag: still works, with a one-line note naming the new one (kept for one release)."""

    def __init__(self, option_strings, dest, new: str = "", **kw):
        self.new = new
        super().__init__(option_strings, dest, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        say(f"{option_string} is deprecated here; use {self.new}")
        setattr(namespace, self.dest, values)


# --max-tokens of open, extract and figure: one rule with the corpus's (runtime/truncation.py)
MAX_TOKENS_HELP = (
    "keep only the first N tokens of the text, a final [SEP] or </s> kept last; an encoder's --text-pair pair keeps "
    "its special tokens and loses tokens of the longer sentence first, from its end (Hugging Face tokenizers' "
    "longest_first, as 'attnviz corpus --max-tokens' cuts a pair); an encoder-decoder's source keeps its first N "
    "and its --text-pair target the decoder's first N rows (the start token, then the target's tokens), as a "
    "corpus run cuts them"
)


def add_variant_argument(p: argparse.ArgumentParser) -> None:
    """``--variant``: which of a Hub repository's quantized sibling files to open (inspect, extract, figure, open)."""
    p.add_argument(
        "--variant",
        metavar="NAME",
        help="a Hub repository's quantized sibling files (q4, int8, fp16, quantized, ...; default full precision; "
        "'attnviz inspect REPO' lists them)",
    )


class SeveralImages(argparse.Action):
    """``--image`` given once is its path, as always; given again, the list of them in order (several images in
    one prompt, for a vision–language model whose processor takes several)."""

    def __call__(self, parser, namespace, values, option_string=None):
        had = getattr(namespace, self.dest, None)
        if had is None:
            setattr(namespace, self.dest, values)
        else:
            setattr(namespace, self.dest, [*(had if isinstance(had, list) else [had]), values])


class SeveralTexts(SeveralImages):
    """``--text`` given once is its text; given again, the list of them in order (a dual encoder's candidate texts,
    each scored against the one image)."""


# --generate of extract, figure and compare: not given, the steps the window takes (runtime/default_steps.py)
GENERATE_HELP = (
    f"greedy generation steps for decoder / encoder-decoder models (default: the window's, {DEFAULT_GENERATE} for a "
    "translation or captioning model, none when a target is given (--text-pair; a captioner's --text; --inputs "
    "feeds holding the decoder's tokens) or for other models; 0: no generation)"
)

# (`attnviz open` takes it too: gui/command.py)
TEXT_FILE_HELP = (
    "the text read from a UTF-8 file, as --text takes it (a long document: one argument stops at 128 KiB on Linux)"
)


def add_input_arguments(
    p: argparse.ArgumentParser, model_required: bool = True, several_images: bool = False, several_texts: bool = False
) -> None:
    if model_required:
        p.add_argument(
            "model", metavar="MODEL", help="ONNX model file, or an export folder (optimum encoder + decoder files)"
        )
    src = p.add_argument_group("input (one of)")
    src.add_argument("--inputs", metavar="FEEDS.npz", help="raw feeds: .npz keyed by ONNX input name")
    if several_texts:
        src.add_argument(
            "--text",
            metavar="T",
            action=SeveralTexts,
            help="text (tokenised with the model's tokenizer); give it again for several candidate texts, each scored "
            "against each --image (a dual encoder: CLIP, SigLIP)",
        )
    else:
        src.add_argument("--text", metavar="T", help="text (tokenised with the model's tokenizer)")
    src.add_argument(
        "--text-pair", metavar="T2", help="second text: sentence B for encoders, the forced target for encoder-decoders"
    )
    src.add_argument("--text-file", metavar="FILE", help=TEXT_FILE_HELP)
    if several_images:
        src.add_argument(
            "--image",
            metavar="PATH",
            action=SeveralImages,
            help="image file for vision models; give it again for several images in one prompt (a vision–language "
            "model: its placeholders matched to them in order), or several images each scored against the --text(s) "
            "(a dual encoder: CLIP, SigLIP)",
        )
    else:
        src.add_argument("--image", metavar="PATH", help="image file for vision models")
    src.add_argument("--audio", metavar="FILE", help="sound file (WAV, FLAC, OGG) for speech models (Whisper)")
    p.add_argument("--tokenizer", metavar="FILE", help="tokenizer.json (default: from metadata or beside the model)")
    p.add_argument(
        "--max-tokens",
        type=int,
        metavar="N",
        help=MAX_TOKENS_HELP + ". The model's position limit is checked and named when a text is longer",
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
        default=None,  # None: not given, then the window's steps for the model's kind (runtime/default_steps.py)
        metavar="N",
        help=GENERATE_HELP,
    )
    p.add_argument(
        "--beams",
        type=int,
        default=1,
        metavar="K",
        help="beam search with K beams for --generate (default 1: greedy); the K finished hypotheses become the "
        "result's batch rows, best first, each with its own beam's attention",
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


def request_from_args(args, steps: int = 0) -> AnalyzeRequest:
    """The :class:`AnalyzeRequest` the input flags name (checked: a bad value is one line, as in the window);
    ``steps``: the generation when ``--generate`` was not given (:func:`resolve_generate` sets it from the model)."""
    from attnviz.runtime.request import AnalyzeRequest

    return AnalyzeRequest(
        text=args.text,
        text_pair=args.text_pair,
        image=args.image,
        feeds=args.inputs,
        generate=steps if args.generate is None else args.generate,
        beams=getattr(args, "beams", 1),
        mode=getattr(args, "mode", "auto"),  # `ablate` has no memory flag (its --mode is the ablation's)
        image_size=tuple(args.image_size) if args.image_size else None,
        image_mean=args.image_mean,
        image_std=args.image_std,
        max_tokens=getattr(args, "max_tokens", None),
        audio=getattr(args, "audio", None),
        max_seconds=getattr(args, "max_seconds", None),
    )


def analyze_from_args(args):
    """Open args.model and run it on the input the arguments name; returns (model, result)."""
    from attnviz.runtime.child_start import start_early

    if any(getattr(args, k, None) is not None for k in ("text", "image", "audio", "inputs")):
        # the isolation child starts before this process imports numpy and onnx (runtime/child_start.py); a
        # command with no input at all is refused below without one (require_input)
        from attnviz.runtime.device import asks_cuda

        start_early(cuda=asks_cuda(args.model, args.provider))
    from attnviz.runtime import open_model
    from attnviz.runtime.sample import require_input

    # checked before opening (a missing input or a bad value needs no model load); steps not given are checked as
    # the most a default takes, the model's own default follows once it is open
    require_input(request_from_args(args, steps=DEFAULT_GENERATE), args.model)
    from attnviz.runtime.host import prestart

    prestart()  # the isolation child starts while the model is read
    # --variant: a Hub repository's quantized siblings (commands without the flag open full precision)
    model = open_model(
        args.model, provider=args.provider, tokenizer=args.tokenizer, variant=getattr(args, "variant", None)
    )
    resolve_generate(args, model)
    return model, model.analyze_request(request_from_args(args))


def resolve_generate(args, model) -> int:
    """``--generate`` not given: the steps the window takes for this model (set on ``args``, so that what a command
    prints and records is the number run); given, as given (0: no generation)."""
    if args.generate is None:
        from attnviz.runtime.default_steps import default_steps, given_inputs

        args.generate = default_steps(model, given_inputs(args))
    return int(args.generate)
