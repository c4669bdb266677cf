"""attnviz ablate MODEL (--text T | --image P | --audio CLIP | --inputs FEEDS.npz) (--heads SPEC | --all-heads) --out DIR:
which heads matter for this input?

A gate on each chosen head (:mod:`attnviz.runtime.graph.ablate`: on its probabilities before the P·V product, or
on a fused op's output slice where the probabilities are internal) switches it off in an in-memory copy of the
graph — the user's file is never written — and the model's main output is compared with the unablated run
(:mod:`attnviz.runtime.ablation`): the largest |Δlogit|, KL(base ‖ ablated) of the output distribution in bits,
whether the top prediction changed, and with ``--generate N`` whether the greedy generation changed.

``--heads "encoder self 2:5,decoder cross 0:1"`` switches the named heads off *together* (one joint ablation);
``--all-heads`` switches each head of every site off *alone*, one forward per head through one session.
``--mode zero`` (default) zeroes the head; ``--mode mean`` replaces its rows by their mean over the input's query
rows (one input: the corpus mean of the literature is the mean over this input's rows).

Writes ``DIR/heads.parquet`` — ``stack, kind, layer, head, ablation_kl, ablation_max_dlogit, prediction_changed``,
plus ``generation_changed`` and ``generated`` (the ablated run's tokens; null without ``--generate``), ``gate`` (``probabilities`` | ``output``) and
``ablated_together`` (1 for ``--all-heads``; for ``--heads``, the number of heads in the joint ablation, whose
numbers every named head's row repeats) — and ``DIR/run.json``, and prints the heads by KL.

With ``--texts FILE`` (and ``--label-column C``) the same ablations run over a corpus through the corpus engine:
:mod:`attnviz.corpus.ablate_corpus` (per head: mean KL, Δloss, Δaccuracy over the items; resumable).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from attnviz.core.steps_default import DEFAULT_GENERATE
from attnviz.corpus import outfiles
from attnviz.corpus.config import heads_shown
from attnviz.corpus.tables import HEADS, RUN, given_input, row_keys, write_heads

HELP = "switch attention heads off (a gate in an in-memory copy of the graph) and measure the output change"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="ONNX model file")
    src = p.add_argument_group("input (one of)")
    src.add_argument("--inputs", metavar="FEEDS.npz", help="raw feeds: .npz keyed by ONNX input name")
    src.add_argument("--text", metavar="T", help="text (tokenised with the model's tokenizer)")
    src.add_argument(
        "--text-pair", metavar="T2", help="second text: sentence B for encoders, the forced target for encoder-decoders"
    )
    src.add_argument("--image", metavar="PATH", help="image file for vision models")
    src.add_argument(
        "--audio",
        metavar="FILE",
        help="sound file (WAV, FLAC, OGG) for a speech model in one ONNX file (wav2vec2, a Whisper export's "
        "encoder_model.onnx)",
    )
    src.add_argument("--max-seconds", type=float, metavar="S", help="keep only the first S seconds of the --audio clip")
    src.add_argument(
        "--texts",
        metavar="FILE",
        help='a corpus: .txt (one item a line), .jsonl ("text" field), .parquet, .tsv or .csv ("text" column; .tsv / '
        ".csv: a header row naming it); each head's importance over it (the corpus engine)",
    )
    which = p.add_argument_group("heads (one of)")
    which.add_argument(
        "--heads",
        metavar="SPEC",
        help="heads switched off together: 'STACK KIND LAYER:HEAD,...', e.g. 'encoder self 2:5,decoder cross 0:1'; "
        "'encoder self 2:*': every head of that layer; layers and heads counted from 0, as the window's L0 / H0 "
        "and compare's rows",
    )
    which.add_argument("--all-heads", action="store_true", help="every head alone, one at a time")
    p.add_argument(
        "--mode",
        dest="ablation",
        choices=("zero", "mean"),
        default="zero",
        help="zero: the head's weights become 0; mean: its rows become their mean over the input's query rows "
        "(over a corpus: the head's corpus-mean row at each query position)",
    )
    p.add_argument("--out", required=True, metavar="DIR", help=f"results folder: {HEADS}, {RUN}")
    p.add_argument(
        "--generate",
        type=int,
        metavar="N",
        help="greedy steps: did the generation change? (default: the window's, "
        f"{DEFAULT_GENERATE} for a translation or captioning model, none when a target is given (--text-pair; a "
        "captioner's --text) or for other models; the output change is then measured over the generated tokens too. "
        "0: no generation, faster with --all-heads, where each head's generation re-runs the sequence every step)",
    )
    p.add_argument("--tokenizer", metavar="FILE", help="tokenizer.json (default: from metadata or beside the model)")
    p.add_argument(
        "--max-tokens",
        type=int,
        metavar="N",
        help="keep only the first N tokens of the text, a final [SEP] or </s> kept last (a --text-pair pair: the "
        "longer sentence cut first, special tokens kept, as 'attnviz corpus --max-tokens'); with --texts each "
        "item's, the base and ablated runs reading the same cut item",
    )
    p.add_argument("--provider", choices=("auto", "cpu", "cuda"), default="auto", help="execution provider")
    p.add_argument("--image-size", type=int, nargs=2, metavar=("H", "W"), help="resize images to H W")
    p.add_argument("--image-mean", type=float, nargs="+", metavar="M", help="per-channel mean")
    p.add_argument("--image-std", type=float, nargs="+", metavar="S", help="per-channel std")
    p.add_argument(
        "--top",
        type=heads_shown,
        default=5,
        metavar="K",
        help="heads printed, largest KL first (an output with no KL, an encoder's features: largest |Δ|; default 5)",
    )
    corpus = p.add_argument_group("over a corpus (--texts)")
    corpus.add_argument(
        "--label-column",
        metavar="C",
        help="field / column of each item's class (index or label name): Δloss and Δaccuracy per head (a decoder's "
        "labels are its next tokens: no column needed)",
    )
    corpus.add_argument("--batch-size", type=int, default=32, metavar="N", help="items per padded batch (default 32)")
    corpus.add_argument("--max-items", type=int, metavar="N", help="only the first N items")
    corpus.add_argument(
        "--engine", choices=("local", "ray"), default="local", help="local process pool (default), or Ray"
    )
    corpus.add_argument("--workers", type=int, metavar="N", help="worker processes / Ray actors (default: 1 per core)")
    corpus.add_argument("--threads", type=int, metavar="N", help="onnxruntime threads per worker")
    corpus.add_argument("--ray-address", metavar="ADDR", help="Ray cluster address (default: start Ray locally)")
    corpus.add_argument("--no-progress", action="store_true", help="no progress bar (one input has none)")


def _row(site, head: int, c, gate: str, together: int, words, vision_tower: bool = False) -> dict:
    """One head's row; ``words``: token ids -> their tokens (the ablated generation's, kept whole here)."""
    return {
        **row_keys(site, head, vision_tower),
        "ablation_kl": c.kl_bits,
        "ablation_max_dlogit": float(c.max_dlogit),
        "prediction_changed": c.prediction_changed,
        "changed_positions": c.changed_positions,
        "generation_changed": c.generation_changed,
        "generated": None if c.generated is None else " ".join(words(c.generated)),
        "gate": gate,
        "ablated_together": together,
    }


MEASURES = (
    ("ablation_kl", "float64"),
    ("ablation_max_dlogit", "float64"),
    ("prediction_changed", "bool_"),
    ("changed_positions", "int64"),
    ("generation_changed", "bool_"),
    ("generated", "string"),
    ("gate", "string"),
    ("ablated_together", "int64"),
)


def write(out: Path, rows: list[dict], run: dict) -> None:
    """``heads.parquet`` (the head keys and :data:`MEASURES`) and ``run.json`` into ``out``."""
    write_heads(out, rows, MEASURES, run)


def _open(args):
    from attnviz import AttnvizError
    from attnviz.runtime import AttentionModel, open_model
    from attnviz.runtime.ablation import known_heads
    from attnviz.runtime.sample import no_input

    missing = args.inputs is None and args.text is None and args.image is None and args.audio is None
    if missing and not Path(args.model).is_dir():  # (a folder: its own refusal first, below, whatever the input)
        raise AttnvizError(no_input(args.model))
    if args.heads is None and not args.all_heads:
        raise AttnvizError("say which heads: --heads 'encoder self 0:1,...' (switched off together) or --all-heads")
    if args.heads is not None and args.all_heads:
        raise AttnvizError("give --heads or --all-heads, not both")
    model = open_model(args.model, provider=args.provider, tokenizer=args.tokenizer)
    if not isinstance(model, AttentionModel):
        raise AttnvizError(_folder_refusal(args, model))
    if missing:
        raise AttnvizError(no_input(args.model))
    if not model.sites:
        raise AttnvizError(f"{model.path.name}: {model.no_attention_reason}")
    if args.inputs is None and model.pair_with_encoder() is not None:
        raise AttnvizError(
            f"{model.path.name} is the decoder of an export: ablate it with --inputs FEEDS.npz holding the "
            "encoder's states, or ablate the merged model file"
        )
    known_heads(model)  # --heads names heads by index: their counts first
    return model


def _folder_refusal(args, model) -> str:
    """The line for an export folder of several files.  A speech model's (the Whisper demo): ablate gates one
    file's heads, so its encoder file on the clip is what ablate can do (its decoder's cross-attention reads the
    encoder's states, which only --inputs can give it)."""
    said = f"{args.model}: ablate runs one ONNX file, and this is an export folder of several"
    from attnviz.runtime.folder import ENCODER_FILE

    encoder = Path(model.path) / ENCODER_FILE
    if "audio" not in model.meta or not encoder.is_file():
        return f"{said}; give one of its files"
    from attnviz.runtime.sample import sample_for_path

    sample = sample_for_path(Path(args.model))  # the folder's own clip (the demo's sample.wav), if it names one
    clip = args.audio or (sample.values.get("audio") if sample is not None else None) or "CLIP.wav"
    return (
        f"{said} (a speech model: its encoder and its decoder); switch the encoder's heads off on the clip with "
        f"'attnviz ablate {encoder} --audio {clip} --all-heads --out DIR' (the decoder's file takes --inputs "
        "FEEDS.npz holding the encoder's states)"
    )


