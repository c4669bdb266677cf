"""``attnviz align MODEL --src F --tgt F [--gold F] [--head L:H | --layer L] [--convention C] --out ALIGN.txt``"""

from __future__ import annotations

import argparse

HELP = (
    "write Pharaoh word alignments read from an encoder-decoder model's cross-attention "
    "(and AER / precision / recall per head and layer when --gold is given)"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="encoder-decoder ONNX model with cross-attention")
    p.add_argument(
        "--src", required=True, metavar="FILE", help="source sentences, one a line, words separated by spaces"
    )
    p.add_argument("--tgt", required=True, metavar="FILE", help="target sentences, line by line with --src")
    p.add_argument(
        "--gold", metavar="FILE", help="gold alignments, Pharaoh lines (i-j sure, i?j possible, 0-based source-target)"
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--head",
        metavar="L:H",
        help="read links from decoder layer L, head H (0-based); "
        "default: the model's declared alignment head (attnviz.alignment), else the mean of all heads",
    )
    g.add_argument("--layer", type=int, metavar="L", help="read links from the head mean of decoder layer L")
    p.add_argument(
        "--convention",
        choices=("predict", "input"),
        default=None,
        help="decoder row = the token it predicts, or its input token (Shift-Att); default: the model's "
        "declared convention, else predict",
    )
    p.add_argument(
        "--skip-punctuation",
        action="store_true",
        help="give target words made only of punctuation no link (for gold sets that never align them)",
    )
    p.add_argument("--out", required=True, metavar="ALIGN.txt", help="output: one Pharaoh line per sentence pair")
    p.add_argument("--tokenizer", metavar="FILE", help="tokenizer.json (default: from metadata or beside the model)")
    p.add_argument(
        "--provider", choices=("auto", "cpu", "cuda"), default="auto", help="execution provider (default auto)"
    )


def _parse_head(text: str) -> tuple[int, int]:
    from attnviz import AttnvizError

    parts = text.split(":")
    if len(parts) != 2 or not all(x.strip().isdigit() for x in parts):
        raise AttnvizError(f"--head {text!r}: give LAYER:HEAD, e.g. --head 1:0 (0-based)")
    return int(parts[0]), int(parts[1])


def _read(path: str, flag: str) -> list[str]:
    from attnviz import AttnvizError
    from attnviz.core.align import read_lines

    try:
        return read_lines(path, flag)
    except FileNotFoundError:
        raise AttnvizError(f"{flag} {path}: no such file") from None
    except IsADirectoryError:
        raise AttnvizError(f"{flag} {path}: is a folder; give a text file") from None
    except UnicodeDecodeError:
        raise AttnvizError(f"{flag} {path}: not UTF-8 text") from None
    except OSError as e:
        raise AttnvizError(f"{flag} {path}: cannot read it ({e.strerror or e})") from None


