"""Planning a corpus ablation (``attnviz ablate --texts``): open the model, choose the ablations, read the corpus
and its labels, cut the batches, and for ``--mode mean`` run the first pass (the corpus-mean rows).

What each measure is, and what "mean" means: :mod:`attnviz.corpus.ablate_corpus`.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnviz import AttnvizError
from attnviz.corpus import outfiles
from attnviz.corpus.ablate_work import AblateSetup, LabelledSpec, Off
from attnviz.corpus.config import EngineConfig
from attnviz.corpus.stream import MostlyUnknown


@dataclass
class AblateCorpusConfig(EngineConfig):
    model: str
    out: str
    texts: str
    heads: str | None = None  # "STACK KIND LAYER:HEAD,...": one joint ablation
    all_heads: bool = False  # each head alone
    mode: str = "zero"  # "zero" | "mean" (the corpus mean)
    label_column: str | None = None
    batch_size: int = 32
    max_items: int | None = None
    max_tokens: int | None = None  # each item's first N tokens (corpus/cut.py), read by the base and ablated runs


def check_config(cfg: AblateCorpusConfig) -> None:
    from attnviz.corpus.engines import ENGINES
    from attnviz.corpus.prestart import check_engine

    if cfg.batch_size < 1:
        raise AttnvizError("--batch-size must be 1 or more")
    if cfg.max_items is not None and cfg.max_items < 1:
        raise AttnvizError("--max-items must be 1 or more")
    if cfg.max_tokens is not None and cfg.max_tokens < 1:
        raise AttnvizError("--max-tokens must be 1 or more")
    check_engine(cfg, ENGINES)
    if cfg.mode not in ("zero", "mean"):
        raise AttnvizError(f"unknown --mode {cfg.mode!r}; use zero or mean")
    out = Path(cfg.out)
    if out.exists() and not out.is_dir():
        raise AttnvizError(f"--out {out} is a file; give a folder for the results")
    outfiles.refuse_foreign(out, "ablate")


def _open(cfg: AblateCorpusConfig):
    from attnviz.corpus.plan import check_model
    from attnviz.runtime import AttentionModel, open_model
    from attnviz.runtime.ablation import known_heads

    model = open_model(cfg.model, provider=cfg.provider, tokenizer=cfg.tokenizer)
    if not isinstance(model, AttentionModel):
        raise AttnvizError(
            f"{cfg.model}: ablate runs one ONNX file, and this is an export folder of several; give one of its files"
        )
    if not model.sites:
        raise AttnvizError(f"{model.path.name}: {model.no_attention_reason}")
    known_heads(model)
    kind = check_model(model)
    if kind not in ("encoder", "decoder"):
        raise AttnvizError(
            f"{model.path.name} is {'an' if kind[0] in 'aeiou' else 'a'} {kind} model; ablate over a corpus handles "
            "encoder and decoder-only text models for now (ablate one input with --text or --inputs)"
        )
    return model, kind


def _ablations(cfg: AblateCorpusConfig, model) -> tuple[list[int], list[Off], list[str]]:
    """(gated sites, the ablations, a line for each site that cannot be gated)."""
    from attnviz.runtime.ablation import gateable, parse_heads

    if cfg.heads is None and not cfg.all_heads:
        raise AttnvizError("say which heads: --heads 'encoder self 0:1,...' (switched off together) or --all-heads")
    if cfg.heads is not None and cfg.all_heads:
        raise AttnvizError("give --heads or --all-heads, not both")
    if cfg.all_heads:
        chosen, refused = gateable(model)
        if not chosen:
            raise AttnvizError(f"no head can be ablated: {'; '.join(refused)}")
        offs: list[Off] = [((i, (h,)),) for i in chosen for h in range(model.sites[i].heads)]
        return chosen, offs, refused
    wanted = parse_heads(cfg.heads or "", model.sites)
    return sorted(wanted), [tuple((i, tuple(sorted(h))) for i, h in sorted(wanted.items()))], []


def _labels(cfg: AblateCorpusConfig, model, kind: str, n: int, output: str) -> tuple[str | None, np.ndarray | None]:
    """(what the labels are, each item's class index or None)."""
    if kind == "decoder":
        if cfg.label_column:
            raise AttnvizError(
                f"--label-column {cfg.label_column}: a decoder's labels are its next tokens (the loss is scored on "
                "them); drop --label-column"
            )
        return "next-token", None
    if not cfg.label_column:
        return None, None
    out = next(o for o in model.outputs if o.name == output)
    classes = out.shape[-1] if len(out.shape) == 2 and isinstance(out.shape[-1], int) else None
    if len(out.shape) != 2:
        raise AttnvizError(
            f"--label-column {cfg.label_column}: {model.path.name}'s {output} is not one class score row per item "
            f"(shape {out.shape}); labels need a sequence classifier's [batch, classes] logits"
        )
    names = model.meta.get("labels") if isinstance(model.meta.get("labels"), list) else None
    raw = read_labels(cfg.texts, cfg.label_column, n)
    got = np.zeros(n, np.int64)
    for k, v in enumerate(raw):
        if isinstance(v, str) and not (names and v in names) and v.strip().isascii() and v.strip().isdigit():
            v = int(v)  # a class index as text: every value of a .tsv / .csv is a string
        if isinstance(v, str) and names is not None and v in names:
            got[k] = names.index(v)
        elif isinstance(v, int) and not isinstance(v, bool) and 0 <= v < (classes or len(names or []) or v + 1):
            got[k] = v
        elif v is None:
            raise AttnvizError(
                f"--label-column {cfg.label_column}: item {k} has no {cfg.label_column!r} value; give every item its "
                "label, or drop --label-column"
            )
        else:
            known = f"one of {', '.join(map(str, names))} or " if names else ""
            upto = f" 0 to {classes - 1}" if classes else " a class index"
            raise AttnvizError(
                f"--label-column {cfg.label_column}: item {k} has label {v!r}; write {known}{upto.strip()} for each item"
            )
    return "class", got


def read_labels(path: str, column: str, n: int) -> list:
    """The ``column`` value of each item of a .jsonl / .parquet / .tsv / .csv corpus (items as
    :func:`attnviz.corpus.items.read_texts` keeps them: records with a non-blank ``text``), the first ``n``."""
    from attnviz.core.untrusted import parquet_problem, parse_json
    from attnviz.corpus.items import delimited_column, read_parquet, text_lines

    p = Path(path)
    suffix = p.suffix.lower()
    out: list = []
    if suffix == ".jsonl":
        for _, line in text_lines(p):  # LF-ended lines, as read_texts reads them (splitlines cut a raw U+2028)
            if line.strip():
                rec = parse_json(line, p.name)
                if isinstance(rec, dict) and isinstance(rec.get("text"), str) and rec["text"].strip():
                    out.append(rec.get(column))
    elif suffix == ".parquet":
        try:
            t = read_parquet(p, ["text", column])
        except AttnvizError:
            raise
        except Exception as e:
            raise AttnvizError(f"{p.name}: cannot read a {column!r} column ({parquet_problem(e)})") from None
        texts, values = t.column("text").to_pylist(), t.column(column).to_pylist()
        out = [v for tx, v in zip(texts, values) if isinstance(tx, str) and tx.strip()]
    elif suffix in (".tsv", ".csv"):
        out = list(delimited_column(p, column, "--label-column"))  # strings: a class name, or digits (_labels)
    else:
        raise AttnvizError(f"--label-column {column}: .txt files have no columns; use .jsonl, .parquet, .tsv or .csv")
    return out[:n]


def corpus_means(model, specs: list[LabelledSpec], sites: list[int]) -> dict[int, np.ndarray]:
    """Each site's corpus-mean rows ``[H, T, T]`` (T: the longest item): at query q, the mean over the items with
    a real token at q of the head's row q, a padded key's weight taken as 0 (the first pass of ``--mode mean``)."""
    from attnviz.corpus.plan import text_feeds

    sums: dict[int, np.ndarray] = {}
    width = max(int(np.max(s.lengths)) for s in specs if s.lengths is not None)
    counts = np.zeros(width, np.int64)
    for spec in specs:
        feeds, lengths, _ = text_feeds(model, spec)
        maps = model.run(feeds, mode="dense").maps
        for b, n in enumerate(np.asarray(lengths).tolist()):
            counts[:n] += 1
            for i in sites:
                p = maps[i].array()[b, :, :n, :n].astype(np.float64)
                acc = sums.setdefault(i, np.zeros((p.shape[0], width, width)))
                acc[:, :n, :n] += p
    with np.errstate(invalid="ignore"):
        return {i: (s / np.maximum(counts, 1)[None, :, None]).astype(np.float32) for i, s in sums.items()}


def _npz(arrays: dict[int, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    named: dict[str, Any] = {str(k): v for k, v in arrays.items()}
    np.savez(buf, **named)
    return buf.getvalue()


@dataclass
class Plan:
    """What a corpus ablation runs: the workers' setup, the batches, and what run.json says of them."""

    setup: AblateSetup
    specs: list[LabelledSpec]
    fingerprint: str  # the checkpoint's identity: a run that would fold the very same partials
    kind: str
    sites: list  # the model's SiteInfo, by site index
    chosen: list[int]
    offs: list[Off]
    refused: list[str]
    labels: str | None
    items: int
    model_sha: str
    data_sha: str
    cut: int | None = None  # --max-tokens: the items cut (None: not asked)
    settings: dict | None = None  # what the fingerprint hashes, by name (corpus/resume_settings.py)
    unknown: MostlyUnknown | None = None  # the items mostly of the tokenizer's unknown token (None: not counted)


def plan_ablation(cfg: AblateCorpusConfig) -> Plan:
    """Open the model, read and tokenise the corpus, cut the batches, and (``--mode mean``) run the first pass."""
    from attnviz.corpus import items as it
    from attnviz.corpus.engines import default_threads, default_workers
    from attnviz.corpus.plan import encode_items, has_mask, plan_text
    from attnviz.corpus.run import _gpu_session
    from attnviz.runtime.ablation import REGRESSION_TASKS

    model, kind = _open(cfg)
    chosen, offs, refused = _ablations(cfg, model)
    names = [o.name for o in model.outputs]
    output = "logits" if "logits" in names else names[0]
    distribution = model.meta.get("task") not in REGRESSION_TASKS and "logit" in output.lower()
    items = it.read_texts(cfg.texts, None, cfg.max_items)
    labels_kind, labels = _labels(cfg, model, kind, len(items), output)
    enc = encode_items(model, items, max_tokens=cfg.max_tokens)
    specs: list[LabelledSpec] = []
    for s in plan_text(items, enc, None, None, cfg.batch_size, kind == "encoder" and not has_mask(model)):
        lab = labels[np.asarray(s.items)] if labels is not None else None
        specs.append(LabelledSpec(s.batch_id, s.items, s.lengths, s.ids, s.type_ids, s.special, labels=lab))
    means = None
    if cfg.mode == "mean":  # the first pass: one plain forward per batch, here (every engine gets the same means)
        means = _npz(corpus_means(model, specs, chosen))
    gpu = _gpu_session(model)
    workers = max(1, min(cfg.workers or default_workers(cfg.provider, gpu, cfg.engine), len(specs)))
    threads = cfg.threads or default_threads(workers)
    model_sha = it.sha256_model(cfg.model)
    data_sha = it.sha256_items(items)
    setup = AblateSetup(
        str(cfg.model),
        cfg.provider,
        cfg.tokenizer,
        threads,
        0,
        (),
        workers,
        cfg.ray_address,
        gpu,
        sites=tuple(chosen),
        offs=tuple(offs),
        mode="fed" if cfg.mode == "mean" else "zero",
        labels=labels_kind,
        means=means,
        output=output,
        distribution=distribution,
    )
    plan_h = hashlib.sha256()
    for b in specs:
        plan_h.update(np.asarray(b.items, np.int64).tobytes() + b"|")
    fingerprint = hashlib.sha256(
        json.dumps(
            [
                "ablate",
                model_sha,
                data_sha,
                cfg.batch_size,
                cfg.mode,
                labels_kind,
                None if labels is None else hashlib.sha256(labels.tobytes()).hexdigest(),
                repr(offs),
                output,
                plan_h.hexdigest(),
                *([cfg.max_tokens] if cfg.max_tokens is not None else []),  # a run without it keeps its identity
            ]
        ).encode()
    ).hexdigest()
    return Plan(
        setup,
        specs,
        fingerprint,
        kind,
        model.sites,
        chosen,
        offs,
        refused,
        labels_kind,
        len(items),
        model_sha,
        data_sha,
        None if cfg.max_tokens is None else len(enc.cuts),
        {
            "the model": model_sha,
            "the data": data_sha,
            "--batch-size": cfg.batch_size,
            "--mode": cfg.mode,
            "--label-column": cfg.label_column,
            "the heads switched off": repr(offs),
            "--max-tokens": cfg.max_tokens,
        },
        MostlyUnknown.of_texts(model, kind, enc),
    )