CORPUS_ONLY = ("label_column", "max_items", "workers", "threads", "ray_address")


def run(args) -> int:
    if args.texts is not None:
        return run_corpus(args)
    from attnviz import AttnvizError

    for name in CORPUS_ONLY:
        if getattr(args, name) is not None:
            raise AttnvizError(f"--{name.replace('_', '-')} is for a corpus run: give --texts FILE (or drop it)")
    if args.engine != "local" or args.batch_size != 32:
        raise AttnvizError("--engine and --batch-size are for a corpus run: give --texts FILE (or drop them)")
    return run_one(args)


def run_corpus(args) -> int:
    """``--texts FILE``: :func:`attnviz.corpus.ablate_corpus.run_ablation`, then the heads by KL."""
    from attnviz import AttnvizError
    from attnviz.core.words import count
    from attnviz.corpus.ablate_corpus import AblateCorpusConfig, run_ablation
    from attnviz.corpus.config import engine_flags

    given = [
        f
        for f, v in (("--text", args.text), ("--inputs", args.inputs), ("--image", args.image), ("--audio", args.audio))
        if v
    ]
    given += ["--max-seconds"] if args.max_seconds is not None else []
    given += ["--text-pair"] if args.text_pair else []
    given += ["--generate"] if args.generate else []
    given += [f for f, v in (("--image-size", args.image_size), ("--image-mean", args.image_mean)) if v]
    given += ["--image-std"] if args.image_std else []
    if given:
        raise AttnvizError(
            f"{', '.join(given)}: for one input; over a corpus (--texts) drop {'them' if len(given) > 1 else 'it'}"
        )
    r = run_ablation(
        AblateCorpusConfig(
            model=args.model,
            out=args.out,
            texts=args.texts,
            heads=args.heads,
            all_heads=args.all_heads,
            mode=args.ablation,
            label_column=args.label_column,
            batch_size=args.batch_size,
            max_items=args.max_items,
            max_tokens=args.max_tokens,
            **engine_flags(args),
        )
    )
    run = r.run
    base = ""
    if run["base_loss"] is not None:
        base = f"; base loss {run['base_loss']:.4g} nats, accuracy {run['base_accuracy']:.4g}"
    print(
        f"ablated ({args.ablation}) {'each of ' if args.all_heads else ''}{count(len(r.rows), 'head')} over "
        f"{count(run['items'], 'item')}{'' if args.all_heads else ' together'} -> {r.out / HEADS}{base}"
    )
    # without a KL (an output that is no distribution) the mean over items of each item's largest |Δ| ranks: the
    # corpus-wide largest let one outlier item decide
    top = sorted(r.rows, key=_corpus_rank)
    # Δ's direction said: "Δloss +0.23" read either way (does switching the head off raise the loss or lower it?)
    measures = {
        "ablation_kl": "mean KL(base ‖ ablated), bits",
        "ablation_delta_loss": "Δloss = ablated − base, nats",
        "ablation_delta_acc": "Δacc = ablated − base accuracy",
    }
    said = _measured(r.rows, measures, run["output"], corpus=True)
    if not args.all_heads:  # one joint ablation: its numbers once (every row repeats them), not a ranking of equals
        print(f"output change, all {len(r.rows)} together ({said}): {_said(top[0])}")
    elif args.top > 0:  # (--top 0: the files alone, no header over no line)
        print(f"heads that matter most ({said}):")
    for x in top[: args.top] if args.all_heads else []:
        print(f"  {x['stack']} {x['kind']} {x['layer']}:{x['head']}  {_said(x)}")
    for line in run["not_ablated"]:
        print(f"not ablated: {line}")
    if r.note:
        from attnviz.core.notice import say

        say(r.note)
    return 0


