"""What ``attnviz corpus`` does before it imports the run: the checks that refuse bad settings, and the local
workers' start.

Plain Python (no numpy, no onnx): the command starts its workers (:func:`started`) before it imports numpy and the
run's modules (~0.1 s CPU of the driver's on a second command), so that their interpreters and imports run on the
core the driver leaves idle meanwhile; :func:`attnviz.corpus.run.run_corpus` takes them over (:func:`take`).  A
library caller's ``run_corpus`` starts them itself, as before."""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from attnviz import AttnvizError
from attnviz.core.untrusted import open_regular
from attnviz.core.writes import command_scope
from attnviz.corpus import outfiles
from attnviz.corpus.config import CHECKPOINT, CorpusConfig, EngineConfig
from attnviz.corpus.engines import ENGINES, WarmPool, WorkerSetup, choose_layout, default_threads, default_workers
from attnviz.corpus.outfiles import guard as guard_out


def check(cfg: CorpusConfig) -> None:
    """The settings a run refuses before it starts anything (each in one line)."""
    if sum(x is not None for x in (cfg.texts, cfg.images, cfg.audio_dir)) != 1:
        raise AttnvizError("give exactly one of --texts FILE, --images DIR or --audio-dir DIR")
    if cfg.gold_dir is not None and cfg.audio_dir is None:
        raise AttnvizError("--gold-dir holds reference word times of recordings; give them with --audio-dir DIR")
    if cfg.tier is not None and cfg.gold_dir is None:
        raise AttnvizError("--tier names the TextGrid tier of the references; give --gold-dir DIR too")
    for flag, folder in (("--audio-dir", cfg.audio_dir), ("--gold-dir", cfg.gold_dir)):
        if folder and Path(folder).is_dir() and Path(cfg.out).resolve().is_relative_to(Path(folder).resolve()):
            raise AttnvizError(f"--out {cfg.out} is inside {flag} {folder}; give a results folder outside the inputs")
    if cfg.batch_size < 1:
        raise AttnvizError("--batch-size must be 1 or more")
    if cfg.max_items is not None and cfg.max_items < 1:
        raise AttnvizError("--max-items must be 1 or more")
    if cfg.max_tokens is not None:
        check_max_tokens(cfg)
    check_engine(cfg, ENGINES)
    if not (Path(cfg.model).is_file() or Path(cfg.model).is_dir()):  # a folder: an optimum encoder-decoder export
        from attnviz.runtime.folder import hub_name_hint  # (numpy: only on this way out)

        raise AttnvizError(hub_name_hint(Path(cfg.model)) or f"model {cfg.model}: no such file or folder")
    out = Path(cfg.out)
    if out.exists() and not out.is_dir():
        raise AttnvizError(f"--out {out}: is a file; give a folder for the results")
    outfiles.refuse_foreign(out, "corpus")
    if cfg.gold_column and not cfg.pair_column:
        raise AttnvizError(
            f"--gold-column {cfg.gold_column} aligns sources with their targets: give the targets' column too "
            "(--text-pair-column C)"
        )
    if cfg.convention is not None and not cfg.gold_column:
        raise AttnvizError("--convention says how gold alignments read decoder rows; it needs --gold-column C")


def check_engine(cfg: EngineConfig, engines: Mapping[str, object]) -> None:
    """The engine settings every corpus run refuses before it starts, one line each: ``attnviz corpus``'s
    (:func:`check`), ``compare --texts``'s and ``ablate --texts``'s; ``engines``: the run's engine registry."""
    if cfg.workers is not None and cfg.workers < 1:
        raise AttnvizError("--workers must be 1 or more")
    if cfg.threads is not None and cfg.threads < 1:  # 0 read as "the default" (cfg.threads or ...) unsaid
        raise AttnvizError("--threads must be 1 or more (leave it out for cores / workers)")
    if cfg.engine not in engines:
        raise AttnvizError(f"unknown engine {cfg.engine!r}; use {' or '.join(engines)}")
    if cfg.ray_address and cfg.engine != "ray":
        raise AttnvizError("--ray-address needs --engine ray")
    if cfg.engine == "ray" and not importable("ray"):
        raise AttnvizError("--engine ray needs Ray: pip install 'ray[data]' (or use --engine local)")


def check_max_tokens(cfg: CorpusConfig) -> None:
    """``--max-tokens`` cuts text items (corpus/cut.py: single texts, sentence pairs, sources and targets), in the
    driver's plan and in Ray Data's tokenise step alike: where else it would be ignored, it is refused."""
    assert cfg.max_tokens is not None
    if cfg.max_tokens < 1:
        raise AttnvizError("--max-tokens must be 1 or more")
    if cfg.texts is None:
        raise AttnvizError("--max-tokens cuts text items; give --texts FILE, or leave --max-tokens out")
    if cfg.gold_column:
        raise AttnvizError(
            "--max-tokens would cut words that --gold-column's alignments name; leave one of them out "
            "(or shorten the pairs in the file)"
        )


def importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # a broken install (or an import hook refusing it)
        return False


