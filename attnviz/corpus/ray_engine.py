"""``--engine ray``: Ray Data reads the corpus, tokenises, sorts by length, reduces and writes Parquet itself.

Imported only when asked for, so ``import attnviz.runtime`` never pays for Ray.  The pipeline for ``--texts``:

    read_json / read_parquet (.txt / .tsv / .csv: the local reader in a read task) -> drop blank items
    -> limit -> zip with range (item index)
    -> map_batches(tokenise; --max-tokens cuts each item there, by corpus/cut.py's rule, as the local plan does)
    -> sort(length, index) (one plain task up to SORT_IN_ONE_TASK items, else Ray Data's sort + repartition)
    -> map_batches(ReduceActor, one session per actor) -> write_parquet(partials)

The driver then folds the partials Parquet streamed: the fold keys of every batch first, then the batches' arrays
a row group at a time in fold order (``Pieces``), never the whole table.  A batch Ray hands an actor is cut
again by :func:`~attnviz.corpus.plan.plan_text` (the map budget; equal lengths for a mask-less encoder), so
each padded batch obeys the same rules as the local engine's.  Sums fold in (length, first item) order and
top-k ties go to the lower item index, so results equal the local engine's up to float64 summation order.

``--images`` (:func:`run_images`): ``read_binary_files`` lists and reads the folder's image files in Ray tasks
(the folder itself, not sub-folders, as the local reader), sorted by path and numbered (one plain task up to
SORT_IMAGES_IN_ONE_TASK bytes of images, else Ray Data's sort + repartition); each actor decodes its
batch with the local engine's own image loader, reduces it and reports each image's sha256, so run.json's data
hash equals the local engine's without the driver reading a single image.

Source/target pairs of an encoder-decoder keep the driver's plan (:func:`run_specs`): Ray Data ``from_items``
over the batch specs (resumable from the driver's checkpoint).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import pickle
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnviz import AttnvizError
from attnviz.core.untrusted import check_json, open_regular, parse_json, read_json
from attnviz.corpus.items import Item, text_lines
from attnviz.corpus.plan import BatchSpec, plan_text
from attnviz.corpus.reduce import Partial

PARTIALS = ".ray-partials"  # inside --out; removed once folded
DTYPES = {"sums": "<f8", "counts": "<i8", "top_value": "<f8", "top_item": "<i8", "top_row": "<i8", "top_col": "<i8"}
ARRAYS = tuple(DTYPES)
RESUME_BATCHES = 16  # padded batches per Ray block, hence per partial file: the unit a resumed run skips


@dataclass(frozen=True)
class TextJob:
    """What the Ray pipeline needs besides the worker setup (picklable: it travels to tasks and actors)."""

    path: str
    pair_column: str | None
    max_items: int | None
    batch_size: int
    equal_lengths: bool  # an encoder without a mask input: a padded batch holds one length only
    heads: int
    decoder: bool  # decoders see raw text, without [CLS]/[SEP] (as encode_items)
    tokenizer: bytes  # the driver's pickled tokenizer, so every task encodes exactly as the local engine
    fingerprint: str = ""  # the run's identity: partials left by an interrupted run are reused only under it
    max_tokens: int | None = None  # --max-tokens: each item cut in the tokenise step (corpus/cut.py), as the plan's


@dataclass(frozen=True)
class ImageJob:
    """``--images`` read by Ray Data: the folder, how many images at most, images per batch."""

    folder: str
    max_items: int | None
    batch_size: int
    fingerprint: str = ""


class PartialsStore:
    """``--out/.ray-partials``: the Parquet files the actors' partials are written to.

    Ray Data writes them as batches finish, so after a Ctrl-C the files already written hold finished batches.
    They are kept (with the run's fingerprint) and the next run with the same fingerprint drops their items from
    the pipeline and folds the old and new partials together: the resume of a Ray run.  Any other failure, and a
    finished run, remove the folder."""

    FINGERPRINT = "fingerprint.json"

    def __init__(self, folder: Path, fingerprint: str):
        self.folder = folder
        self.fingerprint = fingerprint

    def start(self) -> tuple[list[int], int, int]:
        """(item ids already reduced, their count, their tokens); creates the folder for a fresh run."""
        import pyarrow.parquet as pq

        meta = self.folder / self.FINGERPRINT
        if self.folder.exists():
            if not meta.is_file() or read_json(meta, "Ray partials' record").get("fingerprint") != self.fingerprint:
                raise AttnvizError(
                    f"{self.folder} holds another Ray run's partial results (model, data or settings differ); "
                    "use another --out or delete it"
                )
            done: list[int] = []
            tokens = 0
            for f in sorted(self.folder.glob("*.parquet")):
                try:
                    t = pq.read_table(f, columns=["ids", "tokens"])
                except Exception:  # a file cut short by the interrupt: its batches run again
                    f.unlink()
                    continue
                for ids in t.column("ids").to_pylist():
                    done += ids
                tokens += int(sum(t.column("tokens").to_pylist()))
            return done, len(done), tokens
        from attnviz.core.writes import atomic_write_json, make_folder

        make_folder(self.folder)

        atomic_write_json(meta, {"fingerprint": self.fingerprint}, "--out")
        return [], 0, 0

    def files(self) -> list[Path]:
        return sorted(self.folder.glob("*.parquet"))

    def drop(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _drop_done(batch, done: list[int]):
    """Leave out the items an interrupted run already reduced."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return batch.filter(pc.invert(pc.is_in(batch.column("id"), value_set=pa.array(done, pa.int64()))))


def _ray():
    try:
        import ray
        import ray.data
    except ImportError:
        raise AttnvizError("--engine ray needs Ray: pip install 'ray[data]' (or use --engine local)") from None
    return ray


def _quiet_token_notice(record: logging.LogRecord) -> bool:
    """Ray 2.5x+ announces on stderr, as it starts a local cluster, that token authentication is on and how to turn
    it off ("Set RAY_AUTH_MODE=disabled to opt out"): a line of engine text beside attnviz's own on every run, and
    advice a user of attnviz has no reason to take.  That notice alone is dropped; Ray's other warnings pass."""
    return record.funcName != "_warn_token_auth_enabled"


def quiet_notices() -> None:
    """Drop Ray's token notice (:func:`_quiet_token_notice`) and route the raylet's messages (:func:`_routed`)
    from here on; idempotent."""
    notices = logging.getLogger("ray._private.authentication.authentication_token_setup")
    if _quiet_token_notice not in notices.filters:
        notices.addFilter(_quiet_token_notice)
    try:
        from ray._private import worker  # (Ray's private: left alone where it is not there)
    except ImportError:
        return
    shown = getattr(worker, "print_to_stdstream", None)
    if callable(shown) and not getattr(shown, "routed_by_attnviz", False):
        worker.print_to_stdstream = _routed(shown)


RAYLET_LOG = logging.getLogger("attnviz.ray.raylet")


def _routed(shown):
    """Ray's driver prints the raylet's error messages on stdout from a thread of its own, whatever log_to_driver
    says: ``(raylet) A worker died or was killed while executing a task by an unexpected system error ...`` (six
    lines' worth) beside attnviz's own line when an actor dies.  attnviz's line says it (:func:`_ray_error`) and
    Ray's logs keep the raylet's account; the driver's copy goes to the ``attnviz.ray.raylet`` logger (debug).
    Every other stream (a worker's output, were log_to_driver on) is printed by Ray as before."""

    def print_to_stdstream(data, ignore_prefix, *args, **kwargs):
        if isinstance(data, dict) and data.get("pid") == "raylet":
            for line in data.get("lines", ()):
                RAYLET_LOG.debug("%s", line)
            return None
        return shown(data, ignore_prefix, *args, **kwargs)

    print_to_stdstream.routed_by_attnviz = True
    return print_to_stdstream


SIGNAL_CHECK_ENV = "RAY_get_check_signal_interval_milliseconds"
SIGNAL_CHECK_MS = 50  # as core.interrupts.result_of's slices


def _init(setup):
    """Ray, connected (a local cluster started, or the one at --ray-address); returns the module."""
    ray = _ray()
    if ray.is_initialized():
        return ray
    from attnviz.core.interrupts import sigterm_kept

    quiet_notices()
    # the driver's ray.get runs Python's signal handlers only between waits of this length (Ray's default: 1 s), so
    # a Ctrl-C waited up to a second before the run began to stop; read from the environment as the driver's core
    # worker starts (a value the user set is kept)
    os.environ.setdefault(SIGNAL_CHECK_ENV, str(SIGNAL_CHECK_MS))
    kw: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        with sigterm_kept():  # `kill PID` stops a Ray run as Ctrl-C does, not by Ray's driver handler (exit 15)
            _start(ray, setup, kw)
    except AttnvizError:
        raise
    except Exception as e:  # Ray's own failure to start or connect: its text is long and internal
        where = f"the cluster at --ray-address {setup.ray_address}" if setup.ray_address else "a local Ray cluster"
        raise AttnvizError(
            f"Ray could not start: {where} failed ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}); "
            + (
                "check the address (ray status on the head node) or drop --ray-address to start Ray locally"
                if setup.ray_address
                else "check 'ray start --head' works on this machine, or use --engine local"
            )
        ) from None
    return ray


def _start(ray, setup, kw: dict[str, Any]) -> None:
    if setup.ray_address:
        _reachable(setup.ray_address)  # Ray itself retries an unreachable address for minutes
        ray.init(address=setup.ray_address, **kw)
    else:  # a local cluster sized to the workers asked for (Ray would otherwise take every core)
        start_local(num_cpus=setup.workers * setup.threads, num_gpus=1 if setup.gpu else 0)
        atexit.register(_stop_monitor)  # runs before Ray's own shutdown at exit (registered at its import)


# The head processes a local ``ray.init`` starts that a run of attnviz on its own cluster never uses, and that
# ``ray.init`` has no switch for (Ray's Node methods that start them; bench/ray_init_knobs.py, RESULTS session 24):
# - the dashboard's API server, started even with include_dashboard=False (its usage-stats module alone): ray.init
#   waits for it to come up, ~3 s of a 7-8 s start on 2 busy cores;
# - the autoscaler monitor: one machine has nothing to scale, and at exit it alone took 1 s of Ray's shutdown;
# - the log monitor: it tails the workers' logs to print them in the driver, which log_to_driver=False turns off.
# The raylet, GCS, the workers and the per-node agents start as before; so does everything with --ray-address.
SKIPPED_HEAD_PROCESSES = ("start_api_server", "start_monitor", "start_log_monitor")


def start_local(num_cpus: int, num_gpus: int = 0) -> None:
    """``ray.init`` of a local cluster for attnviz alone: no dashboard, no worker output in the driver, Ray's
    logging left as it is, and without :data:`SKIPPED_HEAD_PROCESSES` (those of Ray's Node methods that exist are
    replaced by no-ops for the start, and put back after it: a Ray without them starts them all, as before)."""
    import ray

    node: Any = None
    try:
        from ray._private.node import Node  # (Ray's private: each name is looked up, and left alone where absent)

        node = Node
    except ImportError:
        pass
    quiet_notices()
    methods = vars(node) if node is not None else {}
    saved = {n: methods[n] for n in SKIPPED_HEAD_PROCESSES if callable(methods.get(n))}
    for n in saved:
        setattr(node, n, _not_started)
    try:
        ray.init(
            num_cpus=num_cpus,
            num_gpus=num_gpus,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    finally:
        for n, f in saved.items():
            setattr(node, n, f)


def _not_started(self, *args, **kwargs) -> None:
    """(Stands in for a Node method of :data:`SKIPPED_HEAD_PROCESSES` while attnviz's local cluster starts.)"""


def _stop_monitor() -> None:
    """Kill the local cluster's autoscaler monitor before Ray's shutdown at exit: Ray stops its processes one at a
    time, each given a second to leave after SIGTERM, and the monitor alone never leaves in it (1.0 of Ray's 1.2 s
    shutdown, bench/RESULTS.md session 23 ray23).  A one-machine cluster that attnviz started has nothing to scale;
    Ray's shutdown then finds the monitor gone and stops the rest as before (no process is left).  Ray's private
    node record: where it is not there (another Ray), Ray's shutdown does it all, as before.  (Since session 24
    :func:`start_local` starts no monitor at all; this stays for a Ray whose Node has no ``start_monitor``.)"""
    try:
        from ray._private import ray_constants, worker

        node = getattr(worker, "_global_node", None)  # (Ray's, absent from another Ray version)
        for info in node.all_processes.get(ray_constants.PROCESS_TYPE_MONITOR, []) if node else []:
            info.process.kill()
            info.process.wait(timeout=5)
    except Exception:  # (a Ray without that record: its own shutdown stops the monitor)
        pass


RAY_CONNECT_S = 5.0  # how long the address gets to answer before the run is refused


def _reachable(address: str) -> None:
    """Refuse an address nothing answers at, in one line and in seconds (``host:port`` and ``ray://host:port``;
    ``auto`` and ``local`` are Ray's to resolve)."""
    import socket

    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=RAY_CONNECT_S).close()
    except (OSError, ValueError, OverflowError) as e:
        why = e.strerror or str(e) if isinstance(e, OSError) else str(e)
        raise AttnvizError(
            f"Ray: nothing answers at --ray-address {address} ({why or 'no answer'}); start the cluster there "
            "(ray start --head) and give its address, or drop --ray-address to start Ray locally"
        ) from None


def _context(progress: bool) -> None:
    import ray.data

    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True  # zip pairs rows by position; partials come back in order
    ctx.enable_progress_bars = progress  # Ray's bars (rows/s per stage) stand in for attnviz's own here
    ctx.print_on_execution_start = False
    # the sort above SORT_IN_ONE_TASK items: Ray Data's classic pull-based shuffle, not the actor-based one newer Ray
    # (2.4x+: SHUFFLE_V2) defaults to.  Behind SHUFFLE_V2's sort, the strict repartition cut blocks of 27, 21, 32, 6
    # rows instead of 32, 32, 22 once the sort got several input blocks (as any large corpus's read gives), so the
    # actors cut other batches than the local engine's; its aggregator actors also cost 5-10 s of start-up a sort
    # (100 rows: 0.13 s pulled).  Older Ray has no ShuffleStrategy: its only sort is the pull-based one.
    strategy = getattr(getattr(ray.data.context, "ShuffleStrategy", None), "SORT_SHUFFLE_PULL_BASED", None)
    if strategy is not None:
        ctx.shuffle_strategy = strategy
    # Ray Data logs a failed task's stack before re-raising it; attnviz turns it into one line (run_texts)
    logging.getLogger("ray.data").setLevel(logging.CRITICAL)
    # Ray Data's advice when --workers exceeds the corpus's blocks (a small corpus: the extra actors idle), a
    # UserWarning on stderr naming its own settings (``override_num_blocks``) that a user of attnviz cannot set
    import warnings

    warnings.filterwarnings("ignore", message="The minimum number of concurrent actors", category=UserWarning)


# -- stage functions (run in Ray tasks / actors) ---------------------------------------------------------------


def _keep_texts(batch, pair_column: str | None, name: str):
    """Drop rows without a non-blank ``text`` string (the local readers skip the same rows)."""
    import pyarrow as pa

    for c in ("text", pair_column):
        if c and c not in batch.column_names:
            raise AttnvizError(
                f'--texts {name}: no {c!r} field in the records; write one object per line like {{"text": "..."}}'
            )
    texts = batch.column("text").to_pylist()
    keep = [isinstance(t, str) and bool(t.strip()) for t in texts]
    out = {"text": pa.array([t for t, k in zip(texts, keep) if k], pa.string())}
    if pair_column:
        pairs = batch.column(pair_column).to_pylist()
        if any(k and not isinstance(p, str) for p, k in zip(pairs, keep)):
            raise AttnvizError(f"--texts {name}: a record has no {pair_column!r} string for --text-pair-column")
        out["pair"] = pa.array([p for p, k in zip(pairs, keep) if k], pa.string())
    else:
        out["pair"] = pa.nulls(sum(keep), pa.string())
    if "where" in batch.column_names:  # (a .tsv / .csv's: the line each item starts on, for an item's refusal)
        out["where"] = pa.array([w for w, k in zip(batch.column("where").to_pylist(), keep) if k], pa.string())
    return pa.table(out)


def _tokenise(batch, tokenizer: bytes, decoder: bool, max_tokens: int | None = None):
    """Each item's tokens (as encode_items), cut by ``max_tokens`` as the local plan cuts them (corpus/cut.py):
    an item cut then carries what the model read of it as its text (and pair), and ``cut`` says so."""
    import pyarrow as pa

    from attnviz.corpus.cut import cut
    from attnviz.corpus.items import item_error
    from attnviz.runtime.inputs import tokens_kept
    from attnviz.runtime.unknown_tokens import mostly_unknown

    tok = pickle.loads(tokenizer)
    unk = getattr(tok, "unk_id", None)  # counted where named: the items mostly of it (runtime/unknown_tokens.py)
    ids, types, special, unknown = [], [], [], []
    texts, pairs = batch.column("text").to_pylist(), batch.column("pair").to_pylist()
    wheres = batch.column("where").to_pylist() if "where" in batch.column_names else [None] * len(texts)
    was_cut = []
    for n, (index, text, pair) in enumerate(zip(batch.column("id").to_pylist(), texts, pairs)):
        try:
            with tokens_kept(max_tokens):  # the tokens cap counts what is kept (runtime/inputs.py)
                enc = tok.encode(text, None, add_special=False) if decoder else tok.encode(text, pair)
        except AttnvizError as e:  # as the local plan's: the line names the item (and its line, where known)
            raise item_error(Item(int(index), text=text, pair=pair, where=wheres[n]), e) from None
        row = [list(enc.ids), list(enc.type_ids or [0] * len(enc.ids)), [bool(s) for s in enc.special]]
        was_cut.append(max_tokens is not None and len(row[0]) > max_tokens)
        if max_tokens is not None and was_cut[-1]:
            try:
                with tokens_kept(max_tokens):
                    keep, read = cut(tok, text, None if decoder else pair, np.array(row[2], bool), max_tokens)
            except AttnvizError as e:
                raise item_error(Item(int(index), text=text, pair=pair, where=wheres[n]), e) from None
            row = [[x for x, k in zip(v, keep) if k] for v in row]
            texts[n], pairs[n] = read.text, pairs[n] if read.pair is None else read.pair
        if unk is not None:  # on what the model reads, as the local plan counts (corpus/plan.py)
            unknown.append(bool(row[0]) and mostly_unknown(unk, row[0], row[2]))
        if row[0]:
            ids.append(row[0])
            types.append(row[1])
            special.append(row[2])
        else:  # as encode_items: one pad-id token keeps shapes valid
            ids.append([0])
            types.append([0])
            special.append([True])
    new = {
        "ids": pa.array(ids, pa.list_(pa.int32())),
        "types": pa.array(types, pa.list_(pa.int8())),
        "special": pa.array(special, pa.list_(pa.bool_())),
        "length": pa.array([len(x) for x in ids], pa.int32()),
    }
    if max_tokens is not None:  # the examples show what the model read; the driver counts the items cut
        batch = batch.set_column(batch.schema.get_field_index("text"), "text", pa.array(texts, pa.string()))
        batch = batch.set_column(batch.schema.get_field_index("pair"), "pair", pa.array(pairs, pa.string()))
        new["cut"] = pa.array(was_cut, pa.bool_())
    if unk is not None:
        new["unknown"] = pa.array(unknown, pa.bool_())
    for name, col in new.items():
        batch = batch.append_column(name, col)
    return batch


def partial_row(
    p: Partial, first_length: int, first_item: int, texts: dict[int, tuple[str, str | None]], ids: list[int]
) -> dict:
    """One Parquet row per padded batch: the sums and top-k candidates as raw little-endian arrays."""
    return {
        "first_length": first_length,
        "first_item": first_item,
        "ids": [int(i) for i in ids],  # every item of the batch (a resumed run leaves them out)
        "items": p.items,
        "tokens": p.tokens,
        "heads": p.sums.shape[0],
        "kb": p.top_value.shape[-1],
        **{a: np.ascontiguousarray(getattr(p, a), DTYPES[a]).tobytes() for a in ARRAYS},
        "texts": json.dumps({str(i): t for i, t in texts.items()}),  # the items its top-k names (examples.parquet)
    }


def partial_from_row(row: dict, batch_id: int) -> Partial:
    nh, kb = int(row["heads"]), int(row["kb"])
    s = len(row["sums"]) // (8 * nh)
    shapes = {"sums": (nh, s), "counts": (nh, s)}
    arrays = {a: np.frombuffer(row[a], DTYPES[a]).reshape(shapes.get(a, (s, nh, kb))) for a in ARRAYS}
    a = {k: v.copy() for k, v in arrays.items()}
    return Partial(
        batch_id,
        int(row["items"]),
        int(row["tokens"]),
        a["sums"],
        a["counts"],
        a["top_value"],
        a["top_item"],
        a["top_row"],
        a["top_col"],
    )


class ReduceActor:
    """Ray Data callable class: opens the model once per actor, then pads and reduces each batch Ray hands it."""

    def __init__(self, setup_blob: bytes, job_blob: bytes | None = None):
        os.environ["ATTNVIZ_INPROCESS"] = "1"  # the actor is the crash boundary (Ray reports its death)
        self.reducer = pickle.loads(setup_blob).reducer()
        self.job: TextJob | ImageJob | None = pickle.loads(job_blob) if job_blob else None

    def __call__(self, batch):
        import pyarrow as pa

        if self.job is None:  # driver-planned specs (encoder-decoder pairs)
            out = [pickle.dumps(self.reducer(pickle.loads(b))) for b in batch["spec"]]
            return {"batch_id": batch["batch_id"], "partial": np.array(out, dtype=object)}
        if isinstance(self.job, ImageJob):
            return pa.Table.from_pylist([self._images(batch)])
        cols = {c: batch.column(c).to_pylist() for c in ("id", "text", "pair", "ids", "types", "special")}
        items = [Item(i, text=t, pair=p) for i, t, p in zip(cols["id"], cols["text"], cols["pair"])]
        specs = plan_text(
            items,
            cols["ids"],
            cols["types"],
            cols["special"],
            self.job.batch_size,
            self.job.equal_lengths,
            heads=self.job.heads,
        )
        by_id = {it.index: (it.text or "", it.pair) for it in items}
        cut = dict(zip(cols["id"], batch.column("cut").to_pylist())) if self.job.max_tokens is not None else None
        unknown = (
            dict(zip(cols["id"], batch.column("unknown").to_pylist())) if "unknown" in batch.column_names else None
        )
        rows = []
        for spec in specs:
            p = self.reducer(spec)
            named = {int(i) for i in np.unique(p.top_item) if int(i) in by_id}
            assert spec.lengths is not None  # text specs always carry lengths
            rows.append(partial_row(p, int(spec.lengths[0]), spec.items[0], {i: by_id[i] for i in named}, spec.items))
            if cut is not None:  # --max-tokens: the batch's items cut (a column only then: older partials lack it)
                rows[-1]["cut"] = sum(bool(cut[i]) for i in spec.items)
            if unknown is not None:  # the items mostly of the unknown token (a column only where it is named)
                rows[-1]["unknown"] = sum(bool(unknown[i]) for i in spec.items)
        return pa.Table.from_pylist(rows)

    def _images(self, batch) -> dict:
        """Decode the batch's image bytes with the local engine's loader (through a private temporary folder,
        since the loader takes a path), reduce, and report each image's name and sha256."""
        import hashlib
        import tempfile

        ids = batch.column("id").to_pylist()
        paths = batch.column("path").to_pylist()
        blobs = batch.column("bytes").to_pylist()
        with tempfile.TemporaryDirectory(prefix="attnviz-ray-") as tmp:
            local = []
            for n, (path, blob) in enumerate(zip(paths, blobs)):
                f = Path(tmp) / f"{n}{Path(path).suffix}"
                f.write_bytes(blob)
                local.append(str(f))
            p = self.reducer(BatchSpec(-1, [int(i) for i in ids], images=local))
        named = {int(i) for i in np.unique(p.top_item)}
        row = partial_row(p, 0, int(ids[0]), {}, ids)
        row["texts"] = json.dumps({str(i): [path, None] for i, path in zip(ids, paths) if int(i) in named})
        row["digests"] = json.dumps(
            [[int(i), Path(path).name, hashlib.sha256(blob).hexdigest()] for i, path, blob in zip(ids, paths, blobs)]
        )
        return row


def _check_lines(path: Path) -> None:
    """Ray Data reads a ``.jsonl`` itself, past the local reader's checks: each line passes them here first,
    streamed, in one pass: UTF-8 text without a lone CR (corpus.items.decode_texts: Ray's decoder stopped at a
    Latin-1 byte with its own traceback text) and the JSON guard (nesting, 1,000-digit numbers)."""
    for n, line in text_lines(path):
        check_json(line, f"{path.name} line {n}", fix='write one object per line like {"text": "..."}')


def _check_parquet(path: Path, pair_column: str | None) -> None:
    """The columns Ray Data will read hold strings (its footer's schema only; corpus.items.check_string_columns)."""
    import pyarrow.parquet as pq

    from attnviz.corpus.items import check_string_columns

    try:
        with open_regular(path, "--texts") as f:
            schema = pq.read_schema(f)
    except AttnvizError:
        raise
    except Exception:  # not Parquet: Ray Data's reader names that (run_texts)
        return
    check_string_columns(schema, ["text", *([pair_column] if pair_column else [])], path)


def _check_rows(path: Path, pair_column: str | None) -> None:
    """A .txt / .tsv / .csv's header and first item pass the local reader's checks here, before Ray starts: a file
    without the columns asked for (the usual slip) is refused in the local engine's line before Ray's seconds of
    start-up.  The rest is checked once, by the same reader in the read task (:func:`_lines_source`), whose refusal
    of a later row is the same one line (run_texts: _ray_error); session 20 parsed the whole file here first, a
    second full parse of every good corpus (bench/RESULTS.md, session 21 tidy21)."""
    with open_regular(path, "--texts") as f:
        next(iter(_rows_of(f, path, pair_column)), None)


def _rows_of(f, path: Path, pair_column: str | None):
    """The local reader's items of the .txt / .tsv / .csv file open as ``f`` (corpus/items.py)."""
    from attnviz.corpus.items import Columns, delimited_rows, txt_rows

    reader = txt_rows if path.suffix.lower() == ".txt" else delimited_rows
    return reader(f, path, Columns(pair_column))


def _lines_source(path: str, pair_column: str | None, block_chars: int | None = None):
    """A Ray Data datasource reading a .txt / .tsv / .csv in its read task with the local reader itself
    (corpus.items.txt_rows / delimited_rows): Ray Data's own CSV reader (pyarrow's) differs from Python's ``csv`` in
    quoting, blank lines and its errors, and its ``read_text`` splits lines where ``str.splitlines`` does (NEL,
    U+2028), so both engines read the very same items, each with its line.  One task a file (a quoted field may
    span lines, so the file cannot be cut at a byte offset), yielding ``text`` (+ the pair column) and ``where`` a
    block at a time: a block of Ray Data's target size (``block_chars`` characters of fields, default its
    ``target_max_block_size``), so a corpus up to that size is one block, as ``from_arrow`` of the whole file
    was: the same sorted blocks and batches as then, hence the local engine's result bytes."""
    from ray.data import DataContext
    from ray.data.datasource import FileBasedDatasource

    block: int = block_chars or DataContext.get_current().target_max_block_size or 128 * 2**20

    class LinesDatasource(FileBasedDatasource):
        def _read_stream(self, f, path: str):
            import pyarrow as pa

            rows, size = [], 0
            for row in _rows_of(f, Path(path), pair_column):
                rows.append(row)
                size += len(row[0]) + len(row[1][0] or "") + len(row[2])
                if size >= block:
                    yield _delimited_block(rows, pair_column, pa)
                    rows, size = [], 0
            if rows:
                yield _delimited_block(rows, pair_column, pa)

    return LinesDatasource(path)


def _delimited_block(rows, pair_column: str | None, pa):
    table = {"text": pa.array([t for t, _, _ in rows], pa.string())}
    if pair_column:
        table[pair_column] = pa.array([p for _, (p, _), _ in rows], pa.string())
    table["where"] = pa.array([w for _, _, w in rows], pa.string())
    return pa.table(table)


def _read(job: TextJob):
    """Ray Data reads the file itself, in its read tasks; every reader yields ``text`` (+ the pair column)."""
    import ray.data

    path = str(Path(job.path).resolve())
    cols = ["text", job.pair_column] if job.pair_column else ["text"]
    # one read task (one file), its blocks as it yields them: not split further for parallelism (the sort after
    # would then cut other batches than the local engine's)
    lines = lambda: ray.data.read_datasource(_lines_source(path, job.pair_column), override_num_blocks=1)  # noqa: E731
    readers = {
        ".txt": lines,
        ".jsonl": lambda: ray.data.read_json(path, lines=True),  # _keep_texts names a missing field
        ".parquet": lambda: ray.data.read_parquet(path).select_columns(cols),  # (columns= is deprecated)
        ".tsv": lines,
        ".csv": lines,
    }
    return readers[Path(path).suffix.lower()]()


def _with_index(ds, as_refs: bool = False):
    """Add ``id``, each item's position after the blank rows are dropped (as the local readers number them).
    Blocks come back in order (preserve_order); each gets its offset, and no row passes through the driver.
    ``as_refs``: (the indexed blocks' refs, their rows) instead of a Dataset."""
    import ray

    @ray.remote
    def rows(t) -> int:
        return t.num_rows

    @ray.remote
    def index(t, start: int):
        import pyarrow as pa

        return t.append_column("id", pa.array(np.arange(start, start + t.num_rows, dtype=np.int64)))

    refs = ds.to_arrow_refs()
    counts = ray.get([rows.remote(r) for r in refs])
    if sum(counts) == 0:
        return None
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int)
    indexed: list = [index.remote(r, int(s)) for r, s in zip(refs, starts)]
    return (indexed, int(sum(counts))) if as_refs else ray.data.from_arrow_refs(indexed)