def run_one(args) -> int:
    import numpy as np
    import onnxruntime

    from attnviz import AttnvizError, __version__
    from attnviz.core.attention import shown_label, shown_stack
    from attnviz.core.words import count
    from attnviz.core.writes import guard
    from attnviz.corpus.items import sha256_model
    from attnviz.runtime.ablation import Ablation, gateable, parse_heads
    from attnviz.runtime.commands.common import request_from_args, resolve_generate
    from attnviz.runtime.host import prestart

    out = Path(args.out)
    inputs = {
        "the model": args.model,
        "the --inputs file": args.inputs,
        "the --image file": args.image,
        "the --audio file": args.audio,
        "the --tokenizer file": args.tokenizer,
    }
    if out.exists() and not out.is_dir():
        raise AttnvizError(f"--out {out} is a file; give a folder for {HEADS} and {RUN}")
    outfiles.refuse_foreign(out, "ablate")
    guard(inputs, {"--out": [out / HEADS, out / RUN]})  # before any work: an output never replaces an input
    outfiles.refuse_model_folder(out, {"the model": args.model})
    prestart()
    model = _open(args)
    sites = model.sites
    vision_tower = model.frames is not None  # a VLM's vision file alone: its heads are "vision self" (as its views say)
    if args.all_heads:
        chosen, refused = gateable(model)
        if not chosen:
            raise AttnvizError(f"no head can be ablated: {'; '.join(refused)}")
        off_sets = [{i: [h]} for i in chosen for h in range(sites[i].heads)]
    else:
        wanted = parse_heads(args.heads, sites, vision_tower)
        chosen, refused = sorted(wanted), []
        off_sets = [wanted]
    resolve_generate(args, model)  # not given: the window's steps for the model's kind (its ablation runs them)
    req = request_from_args(args)
    t0 = time.perf_counter()
    ab = Ablation(model, chosen, args.ablation, req)
    session_s = time.perf_counter() - t0 - ab.base_s
    rows: list[dict] = []
    t1 = time.perf_counter()
    changes, top1s = [], []
    for off in off_sets:
        got = ab.run(off)
        changes.append(ab.change(off, got))
        top1s.append(ab.top1(got))  # the prediction before → after, as the window's panel says it
    ablations_s = time.perf_counter() - t1

    def words(ids):
        return ab.words(ids) if ids is not None else None

    for off, c in zip(off_sets, changes):
        together = sum(len(h) for h in off.values())
        for i, heads in sorted(off.items()):
            rows.extend(
                _row(sites[i], h, c, ab.gates[i].method, together, ab.words, vision_tower) for h in sorted(heads)
            )

    base_top1 = ab.top1(ab.base)

    joint = None
    if not args.all_heads:
        c = changes[0]
        joint = {
            "heads": [
                f"{shown_stack(sites[i].stack, vision_tower)} {sites[i].kind} {sites[i].layer}:{h}"
                for i, hs in sorted(off_sets[0].items())
                for h in hs
            ],
            "ablation_kl": c.kl_bits,
            "ablation_max_dlogit": c.max_dlogit,
            "prediction_changed": c.prediction_changed,
            "changed_positions": c.changed_positions,
            "positions": c.positions,
            "prediction": None if top1s[0] is None else top1s[0].after,
            "generation_changed": c.generation_changed,
            "generated": words(c.generated),
        }
    run_info = {
        "model": {"path": str(args.model), "sha256": sha256_model(args.model)},
        "input": given_input(args, ("text", "text_pair", "image", "audio", "max_seconds", "inputs", "generate")),
        "mode": args.ablation,
        "output": ab.output,
        "base_generated": words(ab.base_generated) if args.generate else None,
        # the unablated run's top prediction (a classifier's label; else the last position's next token)
        "base_prediction": None if base_top1 is None else base_top1.before,
        "sites": [
            {"site": shown_label(sites[i], vision_tower), "node": sites[i].node, "heads": g.heads, "gate": g.method}
            for i, g in sorted(ab.gates.items())
        ],
        "not_ablated": refused,
        "joint": joint,
        "rows": "one per head ablated alone"
        if args.all_heads
        else "one per named head, all with the joint ablation's numbers",
        "measures": {
            "ablation_kl": f"mean KL(base ‖ ablated) of softmax({ab.output}) over the last axis, bits, over real "
            "positions (null for an output that is not logits, or a forecaster's values)",
            "ablation_max_dlogit": f"largest |base − ablated| of {ab.output} over real positions",
            "prediction_changed": "the argmax over the last axis differs at some real position (null for a "
            "forecaster's values)",
            "changed_positions": "how many real positions' argmax differs (a classifier: rows; null for values)",
            "generation_changed": "the greedy generation (--generate N, full re-run per step) differs",
            "gate": "probabilities: a mask on the head's probabilities before P·V; output: a mask on the fused "
            "op's output slice of the head (the probabilities are internal to the op)",
            "mode": "zero: the head's weights × 0; mean: each of its rows replaced by the mean over the input's "
            "query rows (in a causal decoder that mean row also weights later keys)",
        },
        "seconds": {
            "gated_session": session_s,
            "base_forward": ab.base_s,
            "per_ablation": ablations_s / max(len(off_sets), 1),
        },
        "versions": {"attnviz": __version__, "onnxruntime": onnxruntime.__version__, "numpy": np.__version__},
    }
    write(out, rows, run_info)
    print(
        f"ablated ({args.ablation}) {'each of ' if args.all_heads else ''}{count(len(rows), 'head')} of "
        f"{count(len(chosen), 'site')}{'' if args.all_heads else ' together'} -> {out / HEADS}"
    )
    for s in run_info["sites"]:
        if s["gate"] == "output":
            print(f"  {s['site']}: gated on the fused op's output per head (its probabilities are internal)")
    if joint is not None:
        kl = f"KL {joint['ablation_kl']:.4g} bits, " if joint["ablation_kl"] is not None else ""
        said = {True: "changed", False: "unchanged"}
        print(
            f"output change: {kl}max |Δ{ab.output}| {joint['ablation_max_dlogit']:.4g}"
            + "".join(f", {x}" for x in _prediction_said(changes[0], top1s[0], joint=True))
            + (f", generation {said[bool(joint['generation_changed'])]}" if args.generate else "")
        )
        if args.generate:  # the words themselves, as `extract` prints them: "changed" alone sent users to run.json
            print(f"generated (base):    {' '.join(run_info['base_generated'] or [])}")
            print(f"generated (ablated): {' '.join(joint['generated'] or [])}")
    else:
        top = sorted(rows, key=lambda r: (-(r["ablation_kl"] or 0.0), -r["ablation_max_dlogit"]))
        measured = _measured(rows, {"ablation_kl": "KL(base ‖ ablated), bits"}, ab.output)
        if base_top1 is not None:  # the baseline each head's change is against, once
            print(base_top1.base_said())
        if args.generate:  # the words a head's "generation →" is against, once
            print(f"base generation: “{' '.join(run_info['base_generated'] or [])}”")
        if args.top > 0:  # (--top 0: the files alone, no header over no line)
            print(f"heads that matter most ({measured}):")
        # --all-heads: one row per ablation, in the same order
        found = {id(r): (c, t) for r, c, t in zip(rows, changes, top1s, strict=True)}
        for r in top[: args.top]:
            kl = f"KL {r['ablation_kl']:.4g}  " if r["ablation_kl"] is not None else ""
            flags = "".join(f"  {x}" for x in _prediction_said(*found[id(r)], joint=False))
            if r["generation_changed"]:  # the words (cut), not "changed" alone: which heads made it say what
                flags += f"  generation → “{cut_words((r['generated'] or '').split(' '))}”"
            print(f"  {r['stack']} {r['kind']} {r['layer']}:{r['head']}  {kl}|Δ| {r['ablation_max_dlogit']:.4g}{flags}")
    for line in refused:
        print(f"not ablated: {line}")
    return 0


