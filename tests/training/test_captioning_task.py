"""The captioning task's plumbing with an oracle runner: perfect captions and attention -> perfect scores."""

import numpy as np
import pytest

from attnviz.training.tasks.captioning import EOS, VOCAB, Captioning


class OracleRunner:
    def __init__(self, data, mcfg, peak_box=True):
        self.data, self.mcfg, self.peak_box = data, mcfg, peak_box
        self.rows = {d.tobytes(): i for i, d in enumerate(data["pixel_values"])}
        self.input_names = ("pixel_values", "decoder_input_ids")

    def _row(self, px):
        return self.rows[np.ascontiguousarray(px).tobytes()]

    def logits(self, feeds):
        dec = feeds["decoder_input_ids"]
        out = np.zeros((*dec.shape, len(VOCAB)), np.float32)
        for b, px in enumerate(feeds["pixel_values"]):
            lab = self.data["labels"][self._row(px)]
            for t in range(dec.shape[1]):
                out[b, t, lab[t] if t < len(lab) and lab[t] >= 0 else EOS] = 1.0
        return out

    def attention(self, feeds):
        B, T = feeds["decoder_input_ids"].shape
        g, size, H = self.mcfg.grid, self.mcfg.image_size, self.mcfg.n_heads
        cross = np.full((B, H, T, g * g), 1e-3, np.float32)
        for b, px in enumerate(feeds["pixel_values"]):
            for w, x0, y0, x1, y1 in self.data["word_boxes"][self._row(px)]:
                cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
                if not self.peak_box:
                    cx, cy = size - 1 - cx, size - 1 - cy  # point at the mirrored spot
                cross[b, :, w, int(cy * g / size) * g + int(cx * g / size)] = 1.0
        cross /= cross.sum(-1, keepdims=True)
        n_patch = g * g
        n_enc = self.mcfg.n_layers if self.mcfg.image_encoder == "vit" else 0
        maps = [np.full((B, H, n_patch, n_patch), 1.0 / n_patch, np.float32) for _ in range(n_enc)]
        for _ in range(self.mcfg.n_dec_layers):
            maps += [np.full((B, H, T, T), 1.0 / T, np.float32), cross]
        return maps


@pytest.fixture(scope="module")
def cap():
    task = Captioning()
    mcfg, tcfg = task.configs("tiny")
    return task, mcfg, tcfg, task.make_split("test", mcfg, tcfg)


def test_arrays(cap):
    task, mcfg, tcfg, data = cap
    n = tcfg.n_test
    assert data["pixel_values"].shape == (n, 3, mcfg.image_size, mcfg.image_size)
    assert data["pixel_values"].dtype == np.float32
    assert (data["word_boxes"][:, :, 0] >= 1).all()
    words = [VOCAB[i] for i in data["labels"][0] if i >= 0]
    assert words[-1] == "<eos>" and words[0] == "a"


def test_oracle_scores_perfectly(cap):
    task, mcfg, tcfg, data = cap
    r = task.evaluate(OracleRunner(data, mcfg), data, mcfg)
    assert r["exact_match"] == 1.0
    assert r["pointing_best_layer"] == 1.0 and r["pointing"]["heads"][0] == [1.0] * mcfg.n_heads
    bad = task.evaluate(OracleRunner(data, mcfg, peak_box=False), data, mcfg)
    assert bad["pointing_best_layer"] < 0.5


def test_metadata(cap):
    task, mcfg, _, _ = cap
    meta = task.metadata(mcfg)
    assert meta["vocab"] == VOCAB and meta["image"]["grid"] == [mcfg.grid, mcfg.grid]
    assert task.sample_image(mcfg).shape == (mcfg.image_size, mcfg.image_size, 3)


def test_guided_pointing_labels_are_exactly_the_strict_hit_cells():
    """The captioner's guided-attention labels (align) mark the cells a strict pointing-game hit accepts."""
    from attnviz.training import data_captioning as dc
    from attnviz.training import metrics as M
    from attnviz.training.tasks.captioning import Captioning

    scenes = dc.make_scenes(6, 123, size=(64, 64))
    data = Captioning.encode(scenes, grid=8)
    checked = 0
    for i in range(len(scenes)):
        rows = set()
        for word, *box in data["word_boxes"][i]:
            if word < 0:
                continue
            rows.add(int(word))
            for cell in range(64):
                one_hot = np.zeros(64)
                one_hot[cell] = 1.0
                hit = M.pointing_hit(one_hot.reshape(8, 8), tuple(box), (64, 64))
                assert bool(data["align"][i, word, cell]) == hit
                checked += 1
            assert data["align"][i, word].any()  # every object covers at least one cell centre
        others = [r for r in range(data["align"].shape[1]) if r not in rows]
        assert not data["align"][i, others].any()  # words that name no object are not supervised
    assert checked == 6 * 4 * 64
