"""A corpus run's settings (plain Python: the command builds them, checks them and starts its workers before it
imports numpy and the run's modules: corpus/prestart.py)."""

from __future__ import annotations

from dataclasses import dataclass

from attnviz.core.steps_default import DEFAULT_GENERATE

CHECKPOINT = "checkpoint.npz"
# greedy tokens per item when --generate is not given: the window's steps for a translation (core/steps_default.py)
GENERATE_DEFAULT = DEFAULT_GENERATE


@dataclass(kw_only=True)
class EngineConfig:
    """How a corpus run's batches are run (``--engine``, ``--provider``, ``--workers``, ...): the same settings for
    ``attnviz corpus``, ``compare --texts`` and ``ablate --texts``, which inherit them.  Keyword-only, so that each
    command's own fields keep their positional order (``CorpusConfig(model, out, ...)``).  Moving fields here
    changes no checkpoint's identity: no fingerprint hashes a config whole or in field order, each lists the
    values it hashes by name (run.py, compare_run.py, ablate_plan.py), and none of these is one of them
    (tests/corpus/test_checkpoint_identity.py)."""

    engine: str = "local"
    provider: str = "auto"
    tokenizer: str | None = None
    workers: int | None = None
    threads: int | None = None
    ray_address: str | None = None
    progress: bool = True


def engine_flags(args) -> dict:
    """The :class:`EngineConfig` fields from a command's parsed flags (--engine ... --no-progress), as keywords."""
    return {
        "engine": args.engine,
        "provider": args.provider,
        "tokenizer": args.tokenizer,
        "workers": args.workers,
        "threads": args.threads,
        "ray_address": args.ray_address,
        "progress": not args.no_progress,
    }


@dataclass
class CorpusConfig(EngineConfig):
    model: str
    out: str
    texts: str | None = None
    images: str | None = None
    pair_column: str | None = None
    batch_size: int = 32
    max_items: int | None = None
    max_tokens: int | None = None  # --max-tokens: each item cut to N tokens (as `attnviz open --max-tokens`)
    k: int = 5
    # encoder-decoder without --text-pair-column: greedy tokens per item at most.  Always the effective value: the
    # checkpoint fingerprint hashes it, so a run keeps its identity whether or not the 32 was typed
    generate: int = GENERATE_DEFAULT
    # --generate was typed: refused where nothing is generated (a pair column, a model that is not an
    # encoder-decoder) rather than ignored; a separate flag, so that `generate` (and the fingerprint) stay as they were
    generate_given: bool = False
    gold_column: str | None = None  # each pair's gold word alignment (Pharaoh): AER per cross-attention head
    convention: str | None = (
        None  # decoder row = the token it predicts / reads; None: the model's declared, else predict
    )
    audio_dir: str | None = None  # a folder of recordings for a speech model (corpus/audio_items.py)
    gold_dir: str | None = None  # their reference word times, NAME.tsv or NAME.TextGrid per NAME.wav
    tier: str | None = None  # the TextGrid tier of the words


def heads_shown(text: str) -> int:
    """``--top K`` of compare and ablate: how many heads the summary prints, 0 or more.  A negative K printed none
    (compare) or all but the last |K| (ablate's slice), with exit 0."""
    import argparse

    from attnviz.core.numbers import whole

    try:
        k = whole(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of heads (e.g. 5)") from None
    if k < 0:
        raise argparse.ArgumentTypeError(f"{k}: give a number of heads ≥ 0 (0 prints none)")
    return k