GENERATION_SHOWN = 40  # characters of a ranked head's changed generation (whole in heads.parquet's "generated")


def cut_words(tokens: list[str], width: int = GENERATION_SHOWN) -> str:
    """Generated tokens as one line cut to ``width`` characters with "…" (a ranked head's line stays one line)."""
    text = " ".join(tokens)
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"


def _prediction_said(change, top1, joint: bool) -> list[str]:
    """What the top prediction did, against the base run's: a classifier's label before → after; a per-token
    output's count of changed positions (of how many) and its last position's token before → after.  ``joint``:
    said in words when unchanged too (one line about one ablation); a ranked head's line says only a change, short
    (``prediction B → A``; ``top-1 changed at 1 of 7 positions (last: . → ,)``)."""
    from attnviz.runtime.ablation import positions_said

    if change.prediction_changed is None:  # values or features: no argmax
        return []
    if top1 is not None and not top1.last_position:  # a classifier's one label
        if joint:
            return [top1.said()]
        return [f"prediction {top1.before} → {top1.after}"] if top1.changed else []
    if joint:
        if not change.changed_positions:  # nothing moved: the last position's prediction, once
            return [(positions_said(change) or "") + (f" (last: {top1.before})" if top1 is not None else "")]
        return [positions_said(change) or "", *([top1.said()] if top1 is not None else [])]
    if not change.changed_positions:
        return []
    last = f" (last: {top1.before} → {top1.after})" if top1 is not None and top1.changed else ""
    return [f"{positions_said(change)}{last}"]


