"""``attnviz align-audio MODEL (--audio F [--transcript T] [--gold REF] | --audio-dir DIR [--gold-dir DIR]) [--heads SPEC]
--out words.tsv|.json|DIR``"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from attnviz.core.notice import say
from attnviz.core.words import count

HELP = (
    "word timestamps of a speech model (a Whisper folder) from its alignment heads' cross-attention and dynamic "
    "time warping, as transformers computes them; with --gold, every cross-attention head scored against "
    "reference word times (heads.parquet)"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="a Whisper ONNX folder (optimum's speech-recognition export)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--audio", metavar="FILE", help="the recording (WAV, FLAC or OGG)")
    src.add_argument(
        "--audio-dir",
        metavar="DIR",
        help="every recording in DIR (.wav, .flac, .ogg): words to --out DIR/NAME.words.tsv, and with --gold-dir "
        "one heads.parquet over all of them",
    )
    p.add_argument(
        "--transcript",
        metavar="FILE",
        help="the words spoken (UTF-8 text), teacher-forced into the decoder; default: the --gold words, "
        "else what the model transcribes",
    )
    p.add_argument(
        "--heads",
        metavar="SPEC",
        help="the cross-attention heads to warp, e.g. 'decoder cross 2:1,decoder cross 3:0'; default: the "
        "folder's generation_config.json alignment_heads, else every head of the decoder's second half",
    )
    p.add_argument(
        "--gold",
        metavar="REF",
        help="reference word times: a TSV 'word<TAB>start<TAB>end' (seconds) or a Praat TextGrid; scores every "
        "cross-attention head (share of word boundaries within 20/50/100 ms, mean absolute error)",
    )
    p.add_argument(
        "--gold-dir",
        metavar="DIR",
        help="with --audio-dir: each recording's reference, NAME.tsv or NAME.TextGrid for NAME.wav",
    )
    p.add_argument("--tier", metavar="NAME", help="the TextGrid tier of the words (default: 'words', else the first)")
    p.add_argument(
        "--out",
        required=True,
        metavar="words.tsv",
        help="output: .tsv (word start end tokens probability) or .json; with --audio-dir a folder",
    )
    p.add_argument(
        "--table", metavar="heads.parquet", help="with --gold: the per-head table (default: heads.parquet beside --out)"
    )
    p.add_argument("--generate", type=int, metavar="N", help="without a transcript: at most N tokens (default 128)")
    p.add_argument("--max-seconds", type=float, metavar="S", help="keep only the first S seconds of the recording")
    p.add_argument("--tokenizer", metavar="FILE", help="tokenizer.json (default: the folder's)")
    p.add_argument(
        "--provider", choices=("auto", "cpu", "cuda"), default="auto", help="execution provider (default auto)"
    )


OUT_SUFFIXES = (".tsv", ".json")
MEASURES = (
    ("within_20ms", "float64"),
    ("within_50ms", "float64"),
    ("within_100ms", "float64"),
    ("mean_abs_error_s", "float64"),
    ("boundaries", "int64"),
)


def _tsv_cell(text: str) -> str:
    return " ".join(text.replace("\t", " ").split())  # one cell: no tab, no line break from a decoded token


def words_tsv(words, probs) -> bytes:
    """``word start end tokens probability`` a line (the probability empty where the run kept no logits)."""
    lines = ["word\tstart\tend\ttokens\tprobability"]
    lines += [
        f"{_tsv_cell(w.text)}\t{w.start:.2f}\t{w.end:.2f}\t{' '.join(map(str, w.tokens))}\t"
        + ("" if p is None else f"{p:.4f}")
        for w, p in zip(words, probs)
    ]
    return ("\n".join(lines) + "\n").encode("utf-8")


def words_json(words, probs, run: dict) -> dict:
    return run | {
        "words": [
            {"word": w.text, "start": w.start, "end": w.end, "tokens": list(w.tokens), "probability": p}
            for w, p in zip(words, probs)
        ]
    }


def write_table(path, rows: list[dict]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from attnviz.core.writes import atomic_path
    from attnviz.corpus.tables import HEAD_KEYS

    schema = pa.schema([(name, getattr(pa, kind)()) for name, kind in (*HEAD_KEYS, *MEASURES)])
    with atomic_path(path, "--table") as tmp:
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp)


GOLD_SUFFIXES = (".tsv", ".TextGrid", ".textgrid")
MAX_FILES = 10_000


def recordings(folder: Path) -> list[Path]:
    """The sound files of ``folder`` by name (what ``--audio-dir`` reads, here and in ``attnviz corpus``)."""
    from attnviz import AttnvizError
    from attnviz.runtime.audio import AUDIO_SUFFIXES  # what the loader reads: one list (the window's, figure's)

    sounds = sorted(f for f in folder.iterdir() if f.suffix.lower() in AUDIO_SUFFIXES and f.is_file())
    if not sounds:
        kinds = (
            f"{', '.join(AUDIO_SUFFIXES[:-1])} or {AUDIO_SUFFIXES[-1]}"
            if len(AUDIO_SUFFIXES) > 1
            else AUDIO_SUFFIXES[0]
        )
        raise AttnvizError(f"--audio-dir {folder}: no {kinds} files; give the folder of recordings")
    if len(sounds) > MAX_FILES:
        raise AttnvizError(f"--audio-dir {folder}: more than {MAX_FILES:,} recordings; split the folder")
    return sounds


def reference_for(sound: Path, gold_dir: str | Path) -> Path:
    """``sound``'s reference word times in ``gold_dir``: NAME.tsv or NAME.TextGrid for NAME.wav."""
    from attnviz import AttnvizError

    found = next((g for s in GOLD_SUFFIXES if (g := Path(gold_dir) / f"{sound.stem}{s}").is_file()), None)
    if found is None:
        raise AttnvizError(
            f"--gold-dir {gold_dir}: no reference for {sound.name}; give {sound.stem}.tsv or {sound.stem}.TextGrid"
        )
    return found


