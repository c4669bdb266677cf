"""The window's stand-in models satisfy the runtime's model Protocol, so the window touches them exactly as it
touches a real model (no probing for members a stand-in might lack)."""

from __future__ import annotations

import pytest
from fakes import FakeModel

from attnviz.runtime.protocol import METHODS, PROPERTIES, AttnModel


@pytest.mark.parametrize("kind", ["encoder", "encoder-decoder", "vision", "vision-decoder", "none", "broken"])
def test_every_fake_kind_is_a_model_of_the_protocol(kind):
    m = FakeModel(f"{kind}.onnx", kind=kind)
    assert isinstance(m, AttnModel)
    assert all(hasattr(m, p) for p in PROPERTIES) and all(callable(getattr(m, f)) for f in METHODS)
    assert list(m.roles) == [i.name for i in m.inputs] and m.cache_stepper() is None and m.pair_with_encoder() is None


def test_a_fake_missing_a_member_is_not_a_model():
    m = FakeModel("m.onnx")
    del m.roles  # an instance attribute: the stand-in no longer offers the whole surface
    assert not isinstance(m, AttnModel)
