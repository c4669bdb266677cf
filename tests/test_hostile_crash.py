"""Crash isolation and real cancellation: onnxruntime runs in a child process (attnviz.runtime.host).

The 115-byte model below kills any process that creates an onnxruntime session for it (SIGFPE inside
onnxruntime's ONNX ``Attention`` kernel when ``q_num_heads=0``).  These tests run it in *this* process's
CLI entry point and window: if isolation failed, pytest itself would die.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx_builders import tiny_text_model

from attnviz.cli import main
from attnviz.runtime import host

ROOT = Path(__file__).resolve().parents[1]


def sigfpe_model(path: Path) -> Path:
    """ONNX Attention (opset 23) with q_num_heads=0: onnxruntime divides by the head count."""
    x = helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, 2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node("Attention", ["q", "q", "q"], ["y"], q_num_heads=0, kv_num_heads=0)
    m = helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = 10
    path.write_bytes(m.SerializeToString())
    return path


def slow_model(path: Path, n: int = 768, depth: int = 400) -> Path:
    """A chain of n×n MatMuls: minutes of work on one thread, so only a real stop ends it early."""
    nodes, prev = [], "x"
    for i in range(depth):
        nodes.append(helper.make_node("MatMul", [prev, "x"], [f"y{i}"]))
        prev = f"y{i}"
    g = helper.make_graph(
        nodes,
        "slow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [n, n])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_sigfpe_model_is_115_bytes_and_really_kills_a_process(tmp_path, native_fault_for_crash_isolation):
    """onnxruntime <= 1.31 dies on it by itself; on 1.32+ the test-only fault (tests/fault_injection) kills the
    process at the same point.  Either way a process that creates this session dies by SIGFPE."""
    p = sigfpe_model(tmp_path / "fpe.onnx")
    assert p.stat().st_size == 115
    code = "import onnxruntime as ort, sys; ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])"
    r = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, timeout=60)
    assert r.returncode == -8  # SIGFPE: the fault the isolation exists for


def test_cli_survives_the_crash_with_one_line_and_exit_2(tmp_path, capsys):
    m = sigfpe_model(tmp_path / "fpe.onnx")
    f = tmp_path / "feeds.npz"
    np.savez(f, q=np.ones((1, 2, 4), np.float32))
    before = {p: sha(p) for p in (m, f)}
    rc = main(["extract", str(m), "--inputs", str(f), "--out", str(tmp_path / "out.npz")])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err.startswith("attnviz: error: the model crashed onnxruntime:") and "SIGFPE" in err, err
    assert "\n" not in err
    assert not (tmp_path / "out.npz").exists()
    # inspect probes the model (a session is created, which faults) and still describes the graph
    assert main(["inspect", str(m)]) == 0
    out, err = capsys.readouterr()
    assert "Attention" in out and "Traceback" not in err
    assert {p: sha(p) for p in before} == before
    # this process is alive; a healthy model runs next, in a fresh child
    tiny = tiny_text_model(tmp_path / "tiny.onnx")
    assert main(["extract", str(tiny), "--text", "the cat", "--out", str(tmp_path / "ok.npz")]) == 0
    assert (tmp_path / "ok.npz").exists()


def test_cli_subprocess_exit_code(tmp_path):
    m = sigfpe_model(tmp_path / "fpe.onnx")
    f = tmp_path / "feeds.npz"
    np.savez(f, q=np.ones((1, 2, 4), np.float32))
    r = subprocess.run(
        [sys.executable, "-m", "attnviz", "extract", str(m), "--inputs", str(f), "--out", str(tmp_path / "o.npz")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "the model crashed onnxruntime" in lines[0], r.stderr


def test_maps_match_in_process_run(tmp_path, monkeypatch):
    """The child returns exactly what an in-process session computes (large outputs via mapped files)."""
    from attnviz.runtime import open_model

    tiny = tiny_text_model(tmp_path / "tiny.onnx", d=16, heads=2)
    ids = np.array([[1] + [3, 4, 5, 6, 7] * 120 + [2]], np.int64)  # 602 tokens: 2.9 MB per map, past INLINE_BYTES
    remote = open_model(tiny, provider="cpu").run({"input_ids": ids}, mode="dense")
    assert isinstance(remote.maps[0].array(), np.ndarray)
    monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")
    local = open_model(tiny, provider="cpu").run({"input_ids": ids}, mode="dense")
    assert remote.maps[0].array().nbytes > host.INLINE_BYTES
    for a, b in zip(remote.maps, local.maps):
        np.testing.assert_array_equal(a.array(), b.array())
    np.testing.assert_array_equal(remote.outputs["logits"], local.outputs["logits"])


def test_ondemand_heads_recompute_through_the_child(tmp_path, monkeypatch):
    from attnviz.runtime import open_model

    tiny = tiny_text_model(tmp_path / "tiny.onnx")
    ids = np.array([[1, 3, 4, 5, 6, 7, 2]], np.int64)
    od = open_model(tiny, provider="cpu").run({"input_ids": ids}, mode="ondemand")
    dense = open_model(tiny, provider="cpu").run({"input_ids": ids}, mode="dense")
    np.testing.assert_allclose(od.maps[1].head(0, 1), dense.maps[1].head(0, 1), atol=1e-6)


def test_cancel_really_stops_a_run_and_the_next_run_works(tmp_path):
    sess, _ = host.make_session(str(slow_model(tmp_path / "slow.onnx")), "cpu", threads=1)
    x = np.full((768, 768), 1e-3, np.float32)
    pid = host._host.proc.pid
    polls = []

    def cancelled():  # answers True once the request has been in flight for a few polls
        polls.append(time.perf_counter())
        return len(polls) > 3

    t0 = time.perf_counter()
    with host.cancel_scope(cancelled), pytest.raises(host.RunCancelled):
        sess.run(None, {"x": x})
    assert time.perf_counter() - t0 < 5  # 400 matmuls of 768² on one thread take far longer
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the child that ran it is gone (reaped)
    # the same session is re-created in a new child and runs a cheap request
    small, _ = host.make_session(str(tiny_text_model(tmp_path / "tiny.onnx")), "cpu")
    out = small.run(["logits"], {"input_ids": np.array([[1, 3, 2]], np.int64)})
    assert out[0].shape == (1, 2)
    assert host._host.proc.pid != pid


def test_gui_window_survives_the_crash(qtbot, tmp_path):
    from PySide6.QtCore import QSettings

    from attnviz.gui.main_window import MainWindow

    w = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat))
    qtbot.addWidget(w)
    w.show()
    m = sigfpe_model(tmp_path / "fpe.onnx")
    with qtbot.waitSignal(w.error_shown, timeout=60000) as sig:
        w.open_path(m)
    text = sig.args[0]
    assert text.startswith(("fpe.onnx: the model crashed onnxruntime:", "the model crashed onnxruntime:")), text
    assert "\n" not in text
    tiny = tiny_text_model(tmp_path / "tiny.onnx")
    with qtbot.waitSignal(w.result_shown, timeout=60000):
        w.open_path(tiny, text="the cat sat")
    assert w.session.result is not None and len(w.session.result.maps) == 2
    w.workers.cancel()
    assert w.workers.wait(10000)
    if w.error_box is not None:
        w.error_box.close()


def test_scripts_without_a_main_guard_can_run_models(tmp_path):
    """The child is a fresh `python -m attnviz.runtime.worker`, so it never re-runs the user's __main__
    (multiprocessing's spawn would: code piped on stdin, or a script without `if __name__ == "__main__"`)."""
    tiny = tiny_text_model(tmp_path / "tiny.onnx")
    code = (
        "import numpy as np\nfrom attnviz.runtime import open_model\n"
        f"r = open_model({str(tiny)!r}, provider='cpu').run({{'input_ids': np.array([[1, 3, 2]])}})\n"
        "print('maps', len(r.maps))\n"
    )
    r = subprocess.run(
        [sys.executable, "-"],
        input=code,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "maps 2"
