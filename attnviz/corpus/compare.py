"""attnviz compare A B (--text T | --image P | --inputs FEEDS.npz) --out DIR: two models' attention, head by head.

Did quantizing change what the heads do?  What did fine-tuning change?  Is the export faithful?  Both models run
on the same input; sites are matched by (stack, kind, layer) and heads by index; each head gets the measures of
:mod:`attnviz.core.compare` (Jensen–Shannon divergence in bits, the largest absolute difference, top-1
agreement), and each output both models have its largest difference (and KL for logits).  Sites only one model
has, or whose maps differ in shape or head count, are listed, not compared.

Writes ``DIR/heads.parquet`` (``stack, kind, layer, head, js_divergence, max_abs_diff, top1_agreement``) and
``DIR/run.json`` (both models' sha256, the input, output differences, the unmatched sites, versions), and prints
the heads that moved most.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnviz.corpus import outfiles
from attnviz.corpus.compare_words import generated_apart, no_shared_site, side_error
from attnviz.corpus.config import heads_shown
from attnviz.corpus.tables import HEADS, RUN, given_input, write_heads

HELP = "compare two models' attention head by head on the same input (quantized vs full, two checkpoints, ...)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from attnviz.runtime.commands.common import add_input_arguments

    p.add_argument("model", metavar="A", help="the first model: ONNX file or export folder")
    p.add_argument("other", metavar="B", help="the second model, compared with A")
    add_input_arguments(p, model_required=False)
    p.add_argument("--out", required=True, metavar="DIR", help=f"results folder: {HEADS}, {RUN} (and items.parquet)")
    p.add_argument(
        "--top", type=heads_shown, default=5, metavar="K", help="heads printed, most changed first (default 5)"
    )
    for side in ("a", "b"):  # A and B may be one Hub repository: its full-precision files against a quantized set
        p.add_argument(
            f"--variant-{side}",
            metavar="NAME",
            help=f"which of {side.upper()}'s quantized siblings (a Hub repository's onnx/*_NAME.onnx; default full)",
        )
    c = p.add_argument_group(
        "over a corpus (instead of one input; through the corpus engine)",
        "--max-tokens N cuts each item as 'attnviz corpus --max-tokens' does (one text: its first N tokens, a final "
        "[SEP] or </s> kept last; a pair: longest first; an encoder-decoder: sources and decoder rows to N): A and B "
        "read the same cut items",
    )
    c.add_argument(
        "--texts",
        metavar="FILE",
        help='.txt (one item a line), .jsonl ("text" field), .parquet, .tsv or .csv ("text" column; .tsv / .csv: a header row naming it)',
    )
    c.add_argument(
        "--text-pair-column",
        metavar="C",
        help="field / column holding a second sentence: sentence B of an encoder, the target of an encoder-decoder "
        "(teacher-forced into both decoders)",
    )
    c.add_argument("--batch-size", type=int, metavar="N", help="items per padded batch (default 32)")
    c.add_argument("--max-items", type=int, metavar="N", help="only the first N items")
    c.add_argument(
        "--engine", choices=("local", "ray"), default="local", help="local process pool (default), or Ray Data"
    )
    c.add_argument("--workers", type=int, metavar="N", help="worker processes / Ray actors (default: 1 per core)")
    c.add_argument("--threads", type=int, metavar="N", help="onnxruntime threads per worker (default: cores / workers)")
    c.add_argument("--ray-address", metavar="ADDR", help="Ray cluster address (default: start Ray locally)")
    c.add_argument("--no-progress", action="store_true", help="no progress bar (one input has none)")


@dataclass
class Comparison:
    """What ``compare`` found: one row per compared head, output differences, and the sites not compared."""

    heads: list[dict]
    outputs: list[dict]
    unmatched: list[str]


def _real_rows(feeds: dict | None, stack: str, batch: int, n_q: int):
    """The query rows that are real tokens, from the feeds' masks (None: every row; a text input is unpadded)."""
    if not feeds:
        return None
    name = "decoder_attention_mask" if stack == "decoder" and "decoder_attention_mask" in feeds else "attention_mask"
    m = feeds.get(name)
    if m is None or m.shape != (batch, n_q):
        return None
    return m != 0


