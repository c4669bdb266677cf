"""Toy tasks with known answers, for tests and CI of the encoder-decoder and image-decoder architectures.

``toy-reverse`` (encoder-decoder): reverse a digit string; gold alignment target i <-> source n-1-i, so the
    cross-attention can be scored (``alignment_accuracy``: argmax over source of the head-averaged
    last-layer cross-attention hits the gold position).
``toy-caption`` (image-decoder, CNN grid by default): one drawn shape in one image quadrant; the caption is
    ``<shape> <top|bottom> <left|right>``.
"""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from attnviz.runtime.sample import RUN_SAMPLE
from attnviz.training.config import preset_configs
from attnviz.training.runners import batched, take
from attnviz.training.tasks import Task, attention_groups, feeds_of, greedy_decode, split_seed, trim_padding
from attnviz.training.tasks.vit_classification import LABELS as SHAPES
from attnviz.training.tasks.vit_classification import draw_shape, image_metadata, to_pixels

SPECIAL = ["<pad>", "<bos>", "<eos>"]
PAD, BOS, EOS = 0, 1, 2


def _exact(gen: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per example: generated ids (after BOS) equal the label ids up to and including EOS."""
    ok = np.ones(len(gen), dtype=bool)
    for i in range(len(gen)):
        want = labels[i][labels[i] != -100]
        got = gen[i, 1 : 1 + len(want)]
        ok[i] = len(got) == len(want) and bool((got == want).all())
    return ok


class ToyReverse(Task):
    name = "toy-reverse"
    summary = "toy: reverse a digit string (encoder-decoder, known gold alignment; for tests)"
    target = "exact match ~1.0"
    vocab = SPECIAL + [str(d) for d in range(10)]
    min_len, max_len = 3, 8

    def configs(self, preset):
        model = dict(arch="encoder-decoder", vocab_size=len(self.vocab), head="lm", max_len=16)
        train = dict(task=self.name)
        if preset == "demo":
            train.update(steps=1500, n_train=10000, n_test=500)
        return preset_configs(preset, model, train)

    def make_split(self, split, mcfg, tcfg):
        n = tcfg.n_train if split == "train" else tcfg.n_test
        rng = np.random.default_rng(split_seed(self.name, split))
        L = self.max_len
        ids = np.zeros((n, L), np.int64)
        mask = np.zeros((n, L), np.int64)
        dec = np.zeros((n, L + 1), np.int64)
        labels = np.full((n, L + 1), -100, np.int64)
        align = np.zeros((n, L + 1, L), np.uint8)  # guided-alignment labels (training/guided.py), predict rows
        for i in range(n):
            t = int(rng.integers(self.min_len, L + 1))
            s = rng.integers(0, 10, size=t) + len(SPECIAL)
            ids[i, :t], mask[i, :t] = s, 1
            r = s[::-1]
            dec[i, 0], dec[i, 1 : t + 1] = BOS, r
            labels[i, :t], labels[i, t] = r, EOS
            align[i, np.arange(t), t - 1 - np.arange(t)] = 1  # decoder row j predicts source token n-1-j
        return {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": dec, "labels": labels, "align": align}

    def evaluate(self, runner, data, mcfg):
        n = len(data["labels"])
        exact, hits, total = [], 0, 0
        for s in batched(n, 256):
            b = take(data, s)
            enc = {k: b[k] for k in ("input_ids", "attention_mask")}
            exact.append(_exact(greedy_decode(runner, enc, BOS, EOS, self.max_len + 1), b["labels"]))
            cross = attention_groups(runner.attention(feeds_of(b, mcfg)), mcfg)["cross"][-1].mean(
                1
            )  # (B, Tt, Ts) last layer
            lens = b["attention_mask"].sum(1)
            for i, t in enumerate(lens):
                pred = cross[i, :t, :t].argmax(-1)  # decoder position j predicts target j
                hits += int((pred == t - 1 - np.arange(t)).sum())
                total += int(t)
        return {"exact_match": float(np.concatenate(exact).mean()), "alignment_accuracy": hits / max(total, 1), "n": n}

    def collate(self, batch):
        out = trim_padding(batch)
        out["align"] = out["align"][:, : out["labels"].shape[1], : out["input_ids"].shape[1]]
        return out

    def metadata(self, mcfg):
        return {
            "vocab": self.vocab,
            "special": {"pad": PAD, "bos": BOS, "eos": EOS},
            "tokenize": "whitespace",
            "sample": {"text": "3 1 4 1 5 9"},
        }


class ToyCaption(Task):
    name = "toy-caption"
    summary = "toy: caption one drawn shape with its quadrant (image-decoder; for tests)"
    target = "exact match ~1.0"
    vocab = SPECIAL + SHAPES + ["top", "bottom", "left", "right"]

    def configs(self, preset):
        model = dict(
            arch="image-decoder",
            image_encoder="cnn",
            tgt_vocab_size=len(self.vocab),
            vocab_size=len(self.vocab),
            head="lm",
            max_len=8,
            image_size=16,
            patch_size=4,
        )
        train = dict(task=self.name)
        if preset == "demo":
            model.update(image_size=32, patch_size=8)
            train.update(steps=1000, n_train=8000, n_test=500)
        return preset_configs(preset, model, train)

    def make_split(self, split, mcfg, tcfg):
        n = tcfg.n_train if split == "train" else tcfg.n_test
        rng = np.random.default_rng(split_seed(self.name, split))
        imgs = np.zeros((n, mcfg.image_size, mcfg.image_size, 3), np.uint8)
        boxes = np.zeros((n, 4), np.int64)
        dec = np.zeros((n, 4), np.int64)
        labels = np.full((n, 4), -100, np.int64)
        for i in range(n):
            imgs[i], boxes[i], words = self.scene(rng, mcfg.image_size)
            ids = [self.vocab.index(w) for w in words]
            dec[i] = [BOS] + ids
            labels[i] = ids + [EOS]
        return {"pixel_values": to_pixels(imgs), "decoder_input_ids": dec, "labels": labels, "boxes": boxes}

    @staticmethod
    def scene(rng: np.random.Generator, size: int) -> tuple[np.ndarray, tuple[int, int, int, int], list[str]]:
        """One image: a shape in a random quadrant; its box and its caption words (shape, row, column)."""
        half = size // 2
        shape, row, col = int(rng.integers(4)), int(rng.integers(2)), int(rng.integers(2))
        img = Image.new("RGB", (size, size), (20, 20, 20))
        side = int(rng.integers(max(3, half // 2), half + 1))
        x0 = col * half + int(rng.integers(0, half - side + 1))
        y0 = row * half + int(rng.integers(0, half - side + 1))
        box = (x0, y0, x0 + side - 1, y0 + side - 1)
        draw_shape(ImageDraw.Draw(img), SHAPES[shape], box, (230, 200, 60))
        return np.asarray(img), box, [SHAPES[shape], ("top", "bottom")[row], ("left", "right")[col]]

    def sample_image(self, mcfg) -> np.ndarray:
        """The run's sample.png (`attnviz train` writes it beside the model), from a split of its own."""
        return self.scene(np.random.default_rng(split_seed(self.name, "sample")), mcfg.image_size)[0]

    def evaluate(self, runner, data, mcfg):
        n = len(data["labels"])
        exact = []
        for s in batched(n, 256):
            b = take(data, s)
            exact.append(_exact(greedy_decode(runner, {"pixel_values": b["pixel_values"]}, BOS, EOS, 4), b["labels"]))
        return {"exact_match": float(np.concatenate(exact).mean()), "n": n}

    def metadata(self, mcfg):
        return {
            "vocab": self.vocab,
            "special": {"pad": PAD, "bos": BOS, "eos": EOS},
            "tokenize": "whitespace",
            "image": image_metadata(mcfg, 3, offset=0),
            "sample": {"image": RUN_SAMPLE, "generate": 3},  # written beside the model by `attnviz train`
        }
