"""Shared by the one-request generation tests (a VLM's chain, Whisper's folder): the real calls counted, a model
that always makes the asked number of tokens, and two generations compared bit for bit."""

from __future__ import annotations

import shutil

import numpy as np

from attnviz.runtime import host, open_model


def count_ops(monkeypatch) -> list[str]:
    """The ops sent to the crash-isolation child, in order (the real calls, counted)."""
    sent: list[str] = []
    call = host._Host.call

    def counting(self, op, *args, **kwargs):
        sent.append(op)
        return call(self, op, *args, **kwargs)

    monkeypatch.setattr(host._Host, "call", counting)
    return sent


def count_calls(monkeypatch, cls, name: str) -> list[int]:
    """How many times ``cls.name`` ran (the real one): ``[n]``."""
    count = [0]
    real = getattr(cls, name)

    def counting(self, *args, **kwargs):
        count[0] += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, counting)
    return count


def open_without_eos(path):
    m = open_model(path, provider="cpu")
    m.meta["special"] = {k: v for k, v in m.meta["special"].items() if k != "eos"}  # every run makes all its tokens
    return m


def same_generation(a, b) -> None:
    assert a.info["generated_ids"] == b.info["generated_ids"]
    assert [s.label for s in a.sites] == [s.label for s in b.sites]
    for x, y, s in zip(a.maps, b.maps, a.sites):
        x, y = x.array(), y.array()
        assert x.dtype == y.dtype and x.shape == y.shape, s.label
        np.testing.assert_array_equal(x, y, err_msg=s.label)


def nan_llava_copy(repo, dst):
    """A copy of a tiny LLaVA repository whose decoder's first layer norm is NaN: its attention is NaN while the
    vision tower's features stay finite (the splice passes)."""
    import onnx
    from onnx import numpy_helper

    shutil.copytree(repo, dst)
    path = dst / "onnx" / "decoder_model_merged.onnx"
    proto = onnx.load(str(path))
    w = next(t for t in proto.graph.initializer if t.name == "lm.layers.0.input_layernorm.weight")
    w.CopyFrom(numpy_helper.from_array(np.full(numpy_helper.to_array(w).shape, np.nan, np.float32), w.name))
    onnx.save(proto, str(path))
    return dst