def _same_tokens(ra, rb, window: bool = False) -> None:
    """One line where A and B tokenise the input differently.  ``window``: the window's words, whose input has no
    --inputs flag (the line named a command-line flag in a window message)."""
    from attnviz import AttnvizError

    for ta, tb in ((ra.tokens, rb.tokens), (ra.key_tokens, rb.key_tokens)):
        if ta is None or tb is None:
            continue
        la, lb = list(ta.labels), list(tb.labels)
        if la != lb and _window_frames(ra, len(la)) and _window_frames(rb, len(lb)) and len(la) != len(lb):
            fa, fb = ra.audio.frame_seconds, rb.audio.frame_seconds
            raise AttnvizError(  # (a speech model's "tokens" are its encoder's frames: nothing was tokenised)
                f"A and B hear the clip through windows of different lengths: A's encoder has {len(la)} frames of "
                f"{fa * 1000:g} ms ({len(la) * fa:.2f} s), B's {len(lb)} of {fb * 1000:g} ms ({len(lb) * fb:.2f} s); "
                "compare speech models whose feature extractors share a window (chunk_length)"
            )
        if la != lb:
            i = next((i for i, (x, y) in enumerate(zip(la, lb)) if x != y), min(len(la), len(lb)))
            x = repr(la[i]) if i < len(la) else "the end"
            y = repr(lb[i]) if i < len(lb) else "the end"
            raise AttnvizError(
                f"A and B tokenise the input differently: token {i} is {x} in A and {y} in B "
                f"({len(la)} and {len(lb)} tokens); compare models that share a tokenizer"
                + ("" if window else ", or give --inputs FEEDS.npz")
            )


def _window_frames(r, n: int) -> bool:
    """Whether ``n`` positions are a speech result's encoder frames over its whole window (the features' mel frames
    times the hop, in frames of ``frame_seconds``)."""
    a = r.audio
    if a is None or not a.frame_seconds:
        return False
    window = a.features.shape[-1] * a.hop / a.rate
    return abs(n * a.frame_seconds - window) < a.frame_seconds


def row_stack(site, vision_tower: bool = False) -> str:
    """The ``stack`` a comparison row names a site (a SiteInfo) by: a dual encoder's tower in brackets; a
    vision–language model's encoder "vision", as its views name it (core.attention.shown_stack)."""
    from attnviz.core.attention import shown_stack

    stack = shown_stack(site.stack, vision_tower)
    return stack if site.tower is None else f"{stack} ({site.tower})"


def compare_results(ra, rb, feeds: dict | None = None, window: bool = False) -> Comparison:
    """Match the two results' sites and measure every head of each matched pair (``window``: a refusal in the
    window's words)."""
    import numpy as np

    from attnviz.core.compare import head_differences, output_difference

    _same_tokens(ra, rb, window)
    # a dual encoder's towers both have encoder self L0..: the tower keeps them apart (None for other models)
    by_key = {(s.stack, s.kind, s.layer, s.tower): (s, m) for s, m in zip(rb.sites, rb.maps)}
    heads: list[dict] = []
    unmatched: list[str] = []
    seen = set()
    for s, m in zip(ra.sites, ra.maps):
        key = (s.stack, s.kind, s.layer, s.tower)
        seen.add(key)
        other = by_key.get(key)
        if other is None:
            unmatched.append(f"{s.label}: only in A")
            continue
        a, b = m.array(), other[1].array()
        if a.shape[1] != b.shape[1]:  # worded as the corpus form words it (compare_run.match_sites)
            unmatched.append(f"{s.label}: {a.shape[1]} heads in A, {b.shape[1]} in B")
            continue
        if a.shape != b.shape:
            unmatched.append(f"{s.label}: maps {list(a.shape)} in A, {list(b.shape)} in B ([batch, heads, query, key])")
            continue
        d = head_differences(a, b, _real_rows(feeds, s.stack, a.shape[0], a.shape[2]))
        for h in range(a.shape[1]):
            heads.append(
                {
                    "stack": row_stack(s, ra.vision_tower),
                    "kind": s.kind,
                    "layer": int(s.layer),
                    "head": h,
                    "js_divergence": float(d.js_divergence[h]),
                    "max_abs_diff": float(d.max_abs_diff[h]),
                    "top1_agreement": float(d.top1_agreement[h]),
                }
            )
    unmatched += [f"{s.label}: only in B" for s in rb.sites if (s.stack, s.kind, s.layer, s.tower) not in seen]
    outputs = []
    for name, va in ra.outputs.items():
        vb = rb.outputs.get(name)
        if vb is None or np.shape(va) != np.shape(vb) or not np.issubdtype(np.asarray(va).dtype, np.number):
            continue
        # a per-token output ([B, T, ...]) of a decoder follows its mask; an encoder's, the encoder's
        stack = "decoder" if ra.sites and ra.sites[-1].stack == "decoder" else "encoder"
        rows = _real_rows(feeds, stack, *np.shape(va)[:2]) if np.ndim(va) >= 3 else None
        o = output_difference(name, va, vb, rows)
        outputs.append({"name": o.name, "max_abs_diff": o.max_abs_diff, "kl_bits": o.kl_bits})
    return Comparison(heads, outputs, unmatched)


