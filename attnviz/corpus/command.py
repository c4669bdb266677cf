"""attnviz corpus MODEL --texts FILE | --images DIR | --audio-dir DIR [--gold-dir DIR] --out DIR"""

from __future__ import annotations

# the process may end without the interpreter's teardown once the command returns (cli._leave_at_once): its results
# are written and closed by then, and its workers stopped and joined
LEAVES_AT_ONCE = True

HELP = "run a model over a corpus and reduce its attention to per-head statistics, roles and top examples (Parquet)"


def add_arguments(p):
    from attnviz.corpus.config import GENERATE_DEFAULT

    p.add_argument(
        "model",
        metavar="MODEL",
        help="ONNX model file, or an export folder (optimum's encoder + decoder files; a Whisper folder with "
        "--audio-dir; a Hub repository's vision-language files with --images)",
    )
    src = p.add_argument_group("corpus (one of)")
    src.add_argument(
        "--texts",
        metavar="FILE",
        help='.txt (one item a line), .jsonl ("text" field), .parquet, .tsv or .csv ("text" column; .tsv / .csv: a header row naming it)',
    )
    src.add_argument("--images", metavar="DIR", help="folder of images (image-encoder models)")
    src.add_argument(
        "--audio-dir",
        metavar="DIR",
        help="folder of recordings, .wav / .flac / .ogg (a Whisper folder): one item each; their word times go to "
        "DIR_OUT/words/NAME.words.tsv",
    )
    p.add_argument(
        "--gold-dir",
        metavar="DIR",
        help="with --audio-dir: each recording's reference word times (NAME.tsv 'word start end' or "
        "NAME.TextGrid), teacher-forced and scored: heads.parquet gains align-audio's within_20ms / 50 / 100 "
        "and mean_abs_error_s per cross head",
    )
    p.add_argument("--tier", metavar="NAME", help="with --gold-dir: the TextGrid tier of the words")
    p.add_argument(
        "--text-pair-column",
        metavar="C",
        help="field / column holding a second sentence: sentence B of an encoder, the target of an encoder-decoder "
        "(teacher-forced into its decoder)",
    )
    p.add_argument(
        "--gold-column",
        metavar="C",
        help="field / column holding each pair's gold word alignment (Pharaoh: i-j sure, i?j possible, 0-based "
        "indices of the whitespace-separated source and target words): AER, precision and recall of every "
        "cross-attention head over the corpus, as attnviz align --gold (needs --text-pair-column)",
    )
    p.add_argument(
        "--convention",
        choices=("predict", "input"),
        default=None,
        help="with --gold-column: decoder row = the token it predicts, or its input token (Shift-Att); default: "
        "the model's declared convention, else predict",
    )
    p.add_argument(
        "--generate",
        type=int,
        default=None,  # None: not given (then 32), so that a --generate the run would ignore can be refused
        metavar="N",
        help="encoder-decoder without --text-pair-column: the decoder reads its own greedy output, up to N tokens "
        f"(default {GENERATE_DEFAULT}, the steps the window, extract and figure take for a translation; with "
        "--audio-dir, align-audio's; other kinds generate nothing here, as in the window)",
    )
    p.add_argument(
        "--out", required=True, metavar="DIR", help="results folder: heads.parquet, examples.parquet, run.json"
    )
    p.add_argument("--batch-size", type=int, default=32, metavar="N", help="items per padded batch (default 32)")
    p.add_argument("--max-items", type=int, metavar="N", help="only the first N items")
    p.add_argument(
        "--max-tokens",
        type=int,
        metavar="N",
        help="text items cut to N tokens (default: an item past the model's positions is refused). One text: its "
        "first N tokens, a final [SEP] or </s> kept last, as 'open --max-tokens'. A --text-pair-column pair: its "
        "tokens as the encoder reads them ([CLS] A [SEP] B [SEP]) to N, the special tokens kept and the longer "
        "sentence cut first from its end (Hugging Face tokenizers' longest_first, as 'open --text-pair --max-tokens'). "
        "An encoder-decoder: each source "
        "to its first N tokens and each target to N decoder rows (the start token, then the target's first N-1 "
        "tokens). Both engines cut alike; examples show the text the model read; run.json counts the items cut",
    )
    p.add_argument(
        "--engine",
        choices=("local", "ray"),
        default="local",
        help="local process pool (default), or Ray Data (reads, tokenises, batches and writes Parquet itself)",
    )
    p.add_argument(
        "--workers", type=int, metavar="N", help="worker processes / Ray actors (default: 1 per core; local: 4 a GPU)"
    )
    p.add_argument("--threads", type=int, metavar="N", help="onnxruntime threads per worker (default: cores / workers)")
    p.add_argument("--ray-address", metavar="ADDR", help="Ray cluster address (default: start Ray locally)")
    p.add_argument("--top-k", type=int, default=5, metavar="K", help="examples kept per head and score (default 5)")
    p.add_argument(
        "--provider", choices=("auto", "cpu", "cuda"), default="auto", help="execution provider (default auto)"
    )
    p.add_argument("--tokenizer", metavar="FILE", help="tokenizer.json (default: from metadata or beside the model)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args) -> int:
    from attnviz import AttnvizError
    from attnviz.corpus import prestart
    from attnviz.corpus.config import GENERATE_DEFAULT, CorpusConfig, engine_flags

    if args.top_k < 1:
        raise AttnvizError("--top-k must be 1 or more")
    if args.generate is not None and args.generate < 1:
        raise AttnvizError("--generate must be 1 or more")
    cfg = CorpusConfig(
        model=args.model,
        out=args.out,
        texts=args.texts,
        images=args.images,
        pair_column=args.text_pair_column,
        batch_size=args.batch_size,
        max_items=args.max_items,
        max_tokens=args.max_tokens,
        k=args.top_k,
        generate=GENERATE_DEFAULT if args.generate is None else args.generate,
        generate_given=args.generate is not None,
        gold_column=args.gold_column,
        convention=args.convention,
        audio_dir=args.audio_dir,
        gold_dir=args.gold_dir,
        tier=args.tier,
        **engine_flags(args),
    )
    # the workers start now, before this process imports numpy and the run (~0.1 s CPU on the path to them)
    with prestart.started(cfg):
        from attnviz.corpus.run import run_corpus

        s = run_corpus(cfg)
    from attnviz.core.words import count

    resumed = f" (resumed after {s.resumed_items})" if s.resumed_items else ""
    print(
        f"wrote {s.out}/heads.parquet, examples.parquet, run.json: {count(s.items, 'item')} in "
        f"{count(s.batches, 'batch', 'batches')}{resumed}, "
        f"{s.items_per_s:.1f} items/s, {s.wall_s:.1f} s"
    )
    for said in (s.note, s.sink_note):
        if said:
            from attnviz.core.notice import say

            say(said)
    if args.gold_column:
        _print_gold(s.out)
    if args.gold_dir:
        _print_audio_gold(s.out)
    return 0


def _print_audio_gold(out) -> None:
    from attnviz.core.untrusted import read_json

    g = read_json(out / "run.json", "run.json").get("audio_gold") or {}
    if "alignment_heads_score" not in g:
        return
    c = g["alignment_heads_score"]
    print(
        f"alignment heads ({g['heads_from']}) on {g['matched_words']} of {g['reference_words']} reference words in "
        f"{g['files']} files: {c['within_20ms']:.0%} / {c['within_50ms']:.0%} / {c['within_100ms']:.0%} of "
        f"boundaries within 20 / 50 / 100 ms, mean error {c['mean_abs_error_s'] * 1000:.0f} ms; per head: the "
        "within_* columns of heads.parquet"
    )


def _print_gold(out) -> None:
    """The gold scores run.json holds, as ``attnviz align --gold`` prints them."""
    from attnviz.core.untrusted import read_json

    g = read_json(out / "run.json", "run.json").get("gold") or {}
    if not g.get("pairs"):
        return
    b, m = g["best_head"], g["mean_of_all_heads"]
    print(
        f"gold ({g['convention']} convention, {g['pairs']} pairs, {g['sure_links']} sure links): best cross head "
        f"{b['layer']}:{b['head']} AER {b['aer']:.4f} (precision {b['precision']:.4f}, recall {b['recall']:.4f}); "
        f"mean of all heads AER {m['aer']:.4f}; per head: the aer columns of heads.parquet"
    )
