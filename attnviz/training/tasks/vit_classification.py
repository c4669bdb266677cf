"""``vit-classification``: which shape is drawn? circle, square, triangle or cross.

Images are drawn with Pillow: one filled shape of random size, position and bright colour on a dark, randomly
tinted background, with mild pixel noise.  A ViT (patches + CLS token) classifies from CLS.  Pixels are scaled to
[0, 1] and normalised with mean 0.5 / std 0.5 per channel (recorded in ``attnviz.image``).
"""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from attnviz.training.config import preset_configs
from attnviz.training.tasks import Task, predict, split_seed

LABELS = ["circle", "square", "triangle", "cross"]
MEAN = [0.5, 0.5, 0.5]
STD = [0.5, 0.5, 0.5]


def image_metadata(mcfg, channels: int, offset: int) -> dict:
    """The ``image`` section of an exported model's metadata: input size, normalisation and the patch grid
    (``offset`` non-patch tokens in front: 1 for a CLS token, 0 for a captioner's encoder)."""
    return {
        "size": [mcfg.image_size, mcfg.image_size],
        "channels": channels,
        "mean": MEAN,
        "std": STD,
        "grid": [mcfg.grid, mcfg.grid],
        "offset": offset,
    }


def _background(rng):
    return rng.integers(0, 80, size=3)  # dark, any tint


def _colour(rng, avoid):
    while True:  # a bright colour far from the background
        c = rng.integers(0, 256, size=3)
        if c.max() >= 170 and np.abs(c - avoid).sum() > 200:
            return c


def draw_shape(draw: ImageDraw.ImageDraw, shape: str, box: tuple[int, int, int, int], fill) -> None:
    """Draw one filled ``shape`` inside ``box`` = (x0, y0, x1, y1), inclusive pixel bounds."""
    x0, y0, x1, y1 = box
    fill = tuple(int(v) for v in fill)
    if shape == "circle":
        draw.ellipse(box, fill=fill)
    elif shape == "square":
        draw.rectangle(box, fill=fill)
    elif shape == "triangle":
        draw.polygon([((x0 + x1) / 2, y0), (x1, y1), (x0, y1)], fill=fill)
    elif shape == "cross":
        w = max(2, (x1 - x0) // 3)
        cx, cy = (x0 + x1) // 2, (y0 + y1) // 2
        draw.rectangle((cx - w // 2, y0, cx - w // 2 + w - 1, y1), fill=fill)
        draw.rectangle((x0, cy - w // 2, x1, cy - w // 2 + w - 1), fill=fill)
    else:
        raise ValueError(shape)


def render(rng: np.random.Generator, size: int) -> tuple[np.ndarray, int, tuple[int, int, int, int]]:
    """One image ``[size, size, 3]`` uint8, its label and the shape's box (x0, y0, x1, y1)."""
    label = int(rng.integers(0, len(LABELS)))
    bg = _background(rng)
    img = Image.new("RGB", (size, size), tuple(int(v) for v in bg))
    side = int(rng.integers(int(size * 0.35), int(size * 0.75) + 1))
    x0 = int(rng.integers(0, size - side + 1))
    y0 = int(rng.integers(0, size - side + 1))
    box = (x0, y0, x0 + side - 1, y0 + side - 1)
    draw_shape(ImageDraw.Draw(img), LABELS[label], box, _colour(rng, avoid=bg))
    a = np.asarray(img, dtype=np.int16) + rng.integers(-12, 13, size=(size, size, 3))
    return np.clip(a, 0, 255).astype(np.uint8), label, box


def to_pixels(images: np.ndarray) -> np.ndarray:
    """``[N, H, W, 3]`` uint8 -> ``[N, 3, H, W]`` float32, normalised."""
    x = images.astype(np.float32).transpose(0, 3, 1, 2) / 255.0
    return (x - np.array(MEAN, np.float32)[:, None, None]) / np.array(STD, np.float32)[:, None, None]


def generate(n: int, seed: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    imgs = np.empty((n, size, size, 3), dtype=np.uint8)
    labels = np.empty(n, dtype=np.int64)
    for i in range(n):
        imgs[i], labels[i], _ = render(rng, size)
    return imgs, labels


class VitClassification(Task):
    name = "vit-classification"
    summary = "ViT: classify drawn shapes (circle, square, triangle, cross) in small RGB images"
    target = "accuracy >= 0.99 on held-out images"
    sample_path = "resources/samples/vit-classification.png"

    def configs(self, preset):
        model = dict(arch="vit", n_classes=len(LABELS), channels=3, cls_token=True, positions="learned")
        train = dict(task=self.name)
        if preset == "demo":
            model.update(image_size=32, patch_size=4)
            train.update(steps=2500, batch_size=64, lr=2e-3, warmup=100, eval_every=500, n_train=20000, n_test=2000)
        else:
            model.update(image_size=16, patch_size=4)
        return preset_configs(preset, model, train)

    def make_split(self, split, mcfg, tcfg):
        n = tcfg.n_train if split == "train" else tcfg.n_test
        imgs, labels = generate(n, split_seed(self.name, split), mcfg.image_size)
        return {"pixel_values": to_pixels(imgs), "labels": labels}

    def evaluate(self, runner, data, mcfg):
        pred = predict(runner, data, mcfg).argmax(-1)
        return {"accuracy": float((pred == data["labels"]).mean()), "n": int(len(pred))}

    def metadata(self, mcfg):
        return {
            "labels": LABELS,
            "image": image_metadata(mcfg, mcfg.channels, offset=1),
            "sample": {"image": self.sample_path},
        }

    def sample_image(self, mcfg) -> np.ndarray:
        """The sample input (``[H, W, 3]`` uint8): the first triangle clear of the border, from the sample seed."""
        rng = np.random.default_rng(split_seed(self.name, "sample"))
        while True:
            img, label, (x0, y0, x1, y1) = render(rng, mcfg.image_size)
            if LABELS[label] == "triangle" and min(x0, y0) >= 3 and max(x1, y1) <= mcfg.image_size - 4:
                return img