@dataclass(frozen=True)
class Job:
    """One recording: its file, its reference (or None) and where its words go."""

    audio: Path
    gold: Path | None
    out: Path


def _jobs(args, out: Path) -> tuple[list[Job], Path | None]:
    """The recordings to align and the per-head table's path: one --audio file, or every sound file of
    --audio-dir (its reference the file of the same name in --gold-dir, its words DIR/NAME.words.tsv)."""
    from attnviz import AttnvizError

    if args.audio_dir is None:
        if args.gold_dir:
            raise AttnvizError("--gold-dir goes with --audio-dir; give one recording's reference with --gold REF")
        if out.suffix.lower() not in OUT_SUFFIXES:
            raise AttnvizError(f"--out {out}: give a .tsv or .json file name")
        table = Path(args.table) if args.table else (out.parent / "heads.parquet" if args.gold else None)
        if table is not None and not args.gold:
            raise AttnvizError("--table holds the per-head scores against --gold; give --gold REF too")
        if table is not None and table.resolve() == out.resolve():
            raise AttnvizError(f"--table {table} is --out too; give them different names")
        _not_foreign(args, table)
        return [Job(Path(args.audio), Path(args.gold) if args.gold else None, out)], table
    if args.gold or args.transcript:
        raise AttnvizError("--audio-dir takes its references from --gold-dir (NAME.tsv or NAME.TextGrid per file)")
    folder = Path(args.audio_dir)
    if not folder.is_dir():
        raise AttnvizError(f"--audio-dir {folder}: not a folder; give the folder of recordings")
    if out.suffix or not (out.is_dir() or out.parent.is_dir()):
        raise AttnvizError(f"--out {out}: with --audio-dir give a folder (made if missing) for the words files")
    sounds = recordings(folder)
    jobs = [
        Job(f, reference_for(f, args.gold_dir) if args.gold_dir else None, out / f"{f.stem}.words.tsv") for f in sounds
    ]
    table = Path(args.table) if args.table else (out / "heads.parquet" if args.gold_dir else None)
    if table is not None and not args.gold_dir:
        raise AttnvizError("--table holds the per-head scores against --gold-dir; give --gold-dir DIR too")
    _not_foreign(args, table)
    return jobs, table


def _not_foreign(args, table: Path | None) -> None:
    """The table's default place (beside --out) may be a corpus, compare or ablate results folder, whose
    heads.parquet it would replace (corpus/outfiles.py); a --table named on the command line is the user's choice."""
    from attnviz.corpus import outfiles

    if table is not None and not args.table:
        outfiles.refuse_foreign(table.parent, "align-audio")


