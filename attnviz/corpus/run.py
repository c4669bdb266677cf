"""The corpus run: plan batches, let an engine reduce them, fold in order, checkpoint, write the results."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import platform
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import wait
from contextlib import suppress
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from attnviz import AttnvizError, __version__
from attnviz.core.attention import VISION_TOWER_KEY
from attnviz.core.interrupts import in_thread, result_of
from attnviz.core.leaving import leaves_at_once
from attnviz.core.notice import say
from attnviz.core.stats import sink_note
from attnviz.core.untrusted import regular_file
from attnviz.core.words import with_article
from attnviz.core.writes import command_scope, make_folder, results_folder_on_failure
from attnviz.corpus import items as it
from attnviz.corpus import output, resume_settings
from attnviz.corpus import prestart as starting
from attnviz.corpus.config import CHECKPOINT, GENERATE_DEFAULT, CorpusConfig  # noqa: F401 (run.CorpusConfig: callers')
from attnviz.corpus.cut import Read
from attnviz.corpus.engines import (
    ENGINES,
    LAYOUTS,
    WarmPool,
    WorkerSetup,
    default_threads,
    default_workers,
    layout_choice,
    offer,
    withdraw,
)
from attnviz.corpus.plan import (
    BatchSpec,
    Encoded,
    check_model,
    encode_items,
    has_mask,
    plan_images,
    plan_text,
)
from attnviz.corpus.reduce import EXAMPLE_RANKING, Accumulator, Partial, layout
from attnviz.corpus.roles import induction_scores
from attnviz.corpus.stream import MostlyUnknown, Stream, unknown_report
from attnviz.corpus.vlm_folder import vision_file

CHECKPOINT_EVERY_S = 2.0


@dataclass
class CorpusSummary:
    out: Path
    items: int
    batches: int
    resumed_items: int
    wall_s: float
    items_per_s: float
    note: str | None = None  # said once after the run (a corpus mostly of the unknown token)
    sink_note: str | None = None  # said once after the run (attention sinks: rows rescaled by the statistics)


def _check_generate(cfg: CorpusConfig, name: str, kind: str) -> None:
    """A typed --generate where nothing is generated is refused, not ignored (after the model's kind is known: an
    encoder's pair column is its sentence B, not targets)."""
    if not cfg.generate_given:
        return
    if kind != "encoder-decoder":
        raise AttnvizError(
            f"--generate {cfg.generate}: {name} is {with_article(kind)} model and generates nothing in a corpus run "
            "(only an encoder-decoder without targets does); drop --generate"
        )
    if cfg.pair_column:
        raise AttnvizError(
            f"--generate {cfg.generate} with --text-pair-column {cfg.pair_column}: the targets are teacher-forced, "
            "nothing is generated; drop --generate, or drop --text-pair-column to let the model generate"
        )


def _gpu_session(model) -> bool:
    try:
        return model.provider.startswith("CUDA")
    except Exception:
        return False


def run_corpus(cfg: CorpusConfig, on_batch: Callable[[int], None] | None = None) -> CorpusSummary:
    """Run ``cfg``; ``on_batch(items_done)`` is called after each folded batch (an exception there, e.g.
    KeyboardInterrupt, stops the run with its progress checkpointed)."""
    starting.check(cfg)
    model, note = vision_file(cfg.model, cfg.images)  # a VLM folder over images: its vision tower (vlm_folder.py)
    if note:
        say(note)
        cfg = replace(cfg, model=model)
    with command_scope():  # the inputs declared below end with the run: library callers run many in one process
        starting.guard(cfg)
        warm: list[WarmPool] = []  # local workers started early (starting.prestart); stopped however the run ends
        hashing: list[_ModelHash] = []  # the model's hash in a thread; given up on however the run ends
        try:
            with results_folder_on_failure(cfg.out, CHECKPOINT):  # a failed run leaves no folder it made for nothing
                return _run(cfg, on_batch, warm, hashing)
        finally:
            for w in warm:
                w.close(kill=True)  # idle after a finished run; after an error they may still be opening the model
            for h in hashing:
                h.stop()
            withdraw()


def _run(
    cfg: CorpusConfig, on_batch: Callable[[int], None] | None, warm: list[WarmPool], hashing: list[_ModelHash]
) -> CorpusSummary:
    t_start = time.perf_counter()
    # first: a worker's start-up (spawn, imports, session) is the longest; the command started them already, before
    # it imported this module (starting.started)
    started = starting.take(cfg)
    for w in started if started is not None else starting.prestart(cfg):
        warm.append(w)
        offer(w)  # local_engine takes it when it fits the setup planned below
    hashing.append(model_hash := _ModelHash(cfg.model))
    # a text corpus on the CPU (or on CUDA in one shared worker: engines.LAYOUTS) is probed in a worker
    # (_probe_while_reading); otherwise the driver's probe needs its isolation child, which loads onnxruntime
    # while the model is read
    by_worker = warm[0] if warm and warm[0].probes() and starting.overlaps(cfg) else None
    if by_worker is None:
        from attnviz.runtime.host import prestart

        prestart()
    model, summary = _open(cfg, by_worker is not None)
    if not model.sites:
        raise AttnvizError(f"{model.path.name}: {model.no_attention_reason}")
    # decoders are confirmed by a causal map; heads counted
    early = _probe_while_reading(cfg, model, model_hash, by_worker)
    from attnviz.runtime.waveform import on_raw_samples

    speech = "audio" in model.meta
    if speech and on_raw_samples(model.meta):
        raise AttnvizError(
            f"{model.path.name} is a speech encoder on raw samples (wav2vec2, HuBERT, WavLM); a corpus runs Whisper "
            "folders (--audio-dir: cross-attention word alignment) and text or image models: give a clip at a time "
            "to extract, figure or open with --audio FILE"
        )
    if speech != (cfg.audio_dir is not None):
        raise AttnvizError(
            f"{model.path.name} is a speech model; give its recordings with --audio-dir DIR"
            if speech
            else f"--audio-dir {cfg.audio_dir}: {model.path.name} takes no sound; give a speech (Whisper) folder"
        )
    kind = model.kind if speech else check_model(model)
    if kind == "vision" and cfg.images is None:
        raise AttnvizError(f"{model.path.name} takes images; give --images DIR")
    if kind != "vision" and cfg.texts is None and not speech:
        raise AttnvizError(f"{model.path.name} takes text; give --texts FILE")
    if not speech:
        _check_generate(cfg, model.path.name, kind)
    elif cfg.generate_given and cfg.gold_dir:
        raise AttnvizError(
            f"--generate {cfg.generate} with --gold-dir: the reference's words are teacher-forced, nothing is "
            "generated; drop --generate"
        )
    speech_sites = None
    if speech:  # its probe leaves a speech model's head counts unknown
        from attnviz.corpus.audio_items import sites_of

        speech_sites = sites_of(model)
    groups = layout(speech_sites or model.sites)
    sinks = [s.label for s in model.sites if s.sink]  # their rows are rescaled to 1 by every row statistic
    sink_sites = frozenset(g.site for g in groups if (speech_sites or model.sites)[g.site].sink)
    if not groups:
        raise AttnvizError(f"{model.path.name}: no self-attention sites to analyse")
    if cfg.gold_column and not (kind == "encoder-decoder" and any(g.kind == "cross" for g in groups)):
        raise AttnvizError(
            f"--gold-column scores cross-attention heads, and {model.path.name} has none ({with_article(kind)} model); "
            "give an encoder-decoder model"
        )
    nh = sum(g.heads for g in groups)

    gpu = _gpu_session(model) if early is None or early.provider is None else early.provider.startswith("CUDA")
    workers = cfg.workers or default_workers(cfg.provider, gpu, cfg.engine)
    model_sha = model_hash.result()
    if summary is not None:  # (once the hash is in: a summary is kept under the file's sha256)
        from attnviz.runtime import model_summary

        model_summary.keep(cfg.model, summary)
    # Ray Data reads text corpora and image folders itself; source/target pairs keep the driver's (resumable) plan,
    # and so does a VLM's vision file alone (its images go through the family's processor in the workers, not
    # through Ray Data's decoding and attnviz's own resize: corpus/tower.py)
    vision_tower = _tower_frames(cfg, model) is not None
    ray_reads = cfg.engine == "ray" and kind != "encoder-decoder" and not vision_tower
    source = (_ray_texts if cfg.texts is not None else _ray_images) if ray_reads else partial(_planned, early=early)
    out = Path(cfg.out)
    ckpt = out / CHECKPOINT
    stream = source(cfg, model, kind, nh, groups, workers, gpu, model_sha, ckpt, speech_sites)
    made = not out.exists()
    make_folder(out)  # after the input checks: bad input leaves no empty results folder
    del model  # workers hold their own sessions; the driver's is released before they start

    acc = Accumulator(nh, cfg.k)
    if stream.fingerprint is not None:
        loaded = Accumulator.load(ckpt, stream.fingerprint, nh, cfg.k)
        if loaded is None and ckpt.exists():
            why = resume_settings.difference(ckpt, stream.settings, "model, data, batch size or top-k differ")
            raise AttnvizError(
                f"{ckpt} belongs to another run ({why}); to resume it, run with its settings; else use another --out "
                "or delete it"
            )
        acc = loaded or acc
    resumed, resumed_tokens = acc.items, acc.tokens

    bar = _bar(cfg, stream.total, resumed)
    t0 = time.perf_counter()
    last_save = t0
    recordings = stream.items() if cfg.audio_dir is not None else {}
    versions: dict | None = None
    items: dict[int, it.Item] | None = None
    loading: threading.Thread | None = None
    try:
        for part in stream.partials(acc.next_batch):
            _write_words(out, part, recordings)  # before the fold: a resumed run writes the same bytes again
            acc.fold(part)
            bar.update(part.items)
            if loading is None:
                # pyarrow for the Parquet files (~0.1 s CPU), in a thread while the driver waits on its workers: the
                # last batches tend to come back together, and an import after them was on the command's tail
                loading = threading.Thread(target=_prepare_write_quietly, name="attnviz-pyarrow", daemon=True)
                loading.start()
            if versions is None and stream.batches is not None and stream.batches - acc.next_batch < stream.workers:
                # the last batches are running and a worker's core is idle: the tail's imports happen there
                # (pyarrow for the Parquet files) instead of after them, and so does the reading of the texts again
                # for the examples (checked against the planned corpus: a text corpus changed since still stops)
                versions = _versions(cfg.engine)
                output.prepare_write()
                items = stream.items()
            if stream.fingerprint is not None and (
                acc.next_batch == part.batches or time.perf_counter() - last_save > CHECKPOINT_EVERY_S
            ):  # first batch (or task of batches): resumable at once
                acc.save(ckpt, stream.fingerprint, stream.settings)
                last_save = time.perf_counter()
            if on_batch is not None:
                on_batch(acc.items)
    except BaseException as e:
        # the bar first: tqdm leaves the cursor after the bar, and a checkpoint that cannot be saved below (a full
        # disk) put "attnviz: error: ..." on the bar's line, the bar drawn again after it at exit
        bar.close()
        if loading is not None and not (isinstance(e, KeyboardInterrupt) and leaves_at_once()):
            # not left importing while the interpreter exits; a Ctrl-C of the command, which leaves through
            # os._exit (no teardown: core/leaving.py), does not wait on it (seconds under load)
            loading.join()
        if stream.fingerprint is not None and acc.next_batch > 0:
            acc.save(ckpt, stream.fingerprint, stream.settings)  # interrupted: keep every folded batch for the next run
        elif made and not any(out.iterdir()):  # stopped before its first batch (a model refused at its first run)
            out.rmdir()
        raise
    bar.close()
    if stream.resumed != (0, 0):  # a Ray Data run resumed from its kept partials (folded above with the new ones)
        resumed, resumed_tokens = stream.resumed
    run_s = time.perf_counter() - t0
    if items is None:
        items = stream.items()
    workers, threads = stream.workers, stream.threads

    induction = None
    if kind == "decoder":  # one small extra run on repeated random sequences (the same in every engine)
        from attnviz.runtime import open_model

        model = open_model(cfg.model, provider="cpu", tokenizer=cfg.tokenizer)
        model.probe()
        induction = induction_scores(model, groups)
        del model
    done = acc.items - resumed
    versions = versions or _versions(cfg.engine)
    wall_s = time.perf_counter() - t_start  # the whole command but the final writes
    run: dict[str, object] = {
        "model": str(Path(cfg.model).resolve()),
        "model_sha256": model_sha,
        "model_kind": kind,
        # how an encoder-decoder's decoder was fed: the targets (as `attnviz open --text-pair`), or its own greedy
        # output (as `attnviz open --generate N`)
        "decoder_input": _decoder_input(cfg, kind),
        "data": str(Path(str(cfg.texts or cfg.images or cfg.audio_dir)).resolve()),
        "data_sha256": stream.data_sha,
        "data_sha256_of": stream.data_sha_of,
        "tokenizer": str(Path(cfg.tokenizer).resolve()) if cfg.tokenizer else None,
        "engine": cfg.engine,
        "workers": workers,
        "threads_per_worker": threads,
        # local: a process per worker, or one process running `workers` batches at once (engines.LAYOUTS), and
        # what chose it (ATTNVIZ_CORPUS_LAYOUT, else the device); the model sessions that ran the batches and the
        # batches each ran at once (Ray: an actor and its session a worker, one batch at a time)
        **_placement(stream),
        "provider": cfg.provider,
        "gpu": gpu,
        "batch_size": cfg.batch_size,
        "batches": acc.next_batch,
        "items": acc.items,
        "tokens": acc.tokens,
        "top_k": cfg.k,
        "example_ranking": EXAMPLE_RANKING,  # top-k at each score's interesting end (core/score_direction.py)
        "resumed_from_items": resumed,
        "items_this_run": done,
        "items_per_s": done / run_s if run_s > 0 else None,
        "tokens_per_s": (acc.tokens - resumed_tokens) / run_s if run_s > 0 else None,
        "wall_s": wall_s,
        "reduce_s": run_s,
        "versions": versions,
    }
    if vision_tower:  # its heads are the vision tower's ("vision self"); "first" is each frame's first patch
        run[VISION_TOWER_KEY] = True
    if stream.cut is not None:  # --max-tokens: the items cut (their examples show what was read), and how
        run.update(stream.cut)
    unknown, note = unknown_report(stream.unknown, acc.items)  # texts the tokenizer mostly does not know
    run.update(unknown)
    rescaled = sink_note(sinks)
    if rescaled is not None:  # attention sinks: what the row statistics did with their rows
        run["sink_sites"], run["sink_note"] = sinks, rescaled
    if stream.gold is not None:
        run["gold"] = output.gold_summary(acc, groups, stream.gold)
    if stream.audio is not None:
        run["audio_gold"] = stream.audio(acc.audio)
    output.write(
        out,
        output.head_rows(acc, groups, induction, vision_tower),
        output.example_rows(acc, groups, items, vision_tower, sink_sites),
        run,
    )
    ckpt.unlink(missing_ok=True)
    rate = done / run_s if run_s > 0 else 0.0
    return CorpusSummary(out, acc.items, acc.next_batch, resumed, wall_s, rate, note, rescaled)


def _tower_frames(cfg: CorpusConfig, model):
    """A VLM's vision file opened alone (one file's model whose images are its family processor's frames:
    runtime/vlm_tower.py), else None.  Only an image corpus asks: its model was opened (onnx imported already)."""
    if cfg.images is None:
        return None
    from attnviz.runtime.model import AttentionModel

    return model.frames if isinstance(model, AttentionModel) else None


def _open(cfg: CorpusConfig, probed_by_worker: bool) -> tuple[Any, dict | None]:
    """The model, and what to keep of it for the next command (None: nothing).  Where a worker probes it (a text
    corpus on the CPU) and an earlier command kept what the driver reads of this very file, sidecars and code
    (runtime/model_summary.py), that instead: the driver then imports no onnx and parses nothing (~0.07 s CPU).
    Otherwise onnx is imported only now (through open_model, ~0.1 s): the workers spawned before start up
    meanwhile."""
    from attnviz.runtime import model_summary

    if probed_by_worker and Path(cfg.model).is_file():
        found = model_summary.kept(cfg.model, cfg.provider, cfg.tokenizer)
        if found is not None:
            return found, None
    from attnviz.runtime import open_model
    from attnviz.runtime.model import AttentionModel

    model = open_model(cfg.model, provider=cfg.provider, tokenizer=cfg.tokenizer)
    # taken before its probe (a summary describes the model as opened), kept once the model's hash is in; one file's
    # model only (a set of files is not named by one file's hash)
    one_file = isinstance(model, AttentionModel)
    return model, model_summary.describe(model) if probed_by_worker and one_file else None


def _prepare_write_quietly() -> None:
    """:func:`output.prepare_write` in a thread: a failing import is left for the write to report as itself."""
    try:
        output.prepare_write()
    except BaseException:
        pass


def _write_words(out: Path, part, recordings: dict[int, it.Item]) -> None:
    """``--audio-dir``: each recording's word times, ``out/words/NAME.words.tsv`` (as ``align-audio`` writes them)."""
    if not part.words:  # any other corpus: its batches bring no words (and the speech module is not loaded for it)
        return
    from attnviz.core.writes import atomic_write_bytes
    from attnviz.corpus.audio_items import WORDS

    for index, data in part.words.items():
        (out / WORDS).mkdir(exist_ok=True)
        atomic_write_bytes(out / WORDS / f"{Path(str(recordings[index].audio)).stem}.words.tsv", data, "--out")


def _decoder_input(cfg: CorpusConfig, kind: str) -> str | None:
    if cfg.audio_dir is not None:
        if cfg.gold_dir:
            return "teacher-forced on each recording's reference words (--gold-dir)"
        return f"greedy generation, up to {cfg.generate if cfg.generate_given else 'align-audio’s default'} tokens"
    if kind != "encoder-decoder":
        return None
    if cfg.pair_column:
        return f"teacher-forced on --text-pair-column {cfg.pair_column}"
    return f"greedy generation, up to {cfg.generate} tokens per item (stops at the end token)"


@dataclass
class _Tokenised:
    """A text corpus read and tokenised while the model's probe ran (:func:`_probe_while_reading`), as the kind
    ``kind`` reads it.  :meth:`take` hands the items over once (the driver keeps no items during the run)."""

    items: list[it.Item] | None
    enc: Encoded | None
    kind: str
    provider: str | None = None  # the probe's session's provider, where a worker probed (None: ask the model)

    def take(self) -> tuple[list[it.Item], Encoded]:
        items, enc = self.items, self.enc
        assert items is not None and enc is not None, "taken twice"
        self.items = self.enc = None
        return items, enc


class _ModelHash:
    """The model's sha256 (run.json, the checkpoint's identity) in a thread from the command's first moments, where
    the driver imports onnx and the workers spawn: file reads and hashlib release the GIL, and a core is idle then
    (a 90 MB model: ~0.06-0.2 s).  :meth:`result` waits for it where the hash was computed before, and raises its
    error there, so that every message comes where and as it came."""

    def __init__(self, path: str):
        self._stop = threading.Event()
        self._sha = in_thread(partial(it.sha256_model, path, self._stop), "attnviz-model-hash")

    def result(self) -> str:
        return result_of(self._sha)  # (a big model's hash takes seconds: a Ctrl-C meanwhile is raised at once)

    def stop(self) -> None:
        """The run is over (a result taken, or an error): a hash still running ends at its next MB."""
        self._stop.set()
        wait((self._sha,))


def _probe_while_reading(
    cfg: CorpusConfig, model, model_hash: _ModelHash, pool: WarmPool | None = None
) -> _Tokenised | None:
    """Probe ``model``.  For a text corpus of an encoder or a decoder (as its graph declares it), read and tokenise
    the corpus meanwhile (the model's hash comes from its thread, :class:`_ModelHash`): the probe waits on the isolation child building a session of the
    model (about 0.3 s of the driver's start-up, the longest part of it after the imports), or, given ``pool``
    (workers on the CPU started early), on the first of its workers that is warm, which has onnxruntime imported
    already: the isolation child is then never started (~0.3 s CPU).  A probe only ever turns such an encoder
    into a decoder (a causal map); :func:`_planned` then tokenises the items again."""
    kind = model.kind
    if (
        cfg.texts is None  # (as starting.overlaps says; here for the type checker)
        or not starting.overlaps(cfg)
        or "audio" in model.meta
        or kind not in ("encoder", "decoder")
        or not any(s.kind in ("self", "cross") for s in model.sites)
    ):
        model.probe()
        return None
    # the checks that follow the probe in _run, where they do not depend on it: a model that cannot be analysed is
    # reported before anything in the corpus file, as without the overlap
    check_model(model)
    _check_generate(cfg, model.path.name, kind)
    # the driver's own probe on a thread, waited for as a Future: a Ctrl-C that the kernel hands to that thread (or
    # another) is raised at once, where a join slept on until the probe was back (a CUDA session: seconds)
    job = pool.probe() if pool is not None else in_thread(model.probe, "attnviz-probe")
    try:
        model_hash.result()  # (hashed in its thread) here, so that an unreadable model is reported before the corpus
        items = it.read_texts(cfg.texts, cfg.pair_column, cfg.max_items)
        enc = encode_items(model, items, kind, cfg.max_tokens)
    except BaseException as e:
        # not left probing while the interpreter exits; a Ctrl-C of the command, which leaves through os._exit
        # (core/leaving.py), does not wait for it
        if pool is None and not (isinstance(e, KeyboardInterrupt) and leaves_at_once()):
            with suppress(Exception):  # (the probe's own failure is not this error's)
                result_of(job)
        raise
    if pool is None:
        result_of(job)
        return _Tokenised(items, enc, kind, None)
    return _Tokenised(items, enc, kind, _adopt_probe(model, job))


def _adopt_probe(model, job) -> str | None:
    """The worker's probe taken over by ``model``, and its session's provider.  A worker that died or failed
    (a model that crashes onnxruntime) leaves the probe to ``model`` itself, as without the pool, so that every
    outcome and message stays as it was."""
    try:
        state, provider = result_of(job)
    except Exception:
        state = provider = None
    if state is None or not model.adopt_probe(state):
        model.probe()
        return None
    return provider


def _planned(cfg, model, kind, nh, groups, workers, gpu, model_sha, ckpt, sites=None, early=None) -> Stream:
    """Read, tokenise and cut the batches here; an engine from ENGINES reduces them (local pool, or Ray over specs).
    ``early``: the corpus already read and tokenised (:func:`_probe_while_reading`)."""
    specs: list[BatchSpec]
    gold_info = None
    audio = None
    cuts: dict[int, Read] = {}  # --max-tokens: the items cut, with what the model read of each
    unknown = None  # texts: the items mostly of the unknown token
    sides = None  # --max-tokens over sources and targets: (sources cut, targets cut)
    if cfg.audio_dir is not None:
        items, specs, audio, gold_info = _audio_plan(cfg, model, sites)
    elif cfg.texts is not None and kind == "encoder-decoder":
        from attnviz.corpus import pairs  # (source/target pairs only: a text or image corpus never loads it)

        items = it.read_texts(cfg.texts, cfg.pair_column, cfg.max_items, cfg.gold_column)
        enc = pairs.encode_pairs(model, items, words=cfg.gold_column is not None, max_tokens=cfg.max_tokens)
        cuts, sides = enc.cuts, enc.sides_cut
        unknown = MostlyUnknown.of_texts(model, kind, enc)
        plan_gold = None
        if cfg.gold_column:
            plan_gold, gold_info = _gold_plan(cfg, model, items, enc)
        specs = [*pairs.plan_pairs(items, enc, cfg.batch_size, nh, cfg.generate, gold=plan_gold)]
        del enc
    elif cfg.texts is not None:
        if early is not None:
            items, tokens = early.take()
            if early.kind != kind:  # the probe found a decoder (causal maps): its items are tokenised as one
                tokens = encode_items(model, items, max_tokens=cfg.max_tokens)
        else:
            items = it.read_texts(cfg.texts, cfg.pair_column, cfg.max_items)
            tokens = encode_items(model, items, max_tokens=cfg.max_tokens)
        # without a mask input only a causal model may be padded (padding after a row is never seen)
        specs = plan_text(
            items,
            tokens,
            None,
            None,
            cfg.batch_size,
            equal_lengths=kind == "encoder" and not has_mask(model),
            heads=nh,
        )
        cuts = tokens.cuts
        unknown = MostlyUnknown.of_texts(model, kind, tokens)
        del tokens
    else:
        size = cfg.batch_size
        frames = _tower_frames(cfg, model)
        if frames is not None:  # a VLM's vision file alone: its processor's config is needed by every batch
            from attnviz.corpus.tower import images_per_batch

            size = images_per_batch(frames.require_family(raw=False), nh, size)
        items = it.read_images(cfg.images, cfg.max_items)
        specs = plan_images(items, size)
    threads = cfg.threads or default_threads(workers)  # as the pool started early (starting.prestart) has them
    workers = max(1, min(workers, len(specs)))
    if cfg.audio_dir is None:
        data_sha = it.sha256_items(items)
    else:
        from attnviz.corpus.audio_items import sha256_audio

        data_sha = sha256_audio(items)
    n_items = len(items)
    # the plan's identity: a checkpoint is only resumed by a run that would cut the very same batches
    plan_h = hashlib.sha256()
    for b in specs:
        plan_h.update(np.asarray(b.items, np.int64).tobytes() + b"|")
    fingerprint = hashlib.sha256(
        json.dumps(
            [
                model_sha,
                data_sha,
                cfg.batch_size,
                cfg.k,
                cfg.pair_column,
                nh,
                plan_h.hexdigest(),
                cfg.generate,
                EXAMPLE_RANKING,
                *([cfg.gold_column, gold_info] if gold_info else []),  # a run without gold keeps its old identity
                *([cfg.max_tokens] if cfg.max_tokens is not None else []),  # the tokens the batches hold
            ]
        ).encode()
    ).hexdigest()
    layout = layout_choice(gpu)
    setup = WorkerSetup(
        str(cfg.model),
        cfg.provider,
        cfg.tokenizer,
        threads,
        cfg.k,
        tuple(groups),
        workers,
        cfg.ray_address,
        gpu,
        kind,
        layout[0],
    )
    if cfg.texts is not None:  # the texts are read again for the examples: the driver keeps only the plan
        del items
        found = lambda: _as_read(_read_again(cfg, data_sha, specs), cuts)  # noqa: E731
    else:  # image items are paths, and reading them again would hash every image again
        by_index = {i.index: i for i in items}
        found = lambda: by_index  # noqa: E731
    return Stream(
        lambda start: ENGINES[cfg.engine](setup, specs[start:]),
        found,
        n_items,
        data_sha,
        "items",
        fingerprint,
        workers,
        threads,
        gold=gold_info if cfg.audio_dir is None else None,
        audio=audio,
        batches=len(specs),
        cut=None if cfg.max_tokens is None else _truncation(cfg, kind, len(cuts), sides),
        layout=layout if cfg.engine == "local" else None,  # (Ray places its actors itself)
        unknown=unknown,
        settings={  # what the fingerprint hashes, by name (the plan and the heads follow from these)
            "the model": model_sha,
            "the data": data_sha,
            "--batch-size": cfg.batch_size,
            "--top-k": cfg.k,
            "--text-pair-column": cfg.pair_column,
            "--generate": cfg.generate,
            "--gold-column": cfg.gold_column,
            "--max-tokens": cfg.max_tokens,
            "example ranking (the attnviz version)": EXAMPLE_RANKING,
        },
    )


def _audio_plan(cfg: CorpusConfig, model, sites):
    """``--audio-dir``: the recordings (each checked), one batch each, run.json's alignment summary, and what
    the checkpoint's identity adds (the references' tier, the tokens generated)."""
    from attnviz.corpus import audio_items as ai
    from attnviz.runtime.audio import FeatureSpec

    choice, _ = ai.chosen_heads(model, sites)  # a bad alignment_heads list stops the run here, in one line
    items = ai.read_audio_dir(str(cfg.audio_dir), cfg.gold_dir, cfg.max_items, cfg.tier)
    ai.check_recordings(items, FeatureSpec.from_dict(model.meta["audio"]))
    generate = cfg.generate if cfg.generate_given else None
    specs: list[BatchSpec] = [*ai.plan_audio(items, cfg.tier, generate)]
    return items, specs, lambda counts: ai.summary(counts, choice, len(items)), {"audio": [cfg.tier, generate]}


def _gold_plan(cfg: CorpusConfig, model, items: list[it.Item], enc) -> tuple[tuple, dict]:
    """(convention, each item's GoldPair) for the batches, and what run.json says of the gold."""
    from attnviz.core import metadata as md
    from attnviz.corpus import gold

    declared = md.alignment_heads(model.meta)
    convention = cfg.convention or (declared[1] if declared else "predict")
    found = gold.parse(items, enc.src_words, enc.dec_words, f"--gold-column {cfg.gold_column}:")
    info = {
        "column": cfg.gold_column,
        "convention": convention,
        "convention_from": "--convention"
        if cfg.convention
        else "the model's attnviz.alignment"
        if declared
        else "default",
        "skip_punctuation": gold.skips_punctuation(found),
        "words": "whitespace-separated (sentences encoded word by word, as attnviz align)",
    }
    return (convention, found), info


def _read_again(cfg: CorpusConfig, data_sha: str, specs: list) -> dict[int, it.Item]:
    """The items, read again after the run for the examples table (only their token ids were kept)."""
    specs.clear()  # the run is over: the plan's memory goes to the reading
    items = it.read_texts(str(cfg.texts), cfg.pair_column, cfg.max_items, cfg.gold_column)
    if it.sha256_items(items) != data_sha:
        raise AttnvizError(
            f"--texts {cfg.texts} changed during the run; run again on a file that stays as it is (a copy)"
        )
    return {i.index: i for i in items}


def _as_read(items: dict[int, it.Item], cuts: dict[int, Read]) -> dict[int, it.Item]:
    """``items`` with each one cut by --max-tokens holding what the model read of it (``cuts``)."""
    for k, read in cuts.items():
        items[k] = dataclasses.replace(
            items[k], text=read.text, pair=read.pair if read.pair is not None else items[k].pair
        )
    return items


def _truncation(cfg: CorpusConfig, kind: str, cut: int, sides: tuple[int, int] | None = None) -> dict:
    """run.json's account of --max-tokens: the limit, the items cut, and the rule (corpus/cut.py) in words."""
    from attnviz.corpus import cut as rules

    if kind == "encoder-decoder":
        rule = rules.SOURCE_TARGET if cfg.pair_column else rules.SOURCE_GENERATE
    else:
        rule = rules.PAIR if cfg.pair_column and kind != "decoder" else rules.SINGLE
    out = {"max_tokens": cfg.max_tokens, "items_truncated": cut, "truncation": rule}
    if sides is not None:  # (generated targets are never cut: --generate bounds them)
        out["sources_truncated"] = sides[0]
        if cfg.pair_column:
            out["targets_truncated"] = sides[1]
    return out


def _placement(stream: Stream) -> dict[str, object]:
    """run.json's account of where the batches ran: the layout the engine was given (:attr:`Stream.layout`), the
    sessions of its pool (at most: a pool starts a process as a task finds none idle) and the batches each runs at
    once."""
    workers = stream.workers
    if stream.layout is None:  # Ray: ActorPoolStrategy(size=workers), one session and one batch at a time each
        return {"worker_layout": None, "worker_layout_from": None, "sessions": workers, "batches_per_session": 1}
    name, chosen_by = stream.layout
    lay = LAYOUTS[name]
    return {
        "worker_layout": name,
        "worker_layout_from": chosen_by,
        "sessions": lay.processes(workers),
        "batches_per_session": lay.depth(workers),
    }


def _ray_texts(cfg, model, kind, nh, groups, workers, gpu, model_sha, ckpt, sites=None) -> Stream:
    """``--engine ray --texts``: Ray Data reads, tokenises, batches and writes the partials (not resumable)."""
    import pickle

    from attnviz.corpus import ray_engine

    if ckpt.exists():
        raise AttnvizError(
            f"{ckpt} is a local run's checkpoint; resume it with --engine local, or use another --out for Ray"
        )
    src, tgt = model.tokenizers
    tok = (tgt or src) if kind == "decoder" else src
    if tok is None:
        raise AttnvizError(
            f"no tokenizer for {model.path.name}: put tokenizer.json beside the model or pass --tokenizer FILE"
        )
    _check_texts(cfg)
    threads = cfg.threads or default_threads(workers)
    setup = WorkerSetup(
        str(cfg.model), cfg.provider, cfg.tokenizer, threads, cfg.k, tuple(groups), workers, cfg.ray_address, gpu
    )
    data_sha = it.sha256_file(str(cfg.texts))
    # partials kept by an interrupted Ray run are reused only by a run that would produce the same ones
    fingerprint = hashlib.sha256(
        json.dumps(
            [
                *(model_sha, data_sha, cfg.batch_size, cfg.k, cfg.pair_column, cfg.max_items, nh, EXAMPLE_RANKING),
                *([cfg.max_tokens] if cfg.max_tokens is not None else []),  # a run without it keeps its identity
            ]
        ).encode()
    ).hexdigest()
    job = ray_engine.TextJob(
        str(cfg.texts),
        cfg.pair_column,
        cfg.max_items,
        cfg.batch_size,
        kind == "encoder" and not has_mask(model),
        nh,
        kind == "decoder",
        pickle.dumps(tok),
        fingerprint,
        cfg.max_tokens,
    )

    def partials(start: int) -> Iterator[Partial]:
        parts, items, stream.resumed, cut, unknown = ray_engine.run_texts(setup, job, Path(cfg.out), cfg.progress)
        stream.items = lambda: items  # filled as the partials are folded (Ray runs read it after the fold)
        if cut is not None:
            stream.cut = _truncation(cfg, kind, cut)
        stream.unknown = MostlyUnknown.of(tok, unknown)
        return parts

    stream = Stream(partials, dict, None, data_sha, "file", None, workers, threads)
    return stream


def _ray_images(cfg, model, kind, nh, groups, workers, gpu, model_sha, ckpt, sites=None) -> Stream:
    from attnviz.corpus.ray_engine import images_stream

    threads = cfg.threads or default_threads(workers)
    setup = WorkerSetup(
        str(cfg.model), cfg.provider, cfg.tokenizer, threads, cfg.k, tuple(groups), workers, cfg.ray_address, gpu
    )
    return images_stream(cfg, workers, threads, setup, ckpt, model_sha)


def _check_texts(cfg: CorpusConfig) -> None:
    """The file-level checks of the local readers (Ray reports the rest)."""
    path = regular_file(str(cfg.texts), "--texts")  # a FIFO or a device is named as one, not "no such file"
    if path.suffix.lower() not in it.READERS:
        raise AttnvizError(f"--texts {path.name}: unknown format; use {it.FORMATS}")
    if cfg.pair_column and path.suffix.lower() == ".txt":
        raise AttnvizError(
            f"--text-pair-column {cfg.pair_column}: .txt files have no columns; use .jsonl, .parquet, .tsv or .csv"
        )


class _NoBar:
    """``--no-progress``: what the run calls on its bar, without importing tqdm (~0.03 s CPU)."""

    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _bar(cfg: CorpusConfig, total: int | None, initial: int, desc: str = "corpus"):
    """The progress bar, named by the command that shows it (``ablate`` runs through this one too)."""
    if not cfg.progress:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="item", desc=desc, dynamic_ncols=True)