def write(out: Path, comp: Comparison, run: dict) -> None:
    """``heads.parquet`` (the head keys and :data:`attnviz.core.compare.MEASURES`) and ``run.json`` into ``out``."""
    from attnviz.core.compare import MEASURES

    write_heads(out, comp.heads, MEASURES, run)


def run(args, figure: Callable[[Any, Any, Comparison], str] | None = None) -> int:
    """``figure(result_a, result_b, comparison)``: draws ``--figure`` (a layer above this one owns figures) and
    says what it wrote; the flag's path is guarded with the other outputs before any work."""
    import numpy as np
    import onnxruntime

    from attnviz import AttnvizError, __version__
    from attnviz.core.steps_default import DEFAULT_GENERATE
    from attnviz.core.writes import guard
    from attnviz.corpus.items import sha256_model
    from attnviz.runtime import open_model
    from attnviz.runtime.commands.common import request_from_args, resolve_generate
    from attnviz.runtime.host import prestart
    from attnviz.runtime.inputs import load_feeds

    if getattr(args, "beams", 1) != 1:  # (the input flags are extract's; a beam search's K rows are not compared yet)
        raise AttnvizError(
            f"--beams {args.beams}: compare reads each model's greedy generation; drop --beams (or compare one "
            "beam's tokens teacher-forced with --text-pair)"
        )
    if args.texts is not None:
        if figure is not None:
            raise AttnvizError(
                "--figure draws one input's maps (A | B | A − B), and --texts keeps none; draw one item with --text"
            )
        return _run_corpus(args)
    # (--no-progress passes: one input shows no progress bar to turn off, and a script that always gives it, as
    # 'attnviz ablate' takes it, should not break on the one-input form)
    given = [f"--{n.replace('_', '-')}" for n in CORPUS_ONLY if getattr(args, n) is not None]
    if given or args.engine != "local":
        flags = ", ".join(given + (["--engine"] if args.engine != "local" else []))
        raise AttnvizError(f"{flags}: for a corpus run; give --texts FILE too, or drop them for one input")
    if args.inputs is None and args.text is None and args.image is None and args.audio is None:
        _sample_input(args)  # model A's own sample input, as `figure MODEL` falls back to it; else the one line
    out = Path(args.out)
    inputs = {
        "model A": args.model,
        "model B": args.other,
        "the --inputs file": args.inputs,
        "the --image file": args.image,
        "the --audio file": args.audio,
        "the --tokenizer file": args.tokenizer,
        "the --text-file": getattr(args, "text_file", None),
    }
    if out.exists() and not out.is_dir():
        raise AttnvizError(f"--out {out} is a file; give a folder for {HEADS} and {RUN}")
    outfiles.refuse_foreign(out, "compare")
    outputs: dict[str, list[Path]] = {"--out": [out / HEADS, out / RUN]}
    if figure is not None and args.figure:
        outputs["--figure"] = [Path(args.figure)]
    guard(inputs, outputs)  # before any work: an output never replaces an input
    outfiles.refuse_model_folder(out, {"model A": args.model, "model B": args.other})
    prestart()
    feeds = load_feeds(args.inputs) if args.inputs else None
    request_from_args(args, steps=DEFAULT_GENERATE)  # a bad value is refused before any model is read
    asked = args.generate  # None: the steps the window takes for A's kind (B runs A's input, as A's sample)
    results, req, said = [], None, []
    for side, path, variant in (("A", args.model, args.variant_a), ("B", args.other, args.variant_b)):
        try:
            m = open_model(path, provider=args.provider, tokenizer=args.tokenizer, variant=variant)
            said.append(m.meta)
            if req is None:
                resolve_generate(args, m)
                # every map is compared: on-demand recompute would materialise them anyway
                req = dataclasses.replace(request_from_args(args), feeds=feeds, mode="dense")
            results.append(m.analyze_request(req))
        except AttnvizError as e:  # "this model's positions stop at 128": which of the two
            raise side_error(side, path, e) from None
    ra, rb = results
    predictions = predictions_of(results, said)
    if args.generate and ra.info.get("generated_ids") != rb.info.get("generated_ids"):
        # no --generate given: the window's default steps were taken, so the way out is --generate 0
        off = "without --generate" if asked is not None else f"with --generate 0 (it took the window's {args.generate})"
        raise AttnvizError(generated_apart(ra, rb, off))
    comp = compare_results(ra, rb, feeds)
    if not comp.heads:
        raise AttnvizError(no_shared_site(comp.unmatched))
    run_info = {
        "models": {
            "A": _model_info(args.model, args.variant_a, sha256_model(args.model)),
            "B": _model_info(args.other, args.variant_b, sha256_model(args.other)),
        },
        "input": given_input(args, ("text", "text_pair", "image", "audio", "inputs", "generate")),
        "tokens": list(ra.tokens.labels) if ra.tokens is not None else None,
        # the keys' tokens where they are others (an encoder-decoder's target, the decoder's rows): its decoder
        # heads' rows were over tokens run.json did not name
        "key_tokens": list(ra.key_tokens.labels) if ra.key_tokens is not None else None,
        "heads": len(comp.heads),
        "outputs": comp.outputs,
        "predictions": predictions,
        "unmatched": comp.unmatched,
        "measures": {
            "js_divergence": "Jensen–Shannon divergence of the two rows, bits (log2), mean over real query rows",
            "max_abs_diff": "largest |A - B| over real query rows and keys",
            "top1_agreement": "share of real query rows whose most-attended key is the same in A and B",
        },
        "versions": {"attnviz": __version__, "onnxruntime": onnxruntime.__version__, "numpy": np.__version__},
    }
    drawn = figure(ra, rb, comp) if figure is not None else None  # a bad --figure-head: nothing written
    write(out, comp, run_info)
    _report(comp.heads, comp.outputs, comp.unmatched, out, args.top, "")
    if predictions:
        line = predictions_line(predictions)
        print(line)
    if drawn:
        print(drawn)
    return 0