def overlaps(cfg: CorpusConfig) -> bool:
    """Whether the run may overlap the model's probe with reading the corpus (``run._probe_while_reading``), as
    far as the configuration tells before the model is open."""
    return cfg.texts is not None and cfg.engine != "ray" and not cfg.gold_column  # Ray Data reads the corpus itself


def prestart(cfg: CorpusConfig) -> list[WarmPool]:
    """Start the local workers before the driver probes the model and plans, so that the two start-ups overlap.
    The device is guessed as the model will find it; a wrong guess only costs the early start (engines.local_engine
    starts a pool that fits)."""
    if cfg.engine != "local":
        return []
    from attnviz.runtime.device import before_session

    # (``auto`` with a GPU present: a GPU unless onnxruntime is a CPU-only build; what a worker kept of where it
    # landed is not read here, which would import numpy before the workers start)
    gpu = before_session(cfg.model, cfg.provider, kept=False) != "cpu"
    workers = cfg.workers or default_workers(cfg.provider, gpu, cfg.engine)
    threads = cfg.threads or default_threads(workers)
    setup = WorkerSetup(
        str(cfg.model), cfg.provider, cfg.tokenizer, threads, cfg.k, (), workers, layout=choose_layout(gpu)
    )
    # a text corpus will be probed in a worker (run._probe_while_reading) if the model is an encoder or a decoder, as
    # a file is (a folder is an encoder-decoder export): the probe goes first
    probe = overlaps(cfg) and Path(cfg.model).is_file()
    return [WarmPool.start(setup, min(workers, batches_at_least(cfg, workers)), probe=probe)]


def batches_at_least(cfg: CorpusConfig, enough: int) -> int:
    """How many batches the input gives, counted up to ``enough`` (reads a few kB: a tiny corpus should not
    start a process per core)."""
    want = enough * cfg.batch_size
    if cfg.max_items is not None:
        want = min(want, cfg.max_items)
    n = 0
    try:
        if cfg.audio_dir is not None:  # one batch a recording
            return max(1, sum(1 for _ in itertools.islice(Path(cfg.audio_dir).iterdir(), enough)))
        if cfg.images is not None:
            n = sum(1 for _ in itertools.islice(Path(cfg.images).iterdir(), want))
        elif Path(str(cfg.texts)).suffix.lower() in (".txt", ".jsonl", ".tsv", ".csv"):
            # a regular file only: open() of a FIFO named texts.txt waited for a writer for ever, and /dev/zero
            # is one endless line
            with open_regular(str(cfg.texts), "--texts") as f:
                # (a .tsv / .csv: its header and a quoted field's further lines count too, a batch more at most)
                n = sum(1 for line in itertools.islice(f, 4 * want) if line.strip())
        else:  # .parquet: its row count needs pyarrow (seconds to import); assume enough
            return enough
    except (OSError, AttnvizError):
        return 1  # the readers will say what is wrong
    return max(1, -(-min(n, want) // cfg.batch_size))


def guard(cfg: CorpusConfig) -> None:
    """Refuse an ``--out`` whose results would replace one of the run's inputs (:func:`outfiles.guard`)."""
    guard_out(
        Path(cfg.out),
        {
            "the model": cfg.model,
            "the --texts file": cfg.texts,
            "the --images folder": cfg.images,
            "the --audio-dir folder": cfg.audio_dir,
            "the --gold-dir folder": cfg.gold_dir,
            "the --tokenizer file": cfg.tokenizer,
        },
        (CHECKPOINT,),
    )
    # after the inputs' guard: a model file named like a result in --out is the graver case, said first
    outfiles.refuse_model_folder(Path(cfg.out), {"the model": cfg.model})


# pools started by :func:`started` for the run_corpus call on the same settings (the same object), not yet taken
_STARTED: list[tuple[CorpusConfig, list[WarmPool]]] = []


@contextmanager
def started(cfg: CorpusConfig) -> Iterator[None]:
    """The command's early start: ``cfg`` checked and its workers started (:func:`prestart`) before the caller
    imports the run, for ``run_corpus(cfg)`` inside to take (:func:`take`); stopped here where it did not (an
    import that failed).  Bad settings are refused before anything starts, as by ``run_corpus``, which checks
    them again."""
    check(cfg)
    if cfg.images is not None and Path(cfg.model).is_dir():
        # a VLM folder over images runs on its vision file, which the run finds first (corpus/vlm_folder.py) and
        # starts its workers on: nothing to start here
        yield
        return
    with command_scope():  # (the run declares its inputs again, in its own scope)
        guard(cfg)
    entry = (cfg, prestart(cfg))
    _STARTED.append(entry)
    try:
        yield
    finally:
        if any(e is entry for e in _STARTED):
            _STARTED[:] = [e for e in _STARTED if e is not entry]
            for w in entry[1]:
                w.close(kill=True)


def take(cfg: CorpusConfig) -> list[WarmPool] | None:
    """The pools :func:`started` started for ``cfg`` (the caller closes them now), or None where it did not."""
    for i, (c, pools) in enumerate(_STARTED):
        if c is cfg:
            del _STARTED[i]
            return pools
    return None