def _versions(engine: str) -> dict:
    import numpy
    import pyarrow

    v = {
        "attnviz": __version__,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "onnxruntime": _onnxruntime_version(),
        "pyarrow": pyarrow.__version__,
    }
    if engine == "ray":
        import ray

        v["ray"] = ray.__version__
    return v


_VERSION_LINE = re.compile(r"""^__version__\s*=\s*(['"])([^'"\n]+)\1\s*$""", re.M)


def _onnxruntime_version() -> str:
    """``onnxruntime.__version__`` without importing onnxruntime where this process has not (the driver: its
    sessions live in the workers and the isolation child; the import is ~0.1 s CPU): the literal its
    ``__init__.py`` assigns, which is what the attribute holds (read from the package, not from a distribution's
    metadata: onnxruntime-gpu and the other builds install the same package under other names)."""

    mod = sys.modules.get("onnxruntime")
    if mod is not None:
        return str(mod.__version__)
    try:
        spec = importlib.util.find_spec("onnxruntime")
        found = _VERSION_LINE.search(Path(spec.origin).read_text("utf-8")) if spec and spec.origin else None
    except (ImportError, OSError, UnicodeDecodeError, ValueError):
        found = None
    if found is not None:
        return found.group(2)
    import onnxruntime

    return str(onnxruntime.__version__)
