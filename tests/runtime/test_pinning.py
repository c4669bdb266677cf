"""Page-locking the child's shared-memory slots on CUDA (runtime/pinning.py, runtime/worker.py's Pool).

No GPU here: the CUDA runtime is a stand-in object with the three functions attnviz calls, recording each
registration with the address and size it was given and checking, at each unregistration, that the address is
still mapped in this process (/proc/self/maps): a registration must be dropped before its slot is unmapped.
The runs themselves are real onnxruntime (CPU) runs whose values are checked against numpy.  What page-locking
buys on a GPU is measured by bench/gpu/pin_check.py."""

from __future__ import annotations

import os
import pickle
import socket
import threading
from multiprocessing.connection import Connection

import numpy as np
import pytest
from test_host_slots import _double_model  # y = x + x on float[rows, n]

from attnviz.runtime import host, open_model, pinning
from attnviz.runtime.isolation import read_message, write_message
from attnviz.runtime.worker import KEEP_RUNS, Pool, Server

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc/self/maps")


def _mapped(addr: int) -> bool:
    with open("/proc/self/maps") as fh:
        for line in fh:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= addr < hi:
                return True
    return False


class FakeCudart:
    """Stands in for libcudart: records cudaHostRegister/cudaHostUnregister; ``fail_at``: the registration
    (1-based) that returns cudaErrorMemoryAllocation (2) instead of cudaSuccess."""

    def __init__(self, fail_at: int | None = None):
        self.fail_at = fail_at
        self.calls = 0
        self.registered: list[tuple[int, int, int]] = []  # (address, size, flags)
        self.unregistered: list[int] = []
        self.unmapped_at_unregister: list[int] = []

    def cudaHostRegister(self, ptr, size, flags):
        self.calls += 1
        if self.calls == self.fail_at:
            return 2
        self.registered.append((ptr.value, int(size), int(flags)))
        return 0

    def cudaHostUnregister(self, ptr):
        if not _mapped(ptr.value):
            self.unmapped_at_unregister.append(ptr.value)
        self.unregistered.append(ptr.value)
        return 0

    def cudaGetErrorName(self, err):
        return {2: b"cudaErrorMemoryAllocation"}.get(err, b"cudaErrorUnknown")

    def live(self) -> set[int]:
        """Addresses registered and not unregistered since."""
        live: dict[int, int] = {}
        for a, _, _ in self.registered:
            live[a] = live.get(a, 0) + 1
        for a in self.unregistered:
            live[a] -= 1
        assert all(n in (0, 1) for n in live.values()), "an address registered twice or unregistered unregistered"
        return {a for a, n in live.items() if n}


class Lookups:
    """The library look-up, recorded: a CPU session must never make one."""

    def __init__(self, lib: FakeCudart | None, path: str | None = "/usr/lib/libcudart.so.12"):
        self.lib, self.path, self.finds, self.opens = lib, path, 0, []

    def find(self):
        self.finds += 1
        return self.path

    def open(self, path):
        self.opens.append(path)
        if self.lib is None:
            raise OSError(f"{path}: cannot open shared object file")
        return self.lib

    def pinner(self) -> pinning.Pinner:
        return pinning.Pinner(find=self.find, opener=self.open)


class _AsCuda:
    """A real CPU session that reports the CUDA provider first: what makes the child start page-locking."""

    def __init__(self, sess):
        self._sess = sess

    def get_providers(self):
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]

    def __getattr__(self, name):
        return getattr(self._sess, name)


def _server(tmp_path, monkeypatch, lookups: Lookups, cuda: bool) -> Server:
    import attnviz.runtime.session as local

    if cuda:
        real = local.make_session
        monkeypatch.setattr(local, "make_session", lambda *a, **k: (lambda s, n: (_AsCuda(s), n))(*real(*a, **k)))
    srv = Server(None, str(tmp_path))
    srv.pool.pinner = lookups.pinner()
    srv.create(1, _double_model(tmp_path / "double.onnx").read_bytes(), {"provider": "cpu"})
    return srv


def _runs(srv: Server, rows_seq, rng) -> list[int]:
    """Runs on the given row counts, each value checked; returns the slot ids each used.  Each slot is handed
    back with the next request, as the parent does once the caller dropped the arrays."""
    release: list[int] = srv.__dict__.setdefault("_lent", [])
    used = []
    for rows in rows_seq:
        x = rng.standard_normal((rows, 300)).astype(np.float32)
        (item,), _, _ = srv.run(1, ["y"], {"x": x}, release)
        if item[0] == "slot":
            np.testing.assert_array_equal(srv.pool.slots[item[1]].array(np.dtype(item[2]), item[3]), 2 * x)
            release[:] = [item[1]]
            used.append(item[1])
        else:
            np.testing.assert_array_equal(item[1], 2 * x)
            release[:] = []
    return used


