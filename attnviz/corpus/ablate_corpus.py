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
* ``ablation_mean_max_dlogit``: the mean over items of each item's largest |Δ| of the main output over its real
  positions: what ranks heads whose output is no distribution (no KL), where one outlier item would decide a
  corpus-wide maximum;
* ``ablation_max_dlogit``: the largest |Δ| of the main output over every real position of the corpus;
* ``prediction_changed``: the share of items whose argmax changed at some real position.

``--mode mean`` (a first pass over the corpus in the driver): a head's corpus mean is, at each query position q,
the mean of its attention rows at q over the items that have a real token at q (padded rows never count, and a
padded key's weight is taken as 0).  An ablated item of length L gets, at each of its real rows q, that mean
row restricted to its own L keys and renormalised to sum to 1, so no weight lands on padding; in a causal decoder
every item's row q is 0 beyond q, so the mean row is too: the mean ablation stays causal.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnviz import AttnvizError
from attnviz.core.writes import make_folder, results_folder_on_failure
from attnviz.corpus.ablate_plan import AblateCorpusConfig, check_config, plan_ablation
from attnviz.corpus.ablate_work import AblatePartial, Off
from attnviz.corpus.stream import unknown_report

CHECKPOINT = "checkpoint.npz"
CHECKPOINT_EVERY_S = 2.0


@dataclass
class AblateCorpusResult:
    rows: list[dict]
    run: dict
    out: Path
    note: str | None = None  # said once after the run (a corpus mostly of the unknown token)


class Totals:
    """Running sums over the folded batches; ``fold`` takes partials strictly in batch order."""

    FIELDS = ("kl", "dmax", "dsum", "changed", "loss", "acc")
    SCALARS = ("next_batch", "items", "labelled", "base_loss", "base_acc")

    def __init__(self, n: int):
        self.next_batch = self.items = self.labelled = 0
        self.base_loss = self.base_acc = 0.0
        self.kl, self.dmax, self.dsum = np.zeros(n), np.zeros(n), np.zeros(n)
        self.loss, self.acc = np.zeros(n), np.zeros(n)
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
            dsum=self.dsum + p.dsum,
            changed=self.changed + p.changed,
            loss=self.loss + p.loss,
            acc=self.acc + p.acc,
            seconds={k: self.seconds.get(k, 0.0) + v for k, v in p.seconds.items()},
        )

    def save(self, path: Path, fingerprint: str, settings: dict | None = None) -> None:
        """``settings``: the run's settings by name (corpus/resume_settings.py), for a refused resume to name."""
        from attnviz.core.writes import atomic_path
        from attnviz.corpus import resume_settings

        arrays: dict[str, Any] = {n: np.asarray(getattr(self, n)) for n in (*self.FIELDS, *self.SCALARS)}
        with atomic_path(path) as tmp, open(tmp, "wb") as f:  # atomic: an interrupt leaves the previous one
            np.savez(f, fingerprint=np.array(fingerprint), **arrays, **resume_settings.saved(settings))

    @classmethod
    def load(cls, path: Path, fingerprint: str, n: int) -> Totals | None:
        import os

        from attnviz.core.untrusted import checkpoint_problem, open_regular

        if not os.path.lexists(path):
            return None
        f = open_regular(path, "checkpoint")
        try:
            with f, np.load(f) as z:
                if str(z["fingerprint"]) != fingerprint:
                    return None
                if any(k not in z.files for k in cls.FIELDS):  # before the per-item |Δ| sums were kept
                    raise AttnvizError(
                        f"{path}: a checkpoint of an older attnviz (it lacks the per-item |Δ| sums); delete it to "
                        "start over"
                    )
                t = cls(n)
                for k in cls.FIELDS:
                    setattr(t, k, z[k])
                for k in cls.SCALARS:
                    setattr(t, k, z[k].item())
        except AttnvizError:
            raise
        except Exception as e:  # truncated or not ours
            raise AttnvizError(
                f"{path}: unreadable checkpoint ({checkpoint_problem(e)}); delete it to start over"
            ) from None
        return t


