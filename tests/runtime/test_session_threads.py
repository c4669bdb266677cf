"""ATTNVIZ_THREADS: onnxruntime's intra-op threads for sessions whose caller names none (bench/startup_bench.py pins
attnviz to the plain script's threads with it); a bad value is one line, exit 2."""

import os
import subprocess
import sys

import pytest
from onnx_builders import tiny_text_model

from attnviz import AttnvizError
from attnviz.runtime.session import make_session


def _threads(sess) -> int:
    return sess.get_session_options().intra_op_num_threads


def test_the_setting_reaches_a_session_made_without_threads(tmp_path, monkeypatch):
    path = str(tiny_text_model(tmp_path / "tiny.onnx"))
    monkeypatch.delenv("ATTNVIZ_THREADS", raising=False)
    assert _threads(make_session(path, "cpu")[0]) == 0  # onnxruntime's own choice
    monkeypatch.setenv("ATTNVIZ_THREADS", "3")
    assert _threads(make_session(path, "cpu")[0]) == 3
    assert _threads(make_session(path, "cpu", threads=2)[0]) == 2  # a caller's own number wins


@pytest.mark.parametrize("bad", ["two", "0", "-1", "1.5"])
def test_a_bad_value_is_one_line(tmp_path, monkeypatch, bad):
    path = str(tiny_text_model(tmp_path / "tiny.onnx"))
    monkeypatch.setenv("ATTNVIZ_THREADS", bad)
    with pytest.raises(AttnvizError, match=rf"^ATTNVIZ_THREADS='{bad}': give onnxruntime's threads per session as a"):
        make_session(path, "cpu")


def test_a_bad_value_through_the_cli(tmp_path):
    """The first map's command (its session is made in the crash-isolation child) says it in one line, exit 2."""
    path = tiny_text_model(tmp_path / "tiny.onnx")
    out = tmp_path / "m.npz"
    p = subprocess.run(
        [sys.executable, "-m", "attnviz", "extract", str(path), "--text", "the cat sat", "--out", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "ATTNVIZ_THREADS": "many"},
        timeout=120,
    )
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == [
        "attnviz: error: ATTNVIZ_THREADS='many': give onnxruntime's threads per session as a whole number, 1 or more, "
        "or unset it"
    ]
    assert not out.exists()