def predictions_of(results, metas) -> dict[str, str] | None:
    """What A and B each said (core.prediction: a classifier's class and probability, a forecaster's first
    values), the outputs' |Δ| and KL being numbers a reader cannot turn into "do they still agree?"; None where
    either says nothing (other kinds)."""
    from attnviz.core.prediction import prediction

    said = [prediction(r, meta) for r, meta in zip(results, metas)]
    return dict(zip("AB", said)) if all(said) else None  # type: ignore[arg-type]


def predictions_line(p: dict[str, str]) -> str:
    """``prediction: A → triangle (p = 1.00), B → circle (p = 0.75): a different class``; a forecaster's values
    side by side (a float apart is no verdict)."""
    classes = [p[s].split(" (p = ")[0] for s in "AB" if " (p = " in p[s]]
    verdict = "" if len(classes) < 2 else ": the same class" if classes[0] == classes[1] else ": a different class"
    return f"prediction: A → {p['A']}, B → {p['B']}{verdict}"


def _sample_input(args) -> None:
    """No input given: model A's sample input (``attnviz.sample`` metadata) for both models, said in a note line as
    ``figure`` says it (both read the one input: B is compared on A's), or the refusal naming what A takes."""
    from attnviz import AttnvizError
    from attnviz.core.notice import say
    from attnviz.runtime.sample import no_input, sample_for_path

    # a file, or a speech folder (its sample clip is in its encoder's metadata, as `figure` reads it)
    found = sample_for_path(args.model) if Path(str(args.model)).exists() else None
    sample = found.values if found is not None else {}
    if not set(sample) & {"text", "image", "audio"}:
        raise AttnvizError(no_input(args.model))
    for key in ("text", "text_pair", "image", "audio"):
        if key in sample and getattr(args, key) is None:
            setattr(args, key, sample[key])
    if args.generate is None and sample.get("generate") is not None:  # (--generate 0: no generation)
        args.generate = int(sample["generate"])
    assert found is not None
    say(f"no input given; using model A's sample input for both models ({found.describe()})")


def _model_info(path, variant: str | None, sha: str) -> dict:
    """A model's run.json entry.  Its ``variant`` (a folder's set of files, "full" when not chosen) only for a
    folder: a single file has no siblings to choose from, and "variant": "full" on a quantize_dynamic int8 copy
    said the opposite of what the file is."""
    info = {"path": str(path), "sha256": sha}
    if Path(path).is_dir():
        info["variant"] = variant or "full"
    return info