def run_ablation(cfg: AblateCorpusConfig, on_batch: Callable[[int], None] | None = None) -> AblateCorpusResult:
    """Run ``cfg``; ``on_batch(items_done)`` after each folded batch (an exception there, e.g. KeyboardInterrupt,
    stops the run with its progress checkpointed)."""
    from attnviz.core.writes import command_scope
    from attnviz.corpus import output
    from attnviz.corpus.tables import RUN

    check_config(cfg)
    with command_scope():
        output.guard(
            Path(cfg.out),
            {"the model": cfg.model, "the --texts file": cfg.texts, "the --tokenizer file": cfg.tokenizer},
            (CHECKPOINT, RUN),
        )
        output.refuse_model_folder(Path(cfg.out), {"the model": cfg.model})
        with results_folder_on_failure(cfg.out, CHECKPOINT):  # a failed run leaves no folder it made for nothing
            return _run(cfg, on_batch)


def _run(cfg: AblateCorpusConfig, on_batch: Callable[[int], None] | None) -> AblateCorpusResult:
    import onnxruntime

    from attnviz import __version__
    from attnviz.corpus import cut as rules
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
    make_folder(out)
    ckpt = out / CHECKPOINT
    tot = Totals.load(ckpt, fingerprint, len(offs))
    if tot is None and ckpt.exists():
        from attnviz.corpus import resume_settings

        why = resume_settings.difference(ckpt, plan.settings, "model, data, heads, mode or batch size differ")
        raise AttnvizError(
            f"{ckpt} belongs to another run ({why}); to resume it, run with its settings; else use another --out "
            "or delete it"
        )
    tot = tot or Totals(len(offs))
    resumed = tot.items
    bar = _bar(cfg, plan.items, resumed, "ablate")  # type: ignore[arg-type]  # reads .progress only
    t0 = last_save = time.perf_counter()
    try:
        for part in ENGINES[cfg.engine](setup, specs[tot.next_batch :]):  # type: ignore[arg-type]
            tot.fold(part)  # type: ignore[arg-type]  # an AblateSetup's workers hand back AblatePartials
            bar.update(part.items)
            if tot.next_batch == 1 or time.perf_counter() - last_save > CHECKPOINT_EVERY_S:
                tot.save(ckpt, fingerprint, plan.settings)
                last_save = time.perf_counter()
            if on_batch is not None:
                on_batch(tot.items)
    except BaseException:
        bar.close()  # first: a save that fails below must not put its error line on the bar's line (run.py)
        if tot.next_batch > 0:
            tot.save(ckpt, fingerprint, plan.settings)  # interrupted: every folded batch is kept for the next run
        elif made and not any(out.iterdir()):
            out.rmdir()
        raise
    bar.close()
    run_s = time.perf_counter() - t0
    rows = _rows(tot, offs, sites, distribution, labels_kind is not None and distribution and tot.labelled > 0)
    sec = tot.seconds
    said, note = unknown_report(plan.unknown, tot.items)
    run = {
        "model": {"path": str(Path(cfg.model).resolve()), "sha256": model_sha},
        "model_kind": kind,
        "data": {"path": str(Path(cfg.texts).resolve()), "sha256": data_sha, "sha256_of": "items"},
        "tokenizer": str(Path(cfg.tokenizer).resolve()) if cfg.tokenizer else None,
        "label_column": cfg.label_column,
        "labels": labels_kind,
        "mode": cfg.mode,
        "output": output,
        "items": tot.items,
        "labelled_items": tot.labelled,
        "base_loss": tot.base_loss / tot.labelled if tot.labelled else None,
        "base_accuracy": tot.base_acc / tot.labelled if tot.labelled else None,
        **(
            {"max_tokens": cfg.max_tokens, "items_truncated": plan.cut, "truncation": rules.SINGLE}
            if cfg.max_tokens is not None
            else {}
        ),
        **said,  # texts the tokenizer mostly does not know (corpus/stream.py: as attnviz corpus says it)
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
    return AblateCorpusResult(rows, run, out, note)


# heads.parquet's columns after the head keys: means over the items (MEASURE_NOTES says how each is taken)
CORPUS_MEASURES = (
    ("ablation_kl", "float64"),
    ("ablation_delta_loss", "float64"),
    ("ablation_delta_acc", "float64"),
    ("ablation_mean_max_dlogit", "float64"),
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
    "ablation_mean_max_dlogit": "mean over items of each item's largest |base − ablated| of the output over its "
    "real positions (ranks the heads where there is no KL: one outlier item cannot decide it)",
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
                        "ablation_mean_max_dlogit": float(tot.dsum[a] / n),
                        "ablation_max_dlogit": float(tot.dmax[a]),
                        "prediction_changed": float(tot.changed[a] / n) if dist else None,
                        "ablated_together": together,
                        "items": tot.items,
                    }
                )
    return rows
