"""A GPU build of onnxruntime on a machine with an NVIDIA GPU and no CUDA libraries: ``--provider auto`` asked for
CUDA at every session of every command (and landed on the CPU each time).  The first landing on the CPU is kept
(runtime/cuda_kept.py) and the next commands do not ask, until onnxruntime, the driver or the library path change.

No GPU here: session.py's CUDA attempt (``_cuda_session``) is faked as onnxruntime-gpu behaves without the
libraries (a session that runs on the CPU), with a GPU present and a CUDA provider listed; each attempt is counted.
"""

from __future__ import annotations

import onnxruntime as ort
import pytest
from onnx_builders import tiny_text_model

from attnviz import AttnvizError
from attnviz.cli import main
from attnviz.runtime import cuda_kept, ort_build, session


@pytest.fixture
def no_cuda_libraries(tmp_path, monkeypatch):
    """(the asks counted, the model): a GPU machine whose CUDA loads nowhere; sessions in this process."""
    monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")
    monkeypatch.setenv("ATTNVIZ_CACHE_DIR", str(tmp_path / "cache"))
    for name in cuda_kept.LIBRARY_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(session, "gpu_present", lambda: True)
    monkeypatch.setattr(ort, "get_available_providers", lambda: [session.CUDA, session.CPU])
    asked: list[str] = []

    def without_libraries(model, so, options):
        asked.append("cuda")
        return ort.InferenceSession(model, so, providers=[session.CPU])  # what onnxruntime-gpu then makes

    monkeypatch.setattr(session, "_cuda_session", without_libraries)
    return asked, tiny_text_model(tmp_path / "m.onnx")


def _extract(model, tmp_path, capsys, provider="auto") -> str:
    out = tmp_path / "o.npz"
    code = main(["extract", str(model), "--text", "the cat sat", "--provider", provider, "--out", str(out)])
    io = capsys.readouterr()
    assert code == 0, io.err
    return io.out


def test_auto_asks_for_cuda_once_until_the_driver_library_path_or_build_change(
    no_cuda_libraries, tmp_path, capsys, monkeypatch
):
    asked, model = no_cuda_libraries
    first = _extract(model, tmp_path, capsys)
    assert len(asked) == 1  # the command's first session asked; its later ones, and the next command, do not
    second = _extract(model, tmp_path, capsys)
    assert len(asked) == 1
    # the same result and the same note either way: on the CPU, saying that CUDA was unavailable
    for said in (first, second):
        assert "on CPUExecutionProvider (CUDA provider unavailable (no GPU or CUDA libraries); running on CPU)" in said
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/cuda-12/lib64")  # the libraries installed, and pointed to
    _extract(model, tmp_path, capsys)
    assert len(asked) == 2
    _extract(model, tmp_path, capsys)
    assert len(asked) == 2  # (that path found nothing either: kept in its turn)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # every GPU hidden: a record of its own
    _extract(model, tmp_path, capsys)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    _extract(model, tmp_path, capsys)
    assert len(asked) == 3
    monkeypatch.setattr(cuda_kept, "_driver", lambda: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  999.1")
    _extract(model, tmp_path, capsys)
    assert len(asked) == 4
    build = ort_build.installed()
    assert build is not None
    monkeypatch.setattr(ort_build, "installed", lambda: [*build[:3], "another build", build[4]])  # reinstalled
    _extract(model, tmp_path, capsys)
    _extract(model, tmp_path, capsys)
    assert len(asked) == 5


def test_cuda_asked_by_name_always_asks_and_refuses(no_cuda_libraries, tmp_path, capsys):
    """The record changes only ``auto``: ``--provider cuda`` asks every time and stops in one line when CUDA fails."""
    asked, model = no_cuda_libraries
    _extract(model, tmp_path, capsys)
    assert cuda_kept.unusable() and len(asked) == 1
    for n in (2, 3):
        assert (
            main(["extract", str(model), "--text", "the cat", "--provider", "cuda", "--out", str(tmp_path / "c.npz")])
            == 2
        )
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "CUDA was requested but onnxruntime could not use it" in err[0], err
        assert len(asked) == n


def test_nothing_is_kept_with_the_cache_off_or_no_build_to_name(no_cuda_libraries, tmp_path, capsys, monkeypatch):
    asked, model = no_cuda_libraries
    monkeypatch.setenv("ATTNVIZ_CACHE_DIR", "off")
    _extract(model, tmp_path, capsys)
    _extract(model, tmp_path, capsys)
    assert len(asked) == 2
    monkeypatch.setenv("ATTNVIZ_CACHE_DIR", str(tmp_path / "cache2"))
    monkeypatch.setattr(ort_build, "installed", lambda: None)
    _extract(model, tmp_path, capsys)
    _extract(model, tmp_path, capsys)
    assert len(asked) == 4 and not cuda_kept.unusable()


def test_a_session_that_ran_on_cuda_keeps_nothing(no_cuda_libraries, tmp_path, monkeypatch):
    """Only the negative is kept: CUDA working once is no promise (a record of it would skip nothing anyway)."""
    asked, model = no_cuda_libraries

    class OnCuda:
        def __init__(self, sess):
            self.sess = sess

        def get_providers(self):
            return [session.CUDA, session.CPU]

    def with_libraries(model, so, options):
        asked.append("cuda")
        return OnCuda(ort.InferenceSession(model, so, providers=[session.CPU]))

    monkeypatch.setattr(session, "_cuda_session", with_libraries)
    for n in (1, 2):
        sess, note = session.make_session(str(model), "auto")
        assert isinstance(sess, OnCuda) and note == "" and len(asked) == n
    assert not cuda_kept.unusable()
    # CUDA installed where nothing the record names changed: a day later ``auto`` asks again, and a ``cuda``
    # session that runs there forgets the record at once
    cuda_kept.keep_unusable()
    assert cuda_kept.unusable()
    later = cuda_kept._now() + cuda_kept.MAX_AGE_S + 1
    monkeypatch.setattr(cuda_kept, "_now", lambda: later)
    assert not cuda_kept.unusable()
    cuda_kept.keep_unusable()
    assert cuda_kept.unusable() and session.make_session(str(model), "auto")[1] == session.CUDA_UNUSABLE
    assert len(asked) == 2
    sess, _ = session.make_session(str(model), "cuda")
    assert isinstance(sess, OnCuda) and len(asked) == 3 and not cuda_kept.unusable()
    sess, _ = session.make_session(str(model), "auto")
    assert isinstance(sess, OnCuda) and len(asked) == 4
    with pytest.raises(AttnvizError, match="unknown provider"):
        session.make_session(str(model), "gpu")