def test_a_cpu_session_never_looks_for_the_cuda_runtime(tmp_path, monkeypatch):
    lookups = Lookups(FakeCudart())
    srv = _server(tmp_path, monkeypatch, lookups, cuda=False)
    used = _runs(srv, [64, 64, 200, 64], np.random.default_rng(1))
    assert used and srv.pool.slots  # slots were made and reused
    assert lookups.finds == 0 and lookups.opens == [] and lookups.lib.calls == 0
    assert srv.pinned() == "no (not a CUDA session)"


def test_the_isolated_cpu_run_reports_no_pinning_and_its_session_says_why(tmp_path):
    model = open_model(_tiny(tmp_path), provider="cpu")
    res = model.run({"input_ids": np.array([[1] + [3, 4, 5] * 60 + [2]], np.int64)}, mode="dense")
    assert res.info["provider"] == "CPUExecutionProvider" and "pinned" not in res.info
    sess = host.make_session(str(_double_model(tmp_path / "d.onnx")), "cpu")[0]
    assert sess.pinned() == "no (not a CUDA session)"  # asked of the child itself


def _tiny(tmp_path):
    from onnx_builders import tiny_text_model

    return tiny_text_model(tmp_path / "tiny.onnx", d=16, heads=2)


def test_on_cuda_each_slot_is_registered_once_and_unregistered_before_it_is_unmapped(tmp_path, monkeypatch):
    lib = FakeCudart()
    lookups = Lookups(lib)
    srv = _server(tmp_path, monkeypatch, lookups, cuda=True)
    assert lookups.finds == 1 and srv.pinned() == "yes"
    rng = np.random.default_rng(2)
    _runs(srv, [64] * 6, rng)  # the same shape again and again: the same slot(s)
    after_same = len(lib.registered)
    want = {(s.view.ctypes.data, s.cap) for s in srv.pool.slots.values()}
    assert {(a, n) for a, n, _ in lib.registered} == want  # every slot, at its address and its whole size
    assert all(f == pinning.HOST_REGISTER_PORTABLE for _, _, f in lib.registered)
    _runs(srv, [64] * 4, rng)
    assert len(lib.registered) == after_same  # reuse registers nothing: the cost is once per slot, not per run
    _runs(srv, [900] * (KEEP_RUNS + 2), rng)  # a longer input: new slots; the small ones age out and are deleted
    gone = set(want) - {(s.view.ctypes.data, s.cap) for s in srv.pool.slots.values()}
    assert gone, "the pool was expected to shrink"
    assert {a for a, _ in gone} <= set(lib.unregistered)
    assert lib.live() == {s.view.ctypes.data for s in srv.pool.slots.values()}  # exactly the live slots
    srv.pool.close()  # the child leaving
    assert lib.live() == set() and lib.unmapped_at_unregister == []
    assert lookups.finds == 1  # looked up once per child, not per session or run


def test_a_refused_registration_falls_back_to_pageable_slots_and_says_why(tmp_path, monkeypatch):
    lib = FakeCudart(fail_at=2)
    srv = _server(tmp_path, monkeypatch, Lookups(lib), cuda=True)
    rng = np.random.default_rng(3)
    _runs(srv, [64, 64], rng)
    _runs(srv, [900, 900], rng)  # a second slot: its registration is refused
    state = srv.pinned()
    assert state.startswith("no (cudaHostRegister of ") and "cudaErrorMemoryAllocation (2)" in state
    assert lib.live() == set()  # the one registered before is unregistered: pageable everywhere, as before
    calls = lib.calls
    _runs(srv, [64, 2000, 2000, 64], rng)  # values stay right (checked), and nothing more is tried
    assert lib.calls == calls and lib.unmapped_at_unregister == []