def run(args) -> int:
    from attnviz import AttnvizError
    from attnviz.core.untrusted import read_text
    from attnviz.core.writes import atomic_write_bytes, atomic_write_json, guard, make_folder
    from attnviz.runtime import audio_words as aw
    from attnviz.runtime import open_model
    from attnviz.runtime.ablation import parse_heads
    from attnviz.runtime.audio import FeatureSpec, load_audio

    if (args.audio is None) == (args.audio_dir is None):
        raise AttnvizError("give one recording with --audio FILE, or a folder of them with --audio-dir DIR")
    if args.generate is not None and args.generate < 1:
        raise AttnvizError(f"--generate {args.generate}: give at least 1 token")
    out = Path(args.out)
    jobs, table = _jobs(args, out)
    guard(
        {
            "the model": args.model,
            "the --audio file": args.audio,
            "the --audio-dir folder": args.audio_dir,
            "the --transcript file": args.transcript,
            "the --gold file": args.gold,
            "the --gold-dir folder": args.gold_dir,
            "the --tokenizer file": args.tokenizer,
        },
        {"--out": [j.out for j in jobs], "--table": table},
    )
    golds = [aw.read_gold(j.gold, args.tier) if j.gold else None for j in jobs]  # every reference checked first
    typed = read_text(args.transcript, "--transcript file", 2**20) if args.transcript else None

    model = open_model(args.model, provider=args.provider, tokenizer=args.tokenizer)
    config = aw.AlignConfig.for_model(model)
    spec = FeatureSpec.from_dict(model.meta["audio"])
    tally = aw.HeadTally()
    if args.audio_dir is not None:
        make_folder(out)
    for job, gold in zip(jobs, golds):
        transcript = typed if typed is not None else (" ".join(g.text for g in gold) if gold else None)
        wave, notes = load_audio(job.audio, spec, args.max_seconds)
        clip = aw.run_clip(model, wave, transcript, args.generate)
        picked = parse_heads(args.heads, clip.sites) if args.heads else None
        choice = aw.choose_heads(clip.sites, config, picked)
        words = clip.words(choice.heads, config.median_width)
        if not words:
            raise AttnvizError(
                f"{job.audio.name}: the model heard no words (it generated only special tokens); give "
                "the words spoken (--transcript FILE, or a reference)"
            )
        run_info = {
            "model": str(args.model),
            "audio": str(job.audio),
            "transcript": "teacher-forced" if transcript is not None else "generated",
            "heads": [list(h) for h in choice.heads],
            "heads_from": choice.source,
            "median_filter_width": config.median_width,
        }
        if job.out.suffix.lower() == ".json":
            atomic_write_json(job.out, words_json(words, clip.probabilities(words), run_info), "--out")
        else:
            atomic_write_bytes(job.out, words_tsv(words, clip.probabilities(words)), "--out")
        for n in notes:
            say(n)
        print(f"wrote {job.out}: {count(len(words), 'word')} from {count(len(choice.heads), 'head')} ({choice.source})")
        if gold is not None:
            tally.add(clip, gold, choice.heads, config.median_width)
    if table is not None:
        _report(table, tally, len(jobs))
    return 0


def _report(table, tally, files: int) -> None:
    from attnviz.runtime import audio_words as aw

    ranked = tally.ranked()
    write_table(table, [s.row() for s in ranked])
    chosen = next(s for s in ranked if s.kind == aw.SET_KIND).score
    print(
        f"wrote {table}: {len(ranked) - 1} cross-attention heads and the chosen set scored on "
        f"{chosen.matched_words} of {chosen.gold_words} reference words" + (f" in {files} files" if files > 1 else "")
    )
    print(
        f"chosen heads: {chosen.within[0]:.0%} / {chosen.within[1]:.0%} / {chosen.within[2]:.0%} of boundaries "
        f"within 20 / 50 / 100 ms, mean error {chosen.mean_abs_error_s * 1000:.0f} ms"
    )
    top = [s for s in ranked if s.kind == "cross"][:5]
    print(
        "heads ranked (within 50 ms, mean error): "
        + ", ".join(f"{s.layer}:{s.head} {s.score.within[1]:.0%} {s.score.mean_abs_error_s * 1000:.0f} ms" for s in top)
    )
