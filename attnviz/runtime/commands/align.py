"""``attnviz align MODEL --src F --tgt F [--gold F] [--head L:H | --layer L] [--convention C] --out ALIGN.txt``

Without ``--tgt`` the model translates each source line itself (greedy, or the best of ``--beams K``) and the
links are those of its own translation, written line by line to ``--translations`` (default: beside --out).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

HELP = (
    "write Pharaoh word alignments read from an encoder-decoder model's cross-attention, of given targets "
    "(and AER / precision / recall per head and layer when --gold is given) or, without --tgt, of the model's own "
    "translations"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="encoder-decoder ONNX model with cross-attention")
    p.add_argument(
        "--src", required=True, metavar="FILE", help="source sentences, one a line, words separated by spaces"
    )
    p.add_argument(
        "--tgt",
        metavar="FILE",
        help="target sentences, line by line with --src (teacher forcing); without it the model translates each "
        "source line and the links are those of its own translation",
    )
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
    p.add_argument(
        "--out",
        required=True,
        metavar="ALIGN.txt",
        help="output: one Pharaoh line per sentence pair (empty where the source or target line is blank)",
    )
    p.add_argument(
        "--translations",
        metavar="OUT.txt",
        help="without --tgt: where the translations go, one a line, words as the links count them "
        "(default: beside --out, ALIGN.txt -> ALIGN.translations.txt, A.align -> A.align.translations.txt)",
    )
    p.add_argument(
        "--generate",
        type=int,
        metavar="N",
        help="without --tgt: at most N new tokens a translation (default: 2 x the source's tokens + 10, "
        "within the model's positions)",
    )
    p.add_argument(
        "--beams",
        type=int,
        default=1,
        metavar="K",
        help="without --tgt: beam search with K beams, the best hypothesis aligned (default 1: greedy)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar while translating")
    p.add_argument("--tokenizer", metavar="FILE", help="tokenizer.json (default: from metadata or beside the model)")
    p.add_argument(
        "--provider", choices=("auto", "cpu", "cuda"), default="auto", help="execution provider (default auto)"
    )


def _parse_head(text: str) -> tuple[int, int]:
    from attnviz import AttnvizError

    parts = text.split(":")
    if len(parts) != 2 or not all(x.strip().isascii() and x.strip().isdigit() for x in parts):  # ('²', '٣')
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


def translations_path(args) -> Path:
    """``--translations``, else beside --out: ``ALIGN.txt`` -> ``ALIGN.translations.txt``."""
    from pathlib import Path

    if args.translations:
        return Path(args.translations)
    out = Path(args.out)
    base = out.stem if out.suffix.lower() == ".txt" else out.name  # a.align -> a.align.translations.txt
    return out.with_name(f"{base}.translations.txt")


def _check_modes(args) -> None:
    """The flags of one mode only: given targets (--tgt, --gold) or the model's own translations."""
    from attnviz import AttnvizError
    from attnviz.core import limits
    from attnviz.runtime.request import MAX_BEAMS

    if args.tgt:
        given = {
            "--translations": args.translations is not None,
            "--generate": args.generate is not None,
            "--beams": args.beams != 1,
        }
        for flag, on in given.items():
            if on:
                raise AttnvizError(
                    f"{flag} is for the model's own translations; with --tgt the targets are given: drop {flag}"
                )
        return
    if args.gold:
        raise AttnvizError(
            "--gold scores alignments of given targets; give --tgt FILE with it (the model's own translations have "
            "no gold alignment)"
        )
    if args.generate is not None:
        if args.generate < 1:
            raise AttnvizError(f"--generate {args.generate}: give at least 1 new token a translation")
        limits.check("generate", args.generate, "--generate")
    if not 1 <= args.beams <= MAX_BEAMS:
        raise AttnvizError(f"--beams {args.beams}: give a number of beams from 1 to {MAX_BEAMS}")


def _bar(total: int, off: bool):
    """The progress bar of the corpus-like commands (one line a source sentence); none with --no-progress."""
    if off:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="line", desc="align", dynamic_ncols=True)