def test_no_runtime_loaded_or_unusable_or_switched_off_leaves_slots_pageable(tmp_path, monkeypatch):
    rng = np.random.default_rng(4)
    none = Lookups(FakeCudart(), path=None)
    (tmp_path / "a").mkdir()
    srv = _server(tmp_path / "a", monkeypatch, none, cuda=True)
    _runs(srv, [64, 64], rng)
    assert srv.pinned() == "no (no CUDA runtime library loaded in this process)" and none.lib.calls == 0
    broken = Lookups(None)
    (tmp_path / "b").mkdir()
    srv = _server(tmp_path / "b", monkeypatch, broken, cuda=True)
    _runs(srv, [64, 64], rng)
    assert srv.pinned().startswith("no (cannot use libcudart.so.12: ")
    monkeypatch.setenv(pinning.OFF_ENV, "off")
    off = Lookups(FakeCudart())
    (tmp_path / "c").mkdir()
    srv = _server(tmp_path / "c", monkeypatch, off, cuda=True)
    _runs(srv, [64, 64], rng)
    assert srv.pinned() == "no (off: ATTNVIZ_PIN=off)" and off.finds == 0 and off.lib.calls == 0


def test_slots_made_before_the_first_cuda_session_are_registered_when_it_comes(tmp_path):
    lib = FakeCudart()
    pool = Pool(str(tmp_path))
    pool.pinner = Lookups(lib).pinner()
    early = [pool.take(n) for n in (100_000, 300_000)]
    assert lib.registered == []  # no CUDA session yet
    pool.pin_all()
    late = pool.take(500_000)
    assert {a for a, _, _ in lib.registered} == {s.view.ctypes.data for s in (*early, late)}
    pool.release(s.id for s in (*early, late))
    pool.run += KEEP_RUNS
    pool.trim()
    assert pool.slots == {} and lib.live() == set() and lib.unmapped_at_unregister == []


def test_the_child_unregisters_every_slot_when_its_parent_goes(tmp_path, monkeypatch):
    """serve() as the child runs it: requests over a socket, then the parent's end closes."""
    from attnviz.runtime import slots, worker

    lib = FakeCudart()
    lookups = Lookups(lib)

    def started():
        p = lookups.pinner()
        p.start()  # as after a CUDA session: every slot made from here is registered
        return p

    monkeypatch.setattr(slots, "Pinner", started)  # where the child's pool makes its pinner
    mine, theirs = socket.socketpair()
    child = threading.Thread(target=worker.serve, args=(Connection(theirs.detach()), str(tmp_path)))
    child.start()
    fd = mine.fileno()
    rng = np.random.default_rng(5)

    def ask(op, *args):
        write_message(fd, pickle.dumps((op, args)))
        status, reply = pickle.loads(read_message(fd))
        assert status == "ok", reply
        return reply

    ask("create", 1, _double_model(tmp_path / "double.onnx").read_bytes(), {"provider": "cpu"})
    release: list[int] = []
    for rows in (64, 64, 900):
        x = rng.standard_normal((rows, 300)).astype(np.float32)
        (item,), _, _ = ask("run", 1, ["y"], {"x": x}, release)
        assert item[0] == "slot"
        release = [item[1]]
    assert ask("pinned") == "yes" and len(lib.live()) >= 2
    mine.close()
    child.join(30)
    assert not child.is_alive()
    assert lib.registered and lib.live() == set() and lib.unmapped_at_unregister == []


def test_find_cudart_reads_the_loaded_libraries(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f10 r-xp 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
        "7f20-7f30 r-xp 00000000 08:01 2 /opt/py/nvidia/cuda_runtime/lib/libcudart.so.12\n"
        "7f40-7f50 rw-p 00000000 00:00 0 \n"
    )
    assert pinning.find_cudart(str(maps)) == "/opt/py/nvidia/cuda_runtime/lib/libcudart.so.12"
    maps.write_text("7f00-7f10 r-xp 00000000 08:01 1 /usr/lib/libc.so.6\n7f40-7f50 rw-p 00000000 00:00 0 \n")
    assert pinning.find_cudart(str(maps)) is None
    assert pinning.find_cudart(str(tmp_path / "absent")) is None
    if pinning.find_cudart() is None:  # a process without a CUDA runtime: opening one never loads it (RTLD_NOLOAD)
        with pytest.raises(OSError):
            pinning.open_cudart("libcudart.so.12")
        assert pinning.find_cudart() is None


# -- in-process sessions (ATTNVIZ_INPROCESS=1): runtime/pinned_outputs.py ------------------------------------


