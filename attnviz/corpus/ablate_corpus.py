"""``attnviz ablate MODEL (--all-heads | --heads SPEC) --texts FILE``: which heads matter over a corpus.

The corpus engine (:data:`attnviz.corpus.engines.ENGINES`: the local process pool, or Ray over the driver's
batches) runs :class:`~attnviz.corpus.ablate_work.HeadAblator` workers, each with one gated session used for
every ablation of every batch; partials fold here in batch order (so ``--engine local`` and ``ray``, any worker
count and a resumed run give the same numbers) and are checkpointed like ``attnviz corpus``'s.

Per ablation, over the corpus (each item weighs the same, whatever its length):

* ``ablation_kl``: the mean over items of KL(base ‖ ablated) in bits, each item's the mean over its real positions;
* ``ablation_delta_loss`` / ``ablation_delta_acc``: with labels, the mean over labelled items of the ablated
  run's loss (cross-entropy, nats) / accuracy minus the base run's — a classifier's ``--label-column``, or for a
  decoder its next tokens (each item's mean over its positions but the last);
* ``ablation_max_dlogit``: the largest |Δ| of the main output over every real position of the corpus;
* ``prediction_changed``: the share of items whose argmax changed at some real position.

``--mode mean`` (a first pass over the corpus in the driver): a head's corpus mean is, at each query position q,
the mean of its attention rows at q over the items that have a real token at q (padded rows never count, and a
padded key's weight is taken as 0).  An ablated item of length L gets, at each of its real rows q, that mean
row restricted to its own L keys and renormalised to sum to 1, so no weight lands on padding; in a causal decoder
every item's row q is 0 beyond q, so the mean row is too: the mean ablation stays causal.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnviz import AttnvizError
from attnviz.corpus.ablate_work import AblatePartial, AblateSetup, LabelledSpec, Off

CHECKPOINT = "checkpoint.npz"
CHECKPOINT_EVERY_S = 2.0


@dataclass
class AblateCorpusConfig:
    model: str
    out: str
    texts: str
    heads: str | None = None  # "STACK KIND LAYER:HEAD,...": one joint ablation
    all_heads: bool = False  # each head alone
    mode: str = "zero"  # "zero" | "mean" (the corpus mean)
    label_column: str | None = None
    batch_size: int = 32
    max_items: int | None = None
    engine: str = "local"
    provider: str = "auto"
    tokenizer: str | None = None
    workers: int | None = None
    threads: int | None = None
    ray_address: str | None = None
    progress: bool = True


@dataclass
class AblateCorpusResult:
    rows: list[dict]
    run: dict
    out: Path


class Totals:
    """Running sums over the folded batches; ``fold`` takes partials strictly in batch order."""

    FIELDS = ("kl", "dmax", "changed", "loss", "acc")
    SCALARS = ("next_batch", "items", "labelled", "base_loss", "base_acc")

    def __init__(self, n: int):
        self.next_batch = self.items = self.labelled = 0
        self.base_loss = self.base_acc = 0.0
        self.kl, self.dmax, self.loss, self.acc = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
        self.changed = np.zeros(n, np.int64)
        self.seconds: dict[str, float] = {}

    def fold(self, p: AblatePartial) -> None:
        if p.batch_id != self.next_batch:
            raise AttnvizError(f"internal: batch {p.batch_id} arrived while {self.next_batch} was expected")
        # built aside and swapped in by one update: a Ctrl-C finds the batch wholly folded or not at all
        self.__dict__.update(
            next_batch=self.next_batch + 1,
            items=self.items + p.items,
            labelled=self.labelled + p.labelled,
            base_loss=self.base_loss + p.base_loss,
            base_acc=self.base_acc + p.base_acc,
            kl=self.kl + p.kl,
            dmax=np.maximum(self.dmax, p.dmax),
            changed=self.changed + p.changed,
            loss=self.loss + p.loss,
            acc=self.acc + p.acc,
            seconds={k: self.seconds.get(k, 0.0) + v for k, v in p.seconds.items()},
        )

    def save(self, path: Path, fingerprint: str) -> None:
        from attnviz.core.writes import atomic_path

        arrays: dict[str, Any] = {n: np.asarray(getattr(self, n)) for n in (*self.FIELDS, *self.SCALARS)}
        with atomic_path(path) as tmp, open(tmp, "wb") as f:  # atomic: an interrupt leaves the previous one
            np.savez(f, fingerprint=np.array(fingerprint), **arrays)

    @classmethod
    def load(cls, path: Path, fingerprint: str, n: int) -> Totals | None:
        import os

        from attnviz.core.untrusted import open_regular

        if not os.path.lexists(path):
            return None
        f = open_regular(path, "checkpoint")
        try:
            with f, np.load(f) as z:
                if str(z["fingerprint"]) != fingerprint:
                    return None
                t = cls(n)
                for k in cls.FIELDS:
                    setattr(t, k, z[k])
                for k in cls.SCALARS:
                    setattr(t, k, z[k].item())
        except Exception as e:  # truncated or not ours
            raise AttnvizError(f"{path}: unreadable checkpoint ({type(e).__name__}); delete it to start over") from None
        return t


def _check(cfg: AblateCorpusConfig) -> None:
    from attnviz.corpus.engines import ENGINES

    if cfg.batch_size < 1:
        raise AttnvizError("--batch-size must be 1 or more")
    if cfg.max_items is not None and cfg.max_items < 1:
        raise AttnvizError("--max-items must be 1 or more")
    if cfg.workers is not None and cfg.workers < 1:
        raise AttnvizError("--workers must be 1 or more")
    if cfg.engine not in ENGINES:
        raise AttnvizError(f"unknown engine {cfg.engine!r}; use {' or '.join(ENGINES)}")
    if cfg.ray_address and cfg.engine != "ray":
        raise AttnvizError("--ray-address needs --engine ray")
    if cfg.engine == "ray":
        from attnviz.corpus.run import _importable

        if not _importable("ray"):
            raise AttnvizError("--engine ray needs Ray: pip install 'ray[data]' (or use --engine local)")
    if cfg.mode not in ("zero", "mean"):
        raise AttnvizError(f"unknown --mode {cfg.mode!r}; use zero or mean")
    out = Path(cfg.out)
    if out.exists() and not out.is_dir():
        raise AttnvizError(f"--out {out} is a file; give a folder for the results")


def run_ablation(cfg: AblateCorpusConfig, on_batch: Callable[[int], None] | None = None) -> AblateCorpusResult:
    """Run ``cfg``; ``on_batch(items_done)`` after each folded batch (an exception there, e.g. KeyboardInterrupt,
    stops the run with its progress checkpointed)."""
    from attnviz.core.writes import command_scope
    from attnviz.corpus import output
    from attnviz.corpus.tables import RUN

    _check(cfg)
    with command_scope():
        output.guard(
            Path(cfg.out),
            {"the model": cfg.model, "the --texts file": cfg.texts, "the --tokenizer file": cfg.tokenizer},
            (CHECKPOINT, RUN),
        )
        return _run(cfg, on_batch)


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
        if isinstance(v, str) and names is not None and v in names:
            got[k] = names.index(v)
        elif isinstance(v, int) and not isinstance(v, bool) and 0 <= v < (classes or len(names or []) or v + 1):
            got[k] = v
        else:
            known = f"one of {', '.join(map(str, names))} or " if names else ""
            upto = f" 0 to {classes - 1}" if classes else " a class index"
            raise AttnvizError(
                f"--label-column {cfg.label_column}: item {k} has label {v!r}; write {known}{upto.strip()} for each item"
            )
    return "class", got


def read_labels(path: str, column: str, n: int) -> list:
    """The ``column`` value of each item of a .jsonl / .parquet corpus (items as :func:`attnviz.corpus.items.
    read_texts` keeps them: records with a non-blank ``text``), the first ``n``."""
    from attnviz.core.untrusted import parse_json, read_bytes
    from attnviz.corpus.items import read_parquet

    p = Path(path)
    suffix = p.suffix.lower()
    out: list = []
    if suffix == ".jsonl":
        for line in read_bytes(p, "--texts").decode("utf-8", errors="replace").splitlines():
            if line.strip():
                rec = parse_json(line, p.name)
                if isinstance(rec, dict) and isinstance(rec.get("text"), str) and rec["text"].strip():
                    out.append(rec.get(column))
    elif suffix == ".parquet":
        try:
            t = read_parquet(p, ["text", column])
        except Exception as e:
            raise AttnvizError(f"{p.name}: cannot read a {column!r} column ({str(e).splitlines()[0][:160]})") from None
        texts, values = t.column("text").to_pylist(), t.column(column).to_pylist()
        out = [v for tx, v in zip(texts, values) if isinstance(tx, str) and tx.strip()]
    else:
        raise AttnvizError(f"--label-column {column}: .txt files have no columns; use .jsonl or .parquet")
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


def plan_ablation(cfg: AblateCorpusConfig) -> Plan:
    """Open the model, read and tokenise the corpus, cut the batches, and (``--mode mean``) run the first pass."""
    from attnviz.corpus import items as it
    from attnviz.corpus.engines import default_workers
    from attnviz.corpus.plan import encode_items, has_mask, plan_text
    from attnviz.corpus.reduce import default_threads
    from attnviz.corpus.run import _gpu_session
    from attnviz.runtime.ablation import REGRESSION_TASKS

    model, kind = _open(cfg)
    chosen, offs, refused = _ablations(cfg, model)
    names = [o.name for o in model.outputs]
    output = "logits" if "logits" in names else names[0]
    distribution = model.meta.get("task") not in REGRESSION_TASKS and "logit" in output.lower()
    items = it.read_texts(cfg.texts, None, cfg.max_items)
    labels_kind, labels = _labels(cfg, model, kind, len(items), output)
    enc = encode_items(model, items)
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
    )


def _run(cfg: AblateCorpusConfig, on_batch: Callable[[int], None] | None) -> AblateCorpusResult:
    import onnxruntime

    from attnviz import __version__
    from attnviz.corpus.engines import ENGINES
    from attnviz.corpus.run import _bar

    t_start = time.perf_counter()
    plan = plan_ablation(cfg)  # the driver's model is released with it: the workers hold their own sessions
    setup, specs, fingerprint, offs, sites = plan.setup, plan.specs, plan.fingerprint, plan.offs, plan.sites
    chosen, refused, kind, labels_kind = plan.chosen, plan.refused, plan.kind, plan.labels
    model_sha, data_sha, workers, threads, gpu = plan.model_sha, plan.data_sha, setup.workers, setup.threads, setup.gpu
    output, distribution = setup.output, setup.distribution
    out = Path(cfg.out)
    made = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    ckpt = out / CHECKPOINT
    tot = Totals.load(ckpt, fingerprint, len(offs))
    if tot is None and ckpt.exists():
        raise AttnvizError(
            f"{ckpt} belongs to another run (model, data, heads, mode or batch size differ); use another --out or "
            "delete it"
        )
    tot = tot or Totals(len(offs))
    resumed = tot.items
    bar = _bar(cfg, plan.items, resumed)  # type: ignore[arg-type]  # reads .progress only
    t0 = last_save = time.perf_counter()
    try:
        for part in ENGINES[cfg.engine](setup, specs[tot.next_batch :]):  # type: ignore[arg-type]
            tot.fold(part)  # type: ignore[arg-type]  # an AblateSetup's workers hand back AblatePartials
            bar.update(part.items)
            if tot.next_batch == 1 or time.perf_counter() - last_save > CHECKPOINT_EVERY_S:
                tot.save(ckpt, fingerprint)
                last_save = time.perf_counter()
            if on_batch is not None:
                on_batch(tot.items)
    except BaseException:
        if tot.next_batch > 0:
            tot.save(ckpt, fingerprint)  # interrupted: every folded batch is kept for the next run
        elif made and not any(out.iterdir()):
            out.rmdir()
        bar.close()
        raise
    bar.close()
    run_s = time.perf_counter() - t0
    rows = _rows(tot, offs, sites, distribution, labels_kind is not None and distribution and tot.labelled > 0)
    sec = tot.seconds
    run = {
        "model": {"path": str(Path(cfg.model).resolve()), "sha256": model_sha},
        "model_kind": kind,
        "data": {"path": str(Path(cfg.texts).resolve()), "sha256": data_sha, "sha256_of": "items"},
        "label_column": cfg.label_column,
        "labels": labels_kind,
        "mode": cfg.mode,
        "output": output,
        "items": tot.items,
        "labelled_items": tot.labelled,
        "base_loss": tot.base_loss / tot.labelled if tot.labelled else None,
        "base_accuracy": tot.base_acc / tot.labelled if tot.labelled else None,
        "batch_size": cfg.batch_size,
        "batches": tot.next_batch,
        "engine": cfg.engine,
        "workers": workers,
        "threads_per_worker": threads,
        "provider": cfg.provider,
        "gpu": gpu,
        "resumed_from_items": resumed,
        "sites": [{"site": sites[i].label, "node": sites[i].node, "heads": sites[i].heads} for i in chosen],
        "not_ablated": refused,
        "rows": "one per head ablated alone" if cfg.all_heads else "one per named head, all with the joint numbers",
        "measures": MEASURE_NOTES,
        "seconds": {
            "wall": time.perf_counter() - t_start,
            "ablation_run": run_s,
            # summed over the workers' batches (this run's, a resumed run's included): what a head costs
            "worker_base_forward": sec.get("base_wall", 0.0),
            "worker_per_ablation": sec.get("ablations_wall", 0.0) / max(len(offs), 1),
            "worker_base_forward_cpu": sec.get("base_cpu", 0.0),
            "worker_per_ablation_cpu": sec.get("ablations_cpu", 0.0) / max(len(offs), 1),
        },
        "versions": {
            "attnviz": __version__,
            "onnxruntime": onnxruntime.__version__,
            "numpy": np.__version__,
            **({"ray": __import__("ray").__version__} if cfg.engine == "ray" else {}),
        },
    }
    from attnviz.corpus.tables import write_heads

    write_heads(out, rows, CORPUS_MEASURES, run)
    ckpt.unlink(missing_ok=True)
    return AblateCorpusResult(rows, run, out)


# heads.parquet's columns after the head keys: means over the items (MEASURE_NOTES says how each is taken)
CORPUS_MEASURES = (
    ("ablation_kl", "float64"),
    ("ablation_delta_loss", "float64"),
    ("ablation_delta_acc", "float64"),
    ("ablation_max_dlogit", "float64"),
    ("prediction_changed", "float64"),  # the share of items
    ("ablated_together", "int64"),
    ("items", "int64"),
)

MEASURE_NOTES = {
    "ablation_kl": "mean over items of KL(base ‖ ablated) of the softmax over the output's last axis, bits; each "
    "item's is the mean over its real positions (null: the output is not logits)",
    "ablation_delta_loss": "mean over labelled items of the ablated loss minus the base loss (cross-entropy, nats): "
    "the --label-column class, or a decoder's next token at each position but the last (null: no labels)",
    "ablation_delta_acc": "the same for accuracy (argmax = label), as a fraction",
    "ablation_max_dlogit": "largest |base − ablated| of the output over every real position of the corpus",
    "prediction_changed": "share of items whose argmax changed at some real position (null: not logits)",
    "mode": "zero: the head's weights × 0; mean: each real row q of the head becomes the corpus-mean row at q (over "
    "the items with a real token at q) restricted to the item's real keys and renormalised",
}


def _rows(tot: Totals, offs: list[Off], sites, dist: bool, labelled: bool) -> list[dict]:
    from attnviz.corpus.tables import row_keys

    n = max(tot.items, 1)
    lab = max(tot.labelled, 1)
    rows = []
    for a, off in enumerate(offs):
        together = sum(len(h) for _, h in off)
        for i, heads in off:
            for h in heads:
                rows.append(
                    {
                        **row_keys(sites[i], h),
                        "ablation_kl": float(tot.kl[a] / n) if dist else None,
                        "ablation_delta_loss": float((tot.loss[a] - tot.base_loss) / lab) if labelled else None,
                        "ablation_delta_acc": float((tot.acc[a] - tot.base_acc) / lab) if labelled else None,
                        "ablation_max_dlogit": float(tot.dmax[a]),
                        "prediction_changed": float(tot.changed[a] / n) if dist else None,
                        "ablated_together": together,
                        "items": tot.items,
                    }
                )
    return rows