class _Links:
    """The links of one sentence pair's cross-attention, by the one rule of both modes: the head, layer or mean
    chosen (checked against the decoder once its shape is known), the row convention, punctuation skipped or not."""

    def __init__(self, head, layer, convention: str, skip_punctuation: bool):
        self.head, self.layer, self.convention, self.skip_punctuation = head, layer, convention, skip_punctuation

    def __call__(self, pa, tgt_words: list[str]):
        from attnviz import AttnvizError
        from attnviz.core import align
        from attnviz.runtime.align import is_punctuation, select

        head, layer = self.head, self.layer
        L, H = pa.attn.shape[:2]
        if head is not None and not (0 <= head[0] < L and 0 <= head[1] < H):
            raise AttnvizError(
                f"--head {head[0]}:{head[1]} does not exist: the decoder has {L} cross-attention layers of {H} heads"
            )
        if layer is not None and not 0 <= layer < L:
            raise AttnvizError(
                f"--layer {layer} does not exist: the decoder has {L} cross-attention layers (0-{L - 1})"
            )
        sample = pa.sample(self.convention)
        if self.skip_punctuation:
            sample.skip = [is_punctuation(w) for w in tgt_words]
        links = align.attention_to_links(
            select(pa.attn, head, layer), sample.query_words, sample.key_words, pa.n_tgt, pa.n_src, skip=sample.skip
        )
        return sample, links


def run(args) -> int:
    from pathlib import Path

    from attnviz import AttnvizError
    from attnviz.core import align
    from attnviz.core.words import count
    from attnviz.core.writes import atomic_write_bytes, check_destination, guard
    from attnviz.runtime import open_model
    from attnviz.runtime.align import Aligner

    _check_modes(args)
    out = Path(args.out)
    trans = None if args.tgt else translations_path(args)
    guard(
        {
            "the model": args.model,
            "the --src file": args.src,
            "the --tgt file": args.tgt,
            "the --gold file": args.gold,
            "the --tokenizer file": args.tokenizer,
        },
        {"--out": out, "--translations": trans},
    )
    if not out.parent.is_dir():
        raise AttnvizError(f"--out {out}: folder {out.parent} does not exist; create it or choose another --out")
    if trans is not None:
        if trans.resolve() == out.resolve():
            raise AttnvizError(f"--translations {trans}: the same file as --out; give another name")
        if not trans.parent.is_dir():
            raise AttnvizError(
                f"--translations {trans}: folder {trans.parent} does not exist; create it or choose another "
                "--translations"
            )
        check_destination(trans, "--translations")  # both files written at the end: neither where one cannot be
        check_destination(out, "--out")
    src_lines = _read(args.src, "--src")
    tgt_lines = _read(args.tgt, "--tgt") if args.tgt else None
    if tgt_lines is not None and len(src_lines) != len(tgt_lines):
        raise AttnvizError(
            f"--src has {len(src_lines)} lines but --tgt has {len(tgt_lines)}; give one target per source line"
        )
    if not src_lines:
        raise AttnvizError(f"--src {args.src} is empty; give one sentence a line")
    empty = _empty_lines(src_lines, tgt_lines)
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
    links_of = _Links(head, args.layer, convention, args.skip_punctuation)
    said = (
        " (declared by the model)" if declared and not args.convention and not args.head and args.layer is None else ""
    )
    if tgt_lines is None:
        assert trans is not None
        return _translate(args, aligner, links_of, src_lines, out, trans, what, convention, said, empty)

    lines: list[str] = []
    samples: list[align.AlignmentSample] = []
    chosen = align.AERCounter()
    n_links = 0
    for k, (s, t) in enumerate(zip(src_lines, tgt_lines)):
        sw, tw = s.split(), t.split()
        if k in empty:  # nothing to align: an empty line, as fast_align and awesome-align write one
            if gold is not None:  # its gold line must be empty too (a link would point past the words)
                try:
                    align.check_gold(gold[k], len(sw), len(tw), f"--gold line {k + 1}: ")
                except align.PharaohError as e:
                    raise AttnvizError(str(e)) from None
            lines.append("")
            continue
        try:
            pa = aligner.run(sw, tw)
        except AttnvizError as e:
            raise AttnvizError(f"line {k + 1}: {e}") from None
        sample, links = links_of(pa, tw)
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

    atomic_write_bytes(out, ("\n".join(lines) + "\n").encode("utf-8"), "--out")
    print(
        f"wrote {out}: {len(lines)} sentence pairs, {n_links} links from {what}, rows = {convention} convention{said}"
    )
    _say_empty(empty, "an empty source or target sentence")
    if gold is not None:
        sc = chosen.scores()
        print(
            f"AER {sc.aer:.4f}  precision {sc.precision:.4f}  recall {sc.recall:.4f}  "
            f"({count(len(samples), 'pair')}, {sum(len(g[0]) for g in gold)} sure links)"
        )
        table = align.alignment_table(samples)
        print(f"\nAER per decoder layer and head ({convention} convention):\n")
        print(align.format_aer_table(table))
        top = align.ranked_heads(table)[:5]
        print("\nheads ranked by AER: " + ", ".join(f"{lay}:{h} {v:.3f}" for lay, h, v in top))
    return 0


