"""``attnviz testset TASK --out DIR``: a translation task's held-out pairs with gold word alignments, as files.

The demo translator never saw these pairs.  They come in the two forms attnviz's gold tools read:
``test.src`` / ``test.tgt`` / ``test.gold`` (Pharaoh, for ``attnviz align --gold`` and File ▸ Load gold
alignments) and ``test.jsonl`` (``text``, ``en``, ``gold`` per line, for ``attnviz corpus --text-pair-column en
--gold-column gold``).  Sentences are written as their whitespace-separated words, the units gold indices count.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

HELP = (
    "write a translation task's held-out sentence pairs with their gold word alignments (Pharaoh files and "
    "a .jsonl) for attnviz align --gold, the window's gold alignments and attnviz corpus --gold-column"
)


def _bible() -> list:
    from attnviz.training import data_translation as dt

    return dt.split_pairs(dt.load_bible()).test  # the 528 verses the demo is scored on


def _synthetic() -> list:
    from attnviz.training import data_translation as dt

    return dt.synthetic_split().test


# task -> its held-out aligned pairs (data_translation.AlignedPair)
TEST_SETS: dict[str, Callable[[], list]] = {"translation": _bible, "translation-synthetic": _synthetic}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("task", metavar="TASK", choices=tuple(TEST_SETS), help=f"one of {', '.join(TEST_SETS)}")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for test.src, test.tgt, test.gold, test.jsonl")
    p.add_argument("--max-pairs", type=int, metavar="N", help="only the first N pairs")


def run(args) -> int:
    import json
    from pathlib import Path

    from attnviz import AttnvizError
    from attnviz.core.writes import atomic_write_bytes, guard, make_folder, results_folder_on_failure
    from attnviz.training import data_translation as dt

    if args.max_pairs is not None and args.max_pairs < 1:
        raise AttnvizError("--max-pairs must be 1 or more")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise AttnvizError(f"--out {out} is a file; give a folder")
    names = ("test.src", "test.tgt", "test.gold", "test.jsonl")
    taken = [n for n in names if (out / n).exists()]
    if taken:  # never replace a user's files: these names are common
        raise AttnvizError(f"--out {out} already holds {', '.join(taken)}; choose another folder")
    guard({}, {"--out": [out / n for n in names]})  # nothing is read from the user; written atomically all the same
    pairs = TEST_SETS[args.task]()[: args.max_pairs]
    with results_folder_on_failure(out):  # a failed write leaves no folder it made, nor its first files
        make_folder(out)
        src, tgt, gold = dt.write_pharaoh_files(pairs, out / "test")
        rows = (
            {"text": " ".join(p.src), "en": " ".join(p.tgt), "gold": " ".join(f"{i}-{j}" for i, j in sorted(p.links))}
            for p in pairs
        )
        atomic_write_bytes(
            out / "test.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode(), "--out"
        )
    links = sum(len(p.links) for p in pairs)
    print(f"wrote {src}, {tgt}, {gold} and {out / 'test.jsonl'}: {len(pairs)} pairs, {links} gold links")
    return 0
