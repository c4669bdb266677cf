"""Data generators: labels follow each task's rule, splits are deterministic and held out."""

import numpy as np
import pytest

pytest.importorskip("torch")

from attnviz.training.tasks import (
    forecasting,
    get_task,
    sequence_classification,
    vit_classification,
)


def _split(name, split, preset="tiny"):
    task = get_task(name)
    mc, tc = task.configs(preset)
    return task.make_split(split, mc, tc), mc, tc


def test_sequence_labels_follow_rule():
    data, _, _ = _split("sequence-classification", "train")
    for ids, mask, label in zip(data["input_ids"], data["attention_mask"], data["labels"]):
        n = int(mask.sum())
        assert 3 <= n <= 12 and mask[:n].all() and not mask[n:].any()
        digits = ids[:n] - 1
        assert digits.min() >= 0 and digits.max() <= 9 and (ids[n:] == 0).all()
        big = int((digits >= 5).sum())
        assert label == (0 if big > n - big else 1)  # A iff strict majority >= 5; ties are B
    assert 0.3 < data["labels"].mean() < 0.7


def test_sequence_rule_edge_cases():
    assert sequence_classification.label_of([5, 5, 0]) == 0
    assert sequence_classification.label_of([5, 0]) == 1  # tie -> B
    assert sequence_classification.label_of([4, 4, 9]) == 1


def test_sequence_test_split_is_held_out_and_deterministic():
    train, _, _ = _split("sequence-classification", "train")
    test, _, _ = _split("sequence-classification", "test")
    seen = {tuple(r[m == 1]) for r, m in zip(train["input_ids"], train["attention_mask"])}
    assert not any(tuple(r[m == 1]) in seen for r, m in zip(test["input_ids"], test["attention_mask"]))
    again, _, _ = _split("sequence-classification", "test")
    assert all(np.array_equal(test[k], again[k]) for k in test)


def test_forecasting_series():
    data, mc, _ = _split("forecasting", "test")
    assert data["series"].shape[1] == forecasting.CONTEXT and data["targets"].shape[1] == mc.horizon
    assert data["series"].dtype == np.float32
    assert np.abs(data["series"]).max() < 3.5  # at most 3 components of amplitude <= 1, plus noise
    # the continuation is smooth: the first target is near the last observed value
    assert np.abs(data["targets"][:, 0] - data["series"][:, -1]).max() < 3 * 0.8 + 0.2


def test_vit_images_show_their_shape():
    rng = np.random.default_rng(0)
    for _ in range(40):
        img, label, (x0, y0, x1, y1) = vit_classification.render(rng, 32)
        assert img.shape == (32, 32, 3) and img.dtype == np.uint8 and 0 <= label < 4
        # the shape's colour differs from the background far more than the pixel noise: the box holds it
        bg = np.median(img.reshape(-1, 3)[np.r_[0, 31, 32 * 31, 32 * 32 - 1]], axis=0)
        diff = np.abs(img.astype(int) - bg).sum(-1) > 60
        ys, xs = np.nonzero(diff)
        assert len(ys) > 0
        assert ys.min() >= y0 - 1 and ys.max() <= y1 + 1 and xs.min() >= x0 - 1 and xs.max() <= x1 + 1


def test_toy_caption_boxes_contain_objects_and_caption_matches():
    task = get_task("toy-caption")
    data, mc, _ = _split("toy-caption", "train")
    pix = data["pixel_values"]
    for i in range(50):
        x0, y0, x1, y1 = data["boxes"][i]
        bright = pix[i].mean(0) > 0  # shape is bright on a dark background
        ys, xs = np.nonzero(bright)
        assert ys.min() >= y0 and ys.max() <= y1 and xs.min() >= x0 and xs.max() <= x1
        words = [task.vocab[t] for t in data["labels"][i][:3]]
        half = mc.image_size // 2
        assert words[1] == ("top" if y1 < half else "bottom") and words[2] == ("left" if x1 < half else "right")


def test_toy_reverse_targets():
    data, _, _ = _split("toy-reverse", "train")
    for ids, mask, lab in zip(data["input_ids"][:50], data["attention_mask"][:50], data["labels"][:50]):
        n = int(mask.sum())
        assert list(lab[:n]) == list(ids[:n][::-1]) and lab[n] == 2


def test_trim_padding_keeps_real_tokens():
    from attnviz.training.tasks import trim_padding

    data, _, _ = _split("toy-reverse", "train")
    b = {k: v[:4] for k, v in data.items()}
    t = trim_padding(b)
    n = int(b["attention_mask"].sum(1).max())
    assert t["input_ids"].shape[1] == n and (t["input_ids"] == b["input_ids"][:, :n]).all()
    assert (b["attention_mask"][:, n:] == 0).all()
    m = t["labels"].shape[1]
    assert (b["labels"][:, m:] == -100).all() and (t["labels"] != -100).any(0).all()
    assert t["decoder_input_ids"].shape[1] == m


def test_attention_groups():
    from attnviz.training.config import ModelConfig
    from attnviz.training.tasks import attention_groups

    mc = ModelConfig(arch="encoder-decoder", n_layers=3, n_dec_layers=2)
    g = attention_groups(["e0", "e1", "e2", "s0", "c0", "s1", "c1"], mc)
    assert g == {"encoder": ["e0", "e1", "e2"], "decoder_self": ["s0", "s1"], "cross": ["c0", "c1"]}
    mc = ModelConfig(arch="image-decoder", image_encoder="cnn", n_dec_layers=2)
    assert attention_groups(["s0", "c0", "s1", "c1"], mc)["cross"] == ["c0", "c1"]
