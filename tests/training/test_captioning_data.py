"""Captioning scenes: gold boxes contain the drawn objects; captions follow the rule; determinism."""

import random

import numpy as np

from attnviz.training import data_captioning as dc


def test_gold_boxes_contain_the_drawn_pixels():
    for s in dc.make_scenes(200, seed=1):
        assert s.image.dtype == np.uint8 and s.image.shape == (64, 64, 3)
        bg = np.all(s.image == dc.BACKGROUND, axis=-1)
        covered = np.zeros(bg.shape, bool)
        for (colour, _shape, (x0, y0, x1, y1)), mask in zip(s.objects, s.masks):
            ys, xs = np.nonzero(mask)
            assert mask.sum() > 20
            assert xs.min() >= x0 and xs.max() < x1 and ys.min() >= y0 and ys.max() < y1
            assert (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1) == (x0, y0, x1, y1)  # tight
            assert np.all(s.image[mask] == dc.COLOURS[colour])
            covered |= mask
        assert np.array_equal(covered, ~bg)  # every non-background pixel belongs to an object
        assert not (s.masks[0] & s.masks[1]).any()


def test_caption_follows_the_rule():
    vocab = set(dc.vocabulary())
    for s in dc.make_scenes(200, seed=2):
        (c1, s1, b1), (c2, s2, b2) = s.objects
        assert s.words[:3] == ("a", c1, s1) and s.words[-3:] == ("a", c2, s2)
        assert set(s.words) <= vocab
        assert (b1[2] - b1[0]) >= (b2[2] - b2[0])  # the large object is named first
        rel = " ".join(s.words[3:-3])
        cx1, cy1, cx2, cy2 = (b1[0] + b1[2]) / 2, (b1[1] + b1[3]) / 2, (b2[0] + b2[2]) / 2, (b2[1] + b2[3]) / 2
        expected = {"to the left of": cx1 < cx2, "to the right of": cx1 > cx2, "above": cy1 < cy2, "below": cy1 > cy2}
        assert expected[rel]
        horizontal = abs(cx2 - cx1) > abs(cy2 - cy1)
        assert horizontal == rel.startswith("to the")
        assert s.word_boxes == {1: b1, 2: b1, len(s.words) - 2: b2, len(s.words) - 1: b2}


def test_scenes_are_deterministic_and_split_is_disjoint():
    a, b = dc.make_scenes(10, 5), dc.make_scenes(10, 5)
    assert all(np.array_equal(x.image, y.image) and x.words == y.words for x, y in zip(a, b))
    train, test = dc.scene_split(100, 30, seed=0)
    seen = {(s.caption, s.boxes) for s in train}
    assert sum((s.caption, s.boxes) in seen for s in test) == 0


def test_noise_stays_off_the_objects():
    s = dc.make_scene(random.Random(0), noise=20)
    for (colour, _, _), m in zip(s.objects, s.masks):
        assert np.all(s.image[m] == dc.COLOURS[colour])