def _corpus_rank(x: dict) -> tuple[float, float, float]:
    """A corpus row's place: by KL where the output has one, then by the mean over items of each item's largest
    |Δ| (never the corpus-wide largest alone: one outlier item would decide it), then by that largest."""
    return -(x["ablation_kl"] or 0.0), -x["ablation_mean_max_dlogit"], -x["ablation_max_dlogit"]


def _said(x: dict) -> str:
    """One corpus row's measures as printed: those it has, then the mean over items of each item's largest |Δ|,
    then the corpus's largest."""
    kl = f"KL {x['ablation_kl']:.4g}  " if x["ablation_kl"] is not None else ""
    dl = f"Δloss {x['ablation_delta_loss']:+.4g}  " if x["ablation_delta_loss"] is not None else ""
    da = f"Δacc {x['ablation_delta_acc']:+.4g}  " if x["ablation_delta_acc"] is not None else ""
    return f"{kl}{dl}{da}mean |Δ| {x['ablation_mean_max_dlogit']:.4g}  max |Δ| {x['ablation_max_dlogit']:.4g}"


def _measured(rows: list[dict], measures: dict[str, str], output: str, corpus: bool = False) -> str:
    """The printed heads' measures, those the rows have: a feature output (an encoder's last_hidden_state) has no
    KL or loss, and a header naming them over lines without them sent a user looking for the missing numbers.
    ``corpus``: the mean over items of each item's largest |Δ| too, before the corpus's largest."""
    said = [words for key, words in measures.items() if any(r.get(key) is not None for r in rows)]
    mean = [f"mean over items of each item's max |Δ{output}|"] if corpus else []
    return "; ".join([*said, *mean, f"max |Δ{output}|"])