def test_no_cpu_session_starts_pinning_isolated_or_in_process(tmp_path, monkeypatch):
    starts = []
    monkeypatch.setattr(pinning.Pinner, "start", lambda self: starts.append(self))
    path = str(_double_model(tmp_path / "double.onnx"))
    x = np.random.default_rng(6).standard_normal((900, 300)).astype(np.float32)
    for inprocess in (True, False):
        if inprocess:
            monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")
        else:
            monkeypatch.delenv("ATTNVIZ_INPROCESS", raising=False)
        sess = host.make_session(path, "cpu")[0]
        for _ in range(3):
            np.testing.assert_array_equal(sess.run_bound(["y"], {"x": x})[0], 2 * x)
        assert sess.pinned() == "no (not a CUDA session)"
    assert starts == []
    host.shutdown()  # the isolated child checked its own (its pinner never started: "not a CUDA session")


def _local(lib: FakeCudart, tmp_path):
    import onnxruntime as ort

    from attnviz.runtime.pinned_outputs import Buffers, PinnedOutputs

    pinner = Lookups(lib).pinner()
    pinner.start()
    sess = ort.InferenceSession(str(_double_model(tmp_path / "double.onnx")), providers=["CPUExecutionProvider"])
    return PinnedOutputs(Buffers(pinner)), sess


def test_in_process_outputs_reuse_a_registered_buffer_only_once_no_view_of_it_is_left(tmp_path):
    from attnviz.runtime.pinned_outputs import KEEP_RUNS

    lib = FakeCudart()
    out, sess = _local(lib, tmp_path)
    rng = np.random.default_rng(7)

    def run(rows=900):
        x = rng.standard_normal((rows, 300)).astype(np.float32)
        (y,) = out.run(sess, ["y"], {"x": x})
        np.testing.assert_array_equal(y, 2 * x)
        return y, x

    run()  # learns the shape: onnxruntime's own buffer
    assert lib.registered == []
    y1, x1 = run()  # bound into a registered buffer
    assert len(lib.registered) == 1 and lib.registered[0][0] <= y1.ctypes.data < sum(lib.registered[0][:2])
    held = y1[10:20]  # a view of it is kept: the buffer must not be written again
    del y1
    y2, _ = run()
    assert len(lib.registered) == 2
    np.testing.assert_array_equal(held, 2 * x1[10:20])
    del held, y2
    for _ in range(3):
        y, _ = run()
        del y
    assert len(lib.registered) == 2  # both free again: reused, nothing registered per run
    for _ in range(KEEP_RUNS + 1):  # another shape: the 900-row buffers age out
        y, _ = run(2000)
        del y
    assert len(out.buffers.bufs) < 4 and lib.unmapped_at_unregister == []
    assert lib.live() == {b.addr for b in out.buffers.bufs}
    out.buffers.close()
    assert lib.live() == set()


def test_in_process_refused_registration_runs_as_before_and_says_why(tmp_path):
    lib = FakeCudart(fail_at=1)
    out, sess = _local(lib, tmp_path)
    rng = np.random.default_rng(8)
    for _ in range(4):
        x = rng.standard_normal((900, 300)).astype(np.float32)
        np.testing.assert_array_equal(out.run(sess, ["y"], {"x": x})[0], 2 * x)
    assert out.buffers.pinner.state.startswith("no (cudaHostRegister of ")
    assert lib.calls == 1 and lib.live() == set() and out.buffers.bufs == []


def test_in_process_runs_from_several_threads_never_share_a_buffer(tmp_path):
    """A corpus worker's runs in flight on one session (attnviz/corpus/engines.py LAYOUTS): each run's outputs
    go into a buffer no other run holds, so that every result is its own input doubled, whatever the interleaving
    (thread switches made as frequent as the interpreter allows, so that a take and a view race if they can)."""
    import sys

    lib = FakeCudart()
    out, sess = _local(lib, tmp_path)
    bad: list[str] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        held = []
        for i in range(40):
            x = rng.standard_normal((900, 300)).astype(np.float32)
            (y,) = out.run(sess, ["y"], {"x": x})
            if not np.array_equal(y, 2 * x):
                bad.append(f"thread {seed} run {i}")
            if i % 3 == 0:  # every third result kept to the end: buffers both held and freed meanwhile
                held.append((y, x))
            del y
        bad.extend(f"thread {seed} kept" for y, x in held if not np.array_equal(y, 2 * x))

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=worker, args=(s,)) for s in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(before)
    assert bad == [] and len(lib.registered) > 1
    out.buffers.close()
    assert lib.live() == set() and lib.unmapped_at_unregister == []