def run(args) -> int:
    from pathlib import Path

    from attnviz import AttnvizError
    from attnviz.core import align
    from attnviz.core.writes import guard
    from attnviz.runtime import open_model
    from attnviz.runtime.align import Aligner, is_punctuation, select

    out = Path(args.out)
    guard(
        {
            "the model": args.model,
            "the --src file": args.src,
            "the --tgt file": args.tgt,
            "the --gold file": args.gold,
            "the --tokenizer file": args.tokenizer,
        },
        {"--out": out},
    )
    if not out.parent.is_dir():
        raise AttnvizError(f"--out {out}: folder {out.parent} does not exist")
    src_lines, tgt_lines = _read(args.src, "--src"), _read(args.tgt, "--tgt")
    if len(src_lines) != len(tgt_lines):
        raise AttnvizError(
            f"--src has {len(src_lines)} lines but --tgt has {len(tgt_lines)}; give one target per source line"
        )
    if not src_lines:
        raise AttnvizError(f"--src {args.src} is empty; give one sentence a line")
    gold = None
    if args.gold:
        gold_lines = _read(args.gold, "--gold")
        if len(gold_lines) != len(src_lines):
            raise AttnvizError(
                f"--gold has {len(gold_lines)} lines but --src has {len(src_lines)}; give one alignment line per pair"
            )
        try:
            gold = [align.parse_pharaoh(ln, f"--gold line {k + 1}: ") for k, ln in enumerate(gold_lines)]
            align.check_gold_set(gold, f"--gold {Path(args.gold).name}")
        except align.PharaohError as e:
            raise AttnvizError(str(e)) from None
    head = _parse_head(args.head) if args.head else None

    model = open_model(args.model, provider=args.provider, tokenizer=args.tokenizer)
    aligner = Aligner(model)
    declared = aligner.declared
    convention = args.convention or (declared[1] if declared else "predict")
    if head is None and args.layer is None and declared:
        head = declared[0][0]
    what = (
        f"decoder layer {head[0]} head {head[1]}"
        if head
        else f"decoder layer {args.layer} (head mean)"
        if args.layer is not None
        else "mean of all cross-attention heads"
    )

    lines: list[str] = []
    samples: list[align.AlignmentSample] = []
    chosen = align.AERCounter()
    n_links = 0
    for k, (s, t) in enumerate(zip(src_lines, tgt_lines)):
        sw, tw = s.split(), t.split()
        if not sw or not tw:
            raise AttnvizError(
                f"line {k + 1}: the {'source' if not sw else 'target'} sentence is empty; "
                "every line needs at least one word"
            )
        try:
            pa = aligner.run(sw, tw)
        except AttnvizError as e:
            raise AttnvizError(f"line {k + 1}: {e}") from None
        L, H = pa.attn.shape[:2]
        if head is not None and not (0 <= head[0] < L and 0 <= head[1] < H):
            raise AttnvizError(
                f"--head {head[0]}:{head[1]} does not exist: the decoder has {L} cross-attention layers of {H} heads"
            )
        if args.layer is not None and not 0 <= args.layer < L:
            raise AttnvizError(
                f"--layer {args.layer} does not exist: the decoder has {L} cross-attention layers (0-{L - 1})"
            )
        sample = pa.sample(convention)
        if args.skip_punctuation:
            sample.skip = [is_punctuation(w) for w in tw]
        links = align.attention_to_links(
            select(pa.attn, head, args.layer),
            sample.query_words,
            sample.key_words,
            pa.n_tgt,
            pa.n_src,
            skip=sample.skip,
        )
        lines.append(align.format_pharaoh(links))
        n_links += len(links)
        if gold is not None:
            try:
                align.check_gold(gold[k], pa.n_src, pa.n_tgt, f"--gold line {k + 1}: ")
            except align.PharaohError as e:
                raise AttnvizError(str(e)) from None
            sample.sure, sample.possible = gold[k]
            samples.append(sample)
            chosen.add(links, *gold[k])

    from attnviz.core.writes import atomic_write_bytes

    atomic_write_bytes(out, ("\n".join(lines) + "\n").encode("utf-8"), "--out")
    print(
        f"wrote {out}: {len(lines)} sentence pairs, {n_links} links from {what}, rows = {convention} convention"
        + (
            " (declared by the model)"
            if declared and not args.convention and not args.head and args.layer is None
            else ""
        )
    )
    if gold is not None:
        sc = chosen.scores()
        print(
            f"AER {sc.aer:.4f}  precision {sc.precision:.4f}  recall {sc.recall:.4f}  "
            f"({len(samples)} pairs, {sum(len(g[0]) for g in gold)} sure links)"
        )
        table = align.alignment_table(samples)
        print(f"\nAER per decoder layer and head ({convention} convention):\n")
        print(align.format_aer_table(table))
        top = align.ranked_heads(table)[:5]
        print("\nheads ranked by AER: " + ", ".join(f"{lay}:{h} {v:.3f}" for lay, h, v in top))
    return 0