# Up to this many items (a corpus that fits one task's memory many times over: ~6 bytes a token), the tokenised
# blocks are sorted and cut in one plain Ray task (:func:`_sorted_small`); above it, by Ray Data's distributed sort
# and repartition (:func:`_sorted_by_ray_data`).  Ray Data's two all-to-all stages cost seconds of scheduling
# whatever the size (bench/ray_startup_bench.py: 3-8 s of a 10-20 s run on the tests' 40 items, 2 cores); the one
# task costs milliseconds.  Both give the same rows in the same blocks, hence the same partials and result bytes.
SORT_IN_ONE_TASK = 200_000


def _sorted_by_ray_data(ds, job: TextJob, done: list[int]):
    """Tokenise, sort by (length, id) and cut into blocks of RESUME_BATCHES batches, in Ray Data's stages."""
    if done:
        ds = ds.map_batches(_drop_done, batch_format="pyarrow", fn_kwargs={"done": done})
    ds = ds.map_batches(
        _tokenise,
        batch_format="pyarrow",
        fn_kwargs={"tokenizer": job.tokenizer, "decoder": job.decoder, "max_tokens": job.max_tokens},
    )
    # sorted and materialised before the actors start: an actor pool holding every CPU would starve these tasks
    ds = ds.sort(["length", "id"])
    # blocks of RESUME_BATCHES batches: each becomes one partial file as soon as it is reduced, so a Ctrl-C
    # loses at most the blocks in flight (one sorted block would hold back every file to the end)
    # strict: exactly RESUME_BATCHES batches a block, whatever blocks the sort gave (:func:`_images_sorted_by_ray_data`)
    return ds.repartition(target_num_rows_per_block=job.batch_size * RESUME_BATCHES, strict=True).materialize()


