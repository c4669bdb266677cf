"""``sequence-classification``: is a strict majority of the digits >= 5?

Sequences of digits 0-9, lengths 3-12 (uniform), right-padded.  Class ``A`` when strictly more than half of
the entries are >= 5, else ``B`` (ties go to ``B``).  An encoder with mean pooling over real tokens.
Test sequences that also occur in the training set are dropped, so the held-out split is truly unseen.
"""

from __future__ import annotations

import numpy as np

from attnviz.training.config import preset_configs
from attnviz.training.tasks import Task, predict, split_seed

PAD = "<pad>"
VOCAB = [PAD] + [str(d) for d in range(10)]  # id = digit + 1
LABELS = ["A", "B"]
MIN_LEN, MAX_LEN = 3, 12


def label_of(digits) -> int:
    """0 (A) when a strict majority of the digits is >= 5, else 1 (B)."""
    digits = np.asarray(digits)
    return 0 if 2 * int((digits >= 5).sum()) > len(digits) else 1


def generate(n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(MIN_LEN, MAX_LEN + 1, size=n)
    return [rng.integers(0, 10, size=int(t)) for t in lengths]


def encode(seqs: list[np.ndarray]) -> dict[str, np.ndarray]:
    n = len(seqs)
    ids = np.zeros((n, MAX_LEN), dtype=np.int64)
    mask = np.zeros((n, MAX_LEN), dtype=np.int64)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s + 1
        mask[i, : len(s)] = 1
    labels = np.array([label_of(s) for s in seqs], dtype=np.int64)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


class SequenceClassification(Task):
    name = "sequence-classification"
    summary = "digit sequences (0-9, length 3-12): class A iff a strict majority is >= 5 (encoder)"
    target = "accuracy >= 0.99 on held-out sequences"

    def configs(self, preset):
        model = dict(
            arch="encoder",
            vocab_size=len(VOCAB),
            head="classify",
            n_classes=2,
            pool="mean",
            max_len=MAX_LEN + 4,
            positions="sinusoidal",
        )
        train = dict(task=self.name)
        if preset == "demo":
            train.update(steps=1000, batch_size=64, lr=1e-3, n_train=20000, n_test=2000)
        return preset_configs(preset, model, train)

    def make_split(self, split, mcfg, tcfg):
        if split == "train":
            return encode(generate(tcfg.n_train, split_seed(self.name, "train")))
        train_keys = {tuple(s) for s in generate(tcfg.n_train, split_seed(self.name, "train"))}
        test = [s for s in generate(tcfg.n_test * 2, split_seed(self.name, "test")) if tuple(s) not in train_keys]
        return encode(test[: tcfg.n_test])

    def evaluate(self, runner, data, mcfg):
        pred = predict(runner, data, mcfg).argmax(-1)
        return {"accuracy": float((pred == data["labels"]).mean()), "n": int(len(pred))}

    def metadata(self, mcfg):
        return {
            "vocab": VOCAB,
            "labels": LABELS,
            "special": {"pad": 0},
            "tokenize": "whitespace",
            "sample": {"text": "7 2 9 5 1 8 6 3"},
        }

    def example_feeds(self, mcfg, tcfg):
        return {
            k: v for k, v in encode([np.array([7, 2, 9, 5, 1, 8, 6, 3]), np.array([1, 2, 8])]).items() if k != "labels"
        }