def _empty_lines(src_lines: list[str], tgt_lines: list[str] | None) -> set[int]:
    """The pairs (0-based lines) with an empty source or target sentence: each gets an empty alignment line (and,
    translated, an empty translation), so the output keeps one line per --src line.  fast_align writes an empty
    line for such a pair (with "Error in line N" on stderr) and awesome-align likewise ("Skipping..."): a blank
    line in a parallel corpus, or a translation that was EOS at once fed back as --tgt, is common, and refusing
    it made the user delete the line and shift every line after it out of step with --src and --gold."""
    tgt = tgt_lines if tgt_lines is not None else ["-"] * len(src_lines)
    return {k for k, (s, t) in enumerate(zip(src_lines, tgt)) if not s.split() or not t.split()}


SHOWN_LINES = 10  # the empty lines' numbers said, then "…"


def _say_empty(empty: set[int], what: str) -> None:
    """One note naming the lines left empty (stderr, ``attnviz: note:``), none where there were none."""
    from attnviz.core.notice import say
    from attnviz.core.words import count

    if not empty:
        return
    ks = sorted(empty)
    shown = ", ".join(str(k + 1) for k in ks[:SHOWN_LINES]) + (", …" if len(ks) > SHOWN_LINES else "")
    say(f"{count(len(ks), 'line')} ({shown}) had {what}: their alignment lines are empty, one line per --src line")


def _translate(
    args,
    aligner,
    links_of: _Links,
    src_lines: list[str],
    out,
    trans,
    what: str,
    convention: str,
    said: str,
    empty: set[int],
) -> int:
    """Without --tgt: each source line translated by the model (greedy or the best of --beams K) and the links of
    that translation's words; both files written once every line is done (an error or Ctrl-C before writes neither)."""
    from attnviz import AttnvizError
    from attnviz.core import align
    from attnviz.core.limits import limit
    from attnviz.core.words import count
    from attnviz.core.writes import atomic_write_files

    lines: list[str] = []
    words: list[str] = []
    n_links = unended = rerun = 0
    cap, capped = aligner.max_steps(limit("generate")), False  # the most steps a translation can take
    bar = _bar(len(src_lines), args.no_progress)
    try:
        for k, s in enumerate(src_lines):
            sw = s.split()
            if k in empty:  # an empty source: nothing to translate, an empty line in both files
                words.append("")
                lines.append("")
                if bar is not None:
                    bar.update(1)
                continue
            try:
                steps = aligner.max_steps(args.generate) if args.generate else aligner.steps_for(sw)
                tr = aligner.translate(sw, steps, args.beams)
                links = set() if tr.pair is None else links_of(tr.pair, tr.words)[1]
            except AttnvizError as e:
                raise AttnvizError(f"line {k + 1}: {e}") from None
            words.append(" ".join(tr.words))
            lines.append(align.format_pharaoh(links))
            n_links += len(links)
            unended += bool(tr.words) and not tr.ended
            capped |= bool(tr.words) and not tr.ended and steps >= cap
            rerun += tr.rerun and tr.ended
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:  # the bar first: an error or "interrupted" then starts a line of its own
            bar.close()
    # the two together: a Ctrl-C between two writes left the new translations beside the old links
    atomic_write_files(
        [
            (trans, ("\n".join(words) + "\n").encode("utf-8"), "--translations"),
            (out, ("\n".join(lines) + "\n").encode("utf-8"), "--out"),
        ]
    )
    search = "greedy" if args.beams == 1 else f"best of {args.beams} beams"
    print(
        f"wrote {out}: {count(len(lines), 'sentence')} translated ({search}), {n_links} links from {what}, "
        f"rows = {convention} convention{said}"
    )
    print(f"wrote {trans}: the translations, line by line with --src")
    _say_empty(empty, "an empty source sentence (its translation is empty)")
    if unended:
        print(
            f"{count(unended, 'translation')} stopped at the step limit before ending (cut short); "
            + (
                f"{cap} steps are all the model's positions (and the step cap) allow"
                if capped
                else f"give a larger --generate (at most {cap}: the model's positions and the step cap)"
            )
        )
    if rerun:  # (a translation cut short is rerun too: said above)
        print(
            f"{rerun} translation{'s were' if rerun != 1 else ' was'} aligned teacher-forced on the words written: the "
            "tokenizer encodes them into other pieces than the search generated"
        )
    return 0