def _report(heads: list[dict], outputs: list[dict], unmatched: list[str], out: Path, top: int, over: str) -> None:
    """The heads that moved most, the outputs' differences and the sites not compared; ``over``: what the
    measures are over (a corpus run says how many items)."""
    # only heads whose weights moved: a head with |Δ| 0 listed as "most changed" (a model against itself, a change
    # planted in one late head) reads as a change that is not there
    moved = [r for r in heads if r["max_abs_diff"] > 0 or r["js_divergence"] > 0]
    first = sorted(moved, key=lambda r: (-r["js_divergence"], r["stack"], r["kind"], r["layer"], r["head"]))
    from attnviz.core.words import count

    sites = len({(r["stack"], r["kind"], r["layer"]) for r in heads})
    print(f"compared {count(len(heads), 'head')} of {count(sites, 'site')}{over} -> {out / HEADS}")
    if not moved:
        print("no head changed: every compared head's weights are the same in A and B (|Δ| 0)")
    elif top > 0:  # (--top 0: the files alone; a header over no line read as a list that came out empty)
        # 4 significant digits, as the window's status line: an int8 copy's JS of ~1e-6 bits read "JS 0.0000" on
        # every line at four decimals, as if nothing had moved, ranked by digits not shown
        print("most changed (JS divergence, bits; largest |Δ|; top-1 agreement):")
    for r in first[:top]:
        print(
            f"  {r['stack']} {r['kind']} {r['layer']}:{r['head']}  JS {r['js_divergence']:.4g}  "
            f"|Δ| {r['max_abs_diff']:.4g}  top-1 {r['top1_agreement']:.0%}"
        )
    for o in outputs:
        kl = f", KL(A‖B) {o['kl_bits']:.4g} bits" if o["kl_bits"] is not None else ""
        print(f"output {o['name']}: max |Δ| {o['max_abs_diff']:.4g}{kl}")
    for u in unmatched:
        print(f"not compared: {u}")


def most_changed_item(items: Path, width: int = 60) -> str | None:
    """The item whose heads moved most (its mean JS over the compared heads), from ``items.parquet``: "which verse
    moved most?" was a parquet file to open; None when no item's heads moved."""
    import pyarrow.parquet as pq

    rows = pq.read_table(items, columns=["item", "text", "js_divergence", "max_abs_diff"]).to_pylist()
    rows = [r for r in rows if r["js_divergence"] == r["js_divergence"]]  # (NaN: an item with no real rows)
    if not rows:
        return None
    top = max(rows, key=lambda r: r["js_divergence"])
    if top["js_divergence"] <= 0 and top["max_abs_diff"] <= 0:
        return None
    text = " ".join(str(top["text"]).split())
    text = text if len(text) <= width else text[: width - 1] + "…"
    return (
        f"most changed item: #{top['item']} (JS {top['js_divergence']:.4g} bits, |Δ| {top['max_abs_diff']:.4g}): "
        f"“{text}”"
    )


# a corpus run's flags that one input has no use for, and the other way round: refused rather than ignored
CORPUS_ONLY = ("text_pair_column", "batch_size", "max_items", "workers", "threads", "ray_address")
# one input's flags that a corpus run has no use for: refused rather than ignored
SINGLE_ONLY = ("text", "text_pair", "image", "audio", "inputs", "generate", "variant_a", "variant_b")


def _run_corpus(args) -> int:
    from attnviz import AttnvizError
    from attnviz.corpus.compare_run import ITEMS, CompareCorpusConfig, run_compare_corpus
    from attnviz.corpus.config import engine_flags

    given = [f"--{n.replace('_', '-')}" for n in SINGLE_ONLY if getattr(args, n, None)]
    if given:
        raise AttnvizError(
            f"--texts compares over a corpus and {', '.join(given)} on one input; give one or the other "
            "(a second sentence per item: --text-pair-column C)"
        )
    cfg = CompareCorpusConfig(
        a=args.model,
        b=args.other,
        out=args.out,
        texts=args.texts,
        pair_column=args.text_pair_column,
        batch_size=32 if args.batch_size is None else args.batch_size,
        max_items=args.max_items,
        max_tokens=args.max_tokens,
        **engine_flags(args),
    )
    r = run_compare_corpus(cfg)
    from attnviz.core.words import count

    resumed = f", resumed after {r.resumed_items}" if r.resumed_items else ""
    over = f" over {count(r.items, 'item')} ({count(r.batches, 'batch', 'batches')}{resumed})"
    _report(r.heads, r.outputs, r.unmatched, r.out, args.top, over)
    top_item = most_changed_item(r.out / ITEMS)
    if top_item:
        print(top_item)
    print(f"per item: {r.out / ITEMS}; {r.wall_s:.1f} s")
    if r.note:
        from attnviz.core.notice import say

        say(r.note)
    return 0