def _sorted_small(refs: list, rows: int, job: TextJob, done: list[int]):
    """:func:`_sorted_by_ray_data`'s blocks from plain Ray tasks: each indexed block tokenised in its own task
    (in parallel, as Ray Data's map), then one task sorts them all by (length, id) and cuts blocks of
    RESUME_BATCHES batches; ``rows``: the items left after ``done``.  The rows stay in Ray's object store."""
    import ray

    per_block = job.batch_size * RESUME_BATCHES
    blocks = max(1, -(-rows // per_block))

    @ray.remote
    def tokenise(t, tokenizer: bytes, decoder: bool, max_tokens: int | None, done: list[int]):
        if done:
            t = _drop_done(t, done)
        return _tokenise(t, tokenizer, decoder, max_tokens)

    @ray.remote(num_returns=blocks)
    def sort_and_cut(*tables):
        import pyarrow as pa
        import pyarrow.compute as pc

        t = pa.concat_tables(tables)
        t = t.take(pc.sort_indices(t, [("length", "ascending"), ("id", "ascending")]))
        cut = [t.slice(b * per_block, per_block) for b in range(blocks)]
        return cut if blocks > 1 else cut[0]

    tok, gone = ray.put(job.tokenizer), ray.put(done)
    out = sort_and_cut.remote(*[tokenise.remote(r, tok, job.decoder, job.max_tokens, gone) for r in refs])
    return ray.data.from_arrow_refs(out if blocks > 1 else [out])


def run_texts(
    setup, job: TextJob, out: Path, progress: bool = False
) -> tuple[Iterator[Partial], dict[int, Item], tuple[int, int], int | None, int | None]:
    """Run the whole pipeline; returns the partials in fold order (read as they are folded), the items the top-k
    examples name (a dict filled as the fold goes: whole once the partials are exhausted), the (items, tokens) an
    interrupted run had already reduced, the items ``--max-tokens`` cut (None: not asked; an interrupted
    run's included, as its tokens are), and the items mostly of the unknown token (None: not counted, or not in
    every partial: the tokenizer names none, or partials kept by an older attnviz)."""
    _ray()  # a clear line when Ray is missing, before anything starts
    if Path(job.path).suffix.lower() == ".jsonl":
        _check_lines(Path(job.path))  # before Ray starts: a refusal is then the only line on stderr
    elif Path(job.path).suffix.lower() == ".parquet":
        _check_parquet(Path(job.path), job.pair_column)
    else:  # .txt, .tsv, .csv: the header here, every row in the read task
        _check_rows(Path(job.path), job.pair_column)
    ray = _init(setup)
    _context(progress)
    store = PartialsStore(out / PARTIALS, job.fingerprint)
    done, n_done, tokens_done = store.start()
    partials = store.folder
    try:
        ds = _read(job).map_batches(
            _keep_texts, batch_format="pyarrow", fn_kwargs={"pair_column": job.pair_column, "name": Path(job.path).name}
        )
        if job.max_items is not None:
            ds = ds.limit(job.max_items)
        indexed = _with_index(ds, as_refs=True)
        if indexed is None:
            raise AttnvizError(f"--texts {Path(job.path).name}: no items (empty lines are skipped)")
        refs, rows = indexed
        if rows - len(done) <= SORT_IN_ONE_TASK:
            ds = _sorted_small(refs, rows - len(done), job, done)
        else:
            ds = _sorted_by_ray_data(ray.data.from_arrow_refs(refs), job, done)
        _reduce_and_write(ds, setup, job, partials)
        small = ("cut",) if job.max_tokens is not None else ()
        keys = _keys(store.files(), ("first_length", "first_item"), (*small, "unknown"))
    except AttnvizError:
        store.drop()
        raise
    except Exception as e:  # Ray wraps reader and task errors; the remote error line names the cause
        store.drop()
        raise _ray_error(e, f"--texts {Path(job.path).name}", "the file") from None
    cut = None if job.max_tokens is None else sum(int(k.small["cut"]) for k in keys)
    counted = [k.small["unknown"] for k in keys]
    unknown = None if not counted or None in counted else sum(int(c) for c in counted)
    items: dict[int, Item] = {}

    def named(row: dict) -> None:  # the items a batch's top-k names, gathered as the fold takes it
        for i, (t, p) in parse_json(row["texts"], PARTIALS).items():
            items[int(i)] = Item(int(i), text=t, pair=p)

    return _fold(store, keys, named), items, (n_done, tokens_done), cut, unknown


@dataclass(frozen=True)
class RowKey:
    """Where one partial (one padded batch) lies: its fold key, its file, row group and row there, and the small
    columns asked for beside the key (the driver reads these of every row; the arrays only as the fold takes them)."""

    key: tuple
    file: int
    group: int
    row: int
    small: dict


def _keys(files: list[Path], keys: tuple[str, ...], small: tuple[str, ...] = ()) -> list[RowKey]:
    """Every partial's :class:`RowKey`, in fold order (by ``keys``; ties in file and row order, as the whole table's
    stable sort had them).  Reads only those columns: a few numbers a batch, not its arrays.  A ``small`` column
    a file lacks reads as None (a tokenizer without an unknown token writes no ``unknown``)."""
    import pyarrow.parquet as pq

    rows = []
    for f, path in enumerate(files):
        pf = pq.ParquetFile(path)
        has = [c for c in small if c in pf.schema_arrow.names]
        cols = pf.read(columns=[*keys, *has]).to_pydict()  # a file's key columns at once (Ray: a row group a batch)
        n = 0
        for g in range(pf.num_row_groups):
            for r in range(pf.metadata.row_group(g).num_rows):
                found = {c: cols[c][n] if c in cols else None for c in small}
                rows.append(RowKey(tuple(cols[k][n] for k in keys), f, g, r, found))
                n += 1
    return sorted(rows, key=lambda k: k.key)  # sorted() is stable: equal keys keep file and row order


FOLD_COLUMNS = ("items", "tokens", "heads", "kb", *ARRAYS, "texts")  # what the fold reads of a partial


class Pieces:
    """The partial files' rows one piece at a time: a piece is one row group of one file (Ray Data writes one
    block, ``RESUME_BATCHES`` batches, a file, each batch its own row group), read when the fold order first asks
    for a row in it and dropped when it asks for another piece's.  The whole table in the driver grew with the
    corpus (bench/ray_delimited_memory.py: a peak of 251 MiB at 20k rows, 340 at 200k; now 238 and 248); this
    holds one piece.  ``loads`` and ``most_rows`` say what it read."""

    def __init__(self, files: list[Path], columns: tuple[str, ...] = FOLD_COLUMNS):
        self.files = files
        self.columns = list(columns)
        self.at: tuple[int, int] | None = None
        self.piece = None
        self.file: tuple[int, Any] | None = None  # the file the piece is of, open
        self.loads = 0  # pieces read
        self.most_rows = 0  # the most rows held at once

    def row(self, k: RowKey) -> dict:
        import pyarrow.parquet as pq

        if self.at != (k.file, k.group):
            self.piece = None  # the previous piece goes before the next is read
            if self.file is None or self.file[0] != k.file:  # its footer parsed once (Ray: a row group a batch)
                self.file = (k.file, pq.ParquetFile(self.files[k.file]))
            piece = self.file[1].read_row_group(k.group, columns=self.columns)
            self.piece, self.at = piece, (k.file, k.group)
            self.loads += 1
            self.most_rows = max(self.most_rows, piece.num_rows)
        assert self.piece is not None
        return self.piece.slice(k.row, 1).to_pylist()[0]


def _fold(store: PartialsStore, keys: list[RowKey], each=None, pieces: Pieces | None = None) -> Iterator[Partial]:
    """Each partial in fold order, read a piece at a time (:class:`Pieces`); ``each(row)`` sees every row first.
    The files stay until the last is folded: a Ctrl-C during the fold leaves them for the next run to resume from;
    an error reading them removes them, as one before the fold did."""
    pieces = pieces or Pieces(store.files())
    try:
        for b, k in enumerate(keys):
            row = pieces.row(k)
            if each is not None:
                each(row)
            yield partial_from_row(row, b)
    except AttnvizError:
        store.drop()
        raise
    except Exception as e:  # a partial file unreadable after Ray wrote it (the disk, another process)
        store.drop()
        why = (str(e).strip().splitlines() or [""])[0]
        raise AttnvizError(
            f"{store.folder}: a partial result could not be read back ({type(e).__name__}: {why[:120]}); "
            "run again (the folder is removed)"
        ) from None
    store.drop()


def _actors(ds, **kw):
    """``ds.map_batches(ReduceActor, **kw)``, its actors never restarted.  Ray Data restarts a dead map actor and
    retries its batch without end by default (max_restarts=-1): an actor that dies on a batch (onnxruntime
    crashing on it, the OOM killer) then died and restarted for as long as the run was left running, and the driver
    printed Ray's ``core_worker.cc ... max_restarts > 0`` warning on every run.  Without restarts an actor's death
    ends the run in one line (:func:`_ray_error`), as an error raised in it does.
    Ray 2.60 takes ``max_restarts`` only through its deprecated ``**ray_remote_args`` (no named parameter yet):
    its deprecation warning for that is dropped here, and a Ray whose map_batches has no such catch-all gets the
    call without it."""
    import inspect
    import warnings

    params = inspect.signature(ds.map_batches).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        kw["max_restarts"] = 0
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`ray_remote_args` is deprecated")
        return ds.map_batches(ReduceActor, **kw)


def _reduce_and_write(ds, setup, job, partials: Path) -> None:
    """The actor pool reduces each batch; every block's partials become one Parquet file as soon as it is done."""
    ray = _ray()
    _actors(
        ds,
        fn_constructor_args=(pickle.dumps(setup), pickle.dumps(job)),
        batch_size=job.batch_size,
        compute=ray.data.ActorPoolStrategy(size=setup.workers),
        num_cpus=setup.threads,
        num_gpus=1 if setup.gpu else 0,
        batch_format="pyarrow",
    ).write_parquet(str(partials), ray_remote_args={"num_cpus": 0})
    # the write tasks take no CPU slot: the actors hold every slot for their lifetime, and a write waiting for
    # one would stall the run until the pool winds down (minutes on 2 cores)


def _ray_error(e: Exception, what: str, check: str) -> AttnvizError:
    """One line for an error Ray wrapped: ours as it was raised, a worker's death as that, anything else named with
    its input."""
    name, msg = _user_error(e) or (type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else "")
    if name == "AttnvizError":
        return AttnvizError(msg)
    if _actor_died(e):  # (actors are not restarted: _actors)
        return AttnvizError(
            f"{what}: a Ray worker process died while reducing a batch (killed, out of memory, or a crash in "
            "onnxruntime; Ray's logs say which: /tmp/ray/session_latest/logs on its node); run again, or with "
            "--engine local"
        )
    return AttnvizError(
        f"{what}: Ray Data could not read or process it ({name}: {msg[:160]}); check {check}, or run with --engine local"
    )


def _direct_images(batch, folder: str):
    """Only the folder's own files (the local reader does not descend), with an image suffix in any case."""
    import pyarrow as pa

    from attnviz.runtime.raster import IMAGE_SUFFIXES

    paths = batch.column("path").to_pylist()
    keep = [Path(p).parent == Path(folder) and Path(p).suffix.lower() in IMAGE_SUFFIXES for p in paths]
    return batch.filter(pa.array(keep, pa.bool_()))


# Up to this many bytes of image files, the folder's rows are sorted by path, numbered and cut in one plain Ray task
# (:func:`_images_sorted_small`), as the text path's SORT_IN_ONE_TASK: Ray Data's sort + repartition cost 3.7-4.1 s
# of scheduling a run whatever the size (bench/RESULTS.md, session 23).  The one task holds every image's bytes
# (twice, while it sorts), so a larger folder keeps Ray Data's distributed stages (:func:`_images_sorted_by_ray_data`).
SORT_IMAGES_IN_ONE_TASK = 256 * 2**20


def _rows_and_bytes(refs: list) -> tuple[int, int]:
    """(rows, bytes) of the blocks, counted where they lie (no image passes through the driver)."""
    import ray

    @ray.remote
    def size(t) -> tuple[int, int]:
        return t.num_rows, t.nbytes

    counts = ray.get([size.remote(r) for r in refs])
    return sum(c[0] for c in counts), sum(c[1] for c in counts)


def _images_sorted_by_ray_data(ds, job: ImageJob, done: list[int]):
    """The folder's rows sorted by path (the local reader's order: item numbers match), the first ``max_items``
    numbered, the ``done`` ones left out, cut in blocks of RESUME_BATCHES batches (one partial file a block)."""
    ds = ds.sort("path")
    if job.max_items is not None:
        ds = ds.limit(job.max_items)
    indexed = _with_index(ds.materialize())
    assert indexed is not None  # (run_images refuses a folder without images first)
    if done:
        indexed = indexed.map_batches(_drop_done, batch_format="pyarrow", fn_kwargs={"done": done})
    # strict: every block exactly RESUME_BATCHES batches (the last the rest).  Without it Ray Data only splits blocks
    # and never joins them: the sort's blocks of 16-22 images were cut into batches at their own ends, other batches
    # than the local engine's (equal only within float noise; ray24's test of the blocks found it)
    return indexed.repartition(target_num_rows_per_block=job.batch_size * RESUME_BATCHES, strict=True).materialize()


def _images_sorted_small(refs: list, n: int, job: ImageJob, done: list[int]):
    """:func:`_images_sorted_by_ray_data`'s blocks from one plain Ray task; ``n``: the items numbered (the folder's
    images up to ``max_items``).  The rows stay in Ray's object store."""
    import ray

    per_block = job.batch_size * RESUME_BATCHES
    left = n - len({d for d in done if d < n})
    blocks = max(1, -(-left // per_block))

    @ray.remote(num_returns=blocks)
    def sort_and_cut(done: list[int], *tables):
        import pyarrow as pa
        import pyarrow.compute as pc

        t = pa.concat_tables(tables)
        t = t.take(pc.sort_indices(t, [("path", "ascending")])).slice(0, n)
        t = t.append_column("id", pa.array(np.arange(n, dtype=np.int64)))
        if done:
            t = _drop_done(t, done)
        cut = [t.slice(b * per_block, per_block) for b in range(blocks)]
        return cut if blocks > 1 else cut[0]

    out = sort_and_cut.remote(done, *refs)
    return ray.data.from_arrow_refs(out if blocks > 1 else [out])


def _read_images(folder: str):
    """The folder's own image files (``path``, ``bytes``), read by Ray Data's read tasks, in no particular order."""
    from attnviz.runtime.raster import IMAGE_SUFFIXES

    ray = _ray()

    exts = sorted({e.lstrip(".") for e in IMAGE_SUFFIXES} | {e.lstrip(".").upper() for e in IMAGE_SUFFIXES})
    ds = ray.data.read_binary_files(folder, include_paths=True, file_extensions=exts)
    return ds.map_batches(_direct_images, batch_format="pyarrow", fn_kwargs={"folder": folder})


def run_images(setup, job: ImageJob, out: Path, progress: bool = False):
    """Ray Data reads the image folder; returns (partials in fold order, the examples' items (filled as the fold
    goes), the data sha256 computed as :func:`attnviz.corpus.items.sha256_items` does, the number of items,
    (items, tokens) resumed)."""
    ray = _ray()

    from attnviz.runtime.raster import IMAGE_SUFFIXES

    _init(setup)
    _context(progress)
    folder = str(Path(job.folder).resolve())
    store = PartialsStore(out / PARTIALS, job.fingerprint)
    done, n_done, tok_done = store.start()
    partials = store.folder
    try:
        refs = _read_images(folder).to_arrow_refs()
        rows, size = _rows_and_bytes(refs)
        n = rows if job.max_items is None else min(rows, job.max_items)
        if n == 0:
            raise AttnvizError(f"--images {job.folder}: no image files ({', '.join(IMAGE_SUFFIXES)})")
        if size <= SORT_IMAGES_IN_ONE_TASK:
            ds = _images_sorted_small(refs, n, job, done)
        else:
            ds = _images_sorted_by_ray_data(ray.data.from_arrow_refs(refs), job, done)
        _reduce_and_write(ds, setup, job, partials)
        keys = _keys(store.files(), ("first_item",), ("digests",))
    except AttnvizError:
        store.drop()
        raise
    except Exception as e:
        store.drop()
        raise _ray_error(e, f"--images {job.folder}", "the folder") from None
    items: dict[int, Item] = {}
    digests = []
    for k in keys:  # every image's name and hash (the data's sha256 is known before the fold)
        digests += parse_json(k.small["digests"], PARTIALS)
    digests.sort()
    h = hashlib.sha256()
    for _, name, digest in digests:  # as sha256_items: each item's [text, pair, image name], then its bytes' hash
        h.update(json.dumps([None, None, name]).encode())
        h.update(digest.encode())

    def named(row: dict) -> None:
        for i, (path, _) in parse_json(row["texts"], PARTIALS).items():
            items[int(i)] = Item(int(i), image=path)

    return _fold(store, keys, named), items, h.hexdigest(), len(digests), (n_done, tok_done)


def _actor_died(e: BaseException) -> bool:
    """Whether Ray reports an actor's process gone (RayActorError: ActorDiedError and kin) anywhere in the chain."""
    from ray.exceptions import RayActorError

    seen: BaseException | None = e
    for _ in range(16):  # (a bounded walk of the cause chain)
        if seen is None:
            return False
        if isinstance(seen, RayActorError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


_ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?(\w*(?:Error|Exception)): (.+)$")


def _user_error(e: BaseException) -> tuple[str, str] | None:
    """(class name, message) of the user-level error inside Ray's wrappers.  Ray re-raises task errors as
    RayTaskError(UserCodeException) whose text holds the remote traceback: its error lines name the cause."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))
    found = [
        (m.group(1), m.group(2).strip())
        for line in text.splitlines()
        if (m := _ERROR_LINE.match(line.strip())) and "UserCodeException" not in m.group(1)
    ]
    ours = [f for f in found if f[0] == "AttnvizError"]
    pick = ours or found
    return pick[-1] if pick else None


def run_specs(setup, specs: list[BatchSpec]) -> Iterator[Partial]:
    """Driver-planned batches (source/target pairs, recordings): Ray Data ``map_batches`` over the specs, one
    session per actor; a batch's error is one line, as the local engine raises it."""
    ray = _ray()
    if not specs:
        return
    _init(setup)
    _context(False)
    blob = pickle.dumps(setup)
    ds = ray.data.from_items(
        [{"batch_id": s.batch_id, "spec": pickle.dumps(s)} for s in specs], override_num_blocks=len(specs)
    )
    out = _actors(
        ds,
        fn_constructor_args=(blob,),
        batch_size=1,
        compute=ray.data.ActorPoolStrategy(size=setup.workers),
        num_cpus=setup.threads,
        num_gpus=1 if setup.gpu else 0,
        batch_format="numpy",
    )
    try:
        for row in out.iter_rows():
            yield pickle.loads(row["partial"])
    except Exception as e:  # Ray wraps an actor's error (a recording the model heard no words in) in its own
        raise _ray_error(e, "a corpus batch", "the input") from None


def _folder_fingerprint(cfg, folder: Path, model_sha: str) -> str:
    """The run's identity without reading the images: the model, the folder's image files (name, size,
    modification time) and the settings that cut and rank the batches."""
    from attnviz.runtime.raster import IMAGE_SUFFIXES

    files = sorted(
        (p.name, p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.iterdir()
        if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()
    )
    return hashlib.sha256(
        json.dumps([model_sha, files, cfg.batch_size, cfg.k, cfg.max_items, "images"]).encode()
    ).hexdigest()


def images_stream(cfg, workers: int, threads: int, setup, ckpt: Path, model_sha: str):
    """``--engine ray --images``: the run's :class:`~attnviz.corpus.stream.Stream` over :func:`run_images`
    (not resumable: Ray Data reads and batches the folder itself)."""
    from attnviz.corpus.stream import Stream

    if ckpt.exists():
        raise AttnvizError(
            f"{ckpt} is a local run's checkpoint; resume it with --engine local, or use another --out for Ray"
        )
    folder = Path(str(cfg.images))
    if not folder.is_dir():
        raise AttnvizError(f"--images {folder}: not a folder")
    job = ImageJob(str(folder), cfg.max_items, cfg.batch_size, _folder_fingerprint(cfg, folder, model_sha))

    def partials(start: int) -> Iterator[Partial]:
        parts, items, sha, n, resumed = run_images(setup, job, Path(cfg.out), cfg.progress)
        stream.items = lambda: items  # filled as the partials are folded (read after the fold)
        stream.data_sha, stream.total, stream.resumed = sha, n, resumed  # known once Ray has read every image
        return parts

    stream = Stream(partials, dict, None, "", "items", None, workers, threads)
    return stream
