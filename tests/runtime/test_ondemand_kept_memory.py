"""The sessions beside kept Q and Kᵀ (runtime/kept.py: a site's head model and its pooling twin) do not each keep
their peak: on the CPU they share one arena (the isolation child's, or one registered in this process), on CUDA
their arena grows by exactly what a request asks and is given back when it ends (runtime/session.py ``helper``,
:func:`~attnviz.runtime.session.release_options`).  Read back from onnxruntime where the sessions live (the child
or this process), after they served heads and the overview, against the on-demand session itself, which keeps an
arena of its own in-process and the default CUDA arena."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx_builders import tiny_text_model

from attnviz.core import view as vm
from attnviz.runtime import model as rm
from attnviz.runtime.isolation import gpu_present
from attnviz.runtime.kept import HelperMemory

CUDA = "CUDAExecutionProvider" in ort.get_available_providers() and gpu_present()


def _overview(tmp_path, provider: str, monkeypatch, kept_requests: list):
    """A tiny model's on-demand result kept on ``provider``'s device, a head of each site drawn and the overview
    pooled; the model, the on-demand session and the site sessions that served them."""
    monkeypatch.setenv("ATTNVIZ_QK_DEVICE", "on")
    path = tiny_text_model(tmp_path / "lm.onnx", causal=True, classifier=False, heads=4, d=16)
    m = rm.open_model(path, provider=provider)
    r = m.run({"input_ids": np.array([[1, 3, 4, 5, 6, 7, 2]])}, mode="ondemand")
    assert [x.head(0, 1).shape for x in r.maps] == [(7, 7)] * 2
    thumbs = vm.thumbnails(r, vm.Selection(), use_cache=False)
    assert len(thumbs) == 8  # two sites × four heads
    helpers = list(dict.fromkeys(kept_requests))
    assert len(helpers) == 4  # per site its head model (a head drawn) and its pooling twin (the overview)
    return m, m._session("ondemand")[0], helpers


def test_site_sessions_share_one_cpu_arena(tmp_path, placement, monkeypatch, kept_requests):
    _, main, helpers = _overview(tmp_path, "cpu", monkeypatch, kept_requests)
    for sess in helpers:
        assert sess.helper_memory() == HelperMemory(cpu_arena=True, env_allocators=True, cuda_extend="", release="")
    # the on-demand session: the child's shared arena too, an arena of its own in-process (the readback tells apart)
    assert main.helper_memory() == HelperMemory(True, placement == "isolated", "", "")


@pytest.mark.skipif(not CUDA, reason="needs onnxruntime's CUDA provider and an NVIDIA GPU")
def test_site_sessions_give_back_their_gpu_arena_after_each_request(tmp_path, placement, monkeypatch, kept_requests):
    _, main, helpers = _overview(tmp_path, "cuda", monkeypatch, kept_requests)
    for sess in helpers:
        assert sess.helper_memory() == HelperMemory(True, True, "kSameAsRequested", "gpu:0")
    own = main.helper_memory()  # the on-demand session keeps onnxruntime's default arena (the next power of two)
    assert own.cuda_extend not in ("", "kSameAsRequested") and own.release == ""
