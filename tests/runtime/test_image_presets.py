"""Image normalisation is never silent: the preset used is named in the run info, presets are selectable,
and a preset's maps equal a hand-normalised run."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from attnviz.core import preprocess
from attnviz.runtime import open_model


@pytest.fixture()
def png(tmp_path):
    rng = np.random.default_rng(1)
    p = tmp_path / "img.png"
    Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(p)  # the input's own size: no resize
    return p


def test_model_without_metadata_says_which_preset_it_got(hf_export, png):
    path, *_ = hf_export("vit", "legacy", "eager", 17)  # a plain export: no attnviz.image metadata
    r = open_model(path, provider="cpu").analyze(image=png)
    assert r.info["image_preprocessing"].startswith(
        "0.5 (mean 0.5/0.5/0.5, std 0.5/0.5/0.5), 32×32, from default preset"
    )
    assert any("0.5 preset" in n and "ImageNet" in n for n in r.info["notes"])


@pytest.mark.parametrize("name", ["imagenet", "clip", "none"])
def test_a_chosen_preset_equals_hand_normalisation(hf_export, png, name):
    path, *_ = hf_export("vit", "legacy", "eager", 17)
    m = open_model(path, provider="cpu")
    mean, std = preprocess.stats(name)
    r = m.analyze(image=png, image_mean=mean, image_std=std)
    assert r.info["image_preprocessing"].startswith(f"{name} (") and "from given" in r.info["image_preprocessing"]
    x = np.asarray(Image.open(png).convert("RGB"), np.float32) / 255
    hand = {
        "imagenet": ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        "clip": ([0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]),
        "none": ([0, 0, 0], [1, 1, 1]),
    }[name]
    x = ((x - np.array(hand[0], np.float32)) / np.array(hand[1], np.float32)).transpose(2, 0, 1)[None]
    ref = m.run({"pixel_values": x.astype(np.float32)})
    for a, b in zip(r.maps, ref.maps):
        np.testing.assert_allclose(a.array(), b.array(), atol=1e-6)
    if name == "imagenet":  # and it matters: the default 0.5 gives different maps
        plain = m.analyze(image=png)
        assert max(float(np.abs(a.array() - b.array()).max()) for a, b in zip(plain.maps, r.maps)) > 1e-3


def test_preset_names():
    assert preprocess.name_of([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]) == "imagenet"
    assert preprocess.name_of([0.1, 0.2, 0.3], [1, 1, 1]) == "custom"
    assert preprocess.stats("imagenet", 1) == ([pytest.approx(0.449)], [pytest.approx(0.226)])
