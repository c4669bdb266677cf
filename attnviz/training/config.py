"""Configuration dataclasses for models and training runs, plus named presets.

Every field carries a comment; presets are plain dicts of overrides (``tiny`` for tests and CI,
``demo`` for the models shipped in ``models/``).  Tasks start from a preset and add their own
sizes (vocabulary, classes, image size) in :meth:`attnviz.training.tasks.Task.configs`.
Configs round-trip through JSON (``to_dict`` / ``from_dict``) so a checkpoint or an ONNX file
can rebuild its model without any other file.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields

from attnviz import AttnvizError

ARCHS = ("encoder", "decoder", "encoder-decoder", "vit", "image-decoder")
POSITIONS = ("sinusoidal", "learned")
IMAGE_ENCODERS = ("vit", "cnn")
INPUT_KINDS = ("tokens", "series")
HEADS = ("classify", "lm", "forecast")
POOLS = ("mean", "cls", "last")
# which decoder row stands for which target token when reading cross-attention as an alignment
CONVENTIONS = ("input", "predict")
ALIGN_LABELS = ("gold",)  # a statistical aligner (eflomal) on the training split is not wired in yet
DEVICES = ("auto", "cpu", "cuda")  # TrainConfig.device (train --device takes the same)


@dataclass(frozen=True)
class Range:
    """The values a numeric config field may take: ``low <= v`` (``low < v`` when ``open_low``) and, when
    ``below`` is set, ``v < below``."""

    low: float
    below: float | None = None
    open_low: bool = False

    def holds(self, value) -> bool:
        above = value > self.low if self.open_low else value >= self.low
        return above and (self.below is None or value < self.below)

    def words(self) -> str:
        low = f"more than {self.low:g}" if self.open_low else f"at least {self.low:g}"
        return low + ("" if self.below is None else f" and below {self.below:g}")


POSITIVE, NON_NEGATIVE, FRACTION = Range(1), Range(0), Range(0, 1)
# fields outside these ranges failed deep inside torch or numpy (a ZeroDivisionError for n_heads=0, "Invalid learning
# rate" for lr=-1) with an internal error instead of a line naming the field (`attnviz train --set`)
MODEL_RANGES: dict[str, Range] = {
    "d_model": POSITIVE,
    "n_heads": POSITIVE,
    "n_layers": NON_NEGATIVE,  # 0 only for a cnn image encoder (checked in validate)
    "n_dec_layers": POSITIVE,
    "d_ff": POSITIVE,
    "dropout": FRACTION,
    "max_len": POSITIVE,
    "vocab_size": POSITIVE,
    "tgt_vocab_size": NON_NEGATIVE,
    "n_classes": Range(2),
    "horizon": POSITIVE,
    "image_size": POSITIVE,
    "channels": POSITIVE,
    "patch_size": POSITIVE,
}
TRAIN_RANGES: dict[str, Range] = {
    "steps": POSITIVE,
    "epochs": NON_NEGATIVE,
    "batch_size": POSITIVE,
    "lr": Range(0, open_low=True),
    "warmup": NON_NEGATIVE,
    "weight_decay": NON_NEGATIVE,
    "grad_clip": NON_NEGATIVE,
    "log_every": POSITIVE,
    "eval_every": NON_NEGATIVE,
    "checkpoint_every": NON_NEGATIVE,
    "snapshot_every": NON_NEGATIVE,
    "n_train": POSITIVE,
    "n_test": POSITIVE,
    "align_weight": NON_NEGATIVE,
    "label_smoothing": FRACTION,
    "validation": NON_NEGATIVE,
    "val_min_bleu": NON_NEGATIVE,
}


def check_ranges(what: str, cfg, ranges: dict[str, Range]) -> None:
    for name, allowed in ranges.items():
        value = getattr(cfg, name)
        if not allowed.holds(value):
            raise AttnvizError(f"{what} config: {name}={value!r} is out of range; it takes {allowed.words()}")


@dataclass
class ModelConfig:
    """The architecture of one model."""

    arch: str = "encoder"  # "encoder" | "decoder" (causal) | "encoder-decoder" | "vit" | "image-decoder"
    d_model: int = 64  # width of the residual stream
    n_heads: int = 4  # attention heads per layer (d_model must divide by it)
    n_layers: int = 2  # encoder layers (for arch "decoder": the decoder's layers); 0 = none (cnn image encoder)
    n_dec_layers: int = 2  # decoder layers of "encoder-decoder" / "image-decoder"; unused otherwise
    d_ff: int = 128  # hidden width of each feed-forward block
    dropout: float = 0.0  # dropout on attention probabilities, residual branches and embeddings (training only)
    positions: str = "sinusoidal"  # "sinusoidal" (fixed table) | "learned" (trained embedding per position)
    max_len: int = 64  # longest sequence the position table covers (source and target)
    vocab_size: int = 16  # input vocabulary (encoder / only stack); ignored for series and image inputs
    tgt_vocab_size: int = 0  # decoder vocabulary for "encoder-decoder" / "image-decoder"; 0 = same as vocab_size
    input_kind: str = "tokens"  # encoder/only-stack input: "tokens" (int64 ids) | "series" (float32 values)
    head: str = "classify"  # output head: "classify" (one label per sequence) | "lm" (logits per position) | "forecast"
    n_classes: int = 2  # labels of a "classify" head
    pool: str = "mean"  # how "classify" reads the sequence: "mean" over real tokens | "cls" (position 0) | "last"
    horizon: int = 8  # values predicted at once by a "forecast" head
    image_size: int = 32  # square input images, pixels per side ("vit", "image-decoder")
    channels: int = 3  # image channels
    patch_size: int = 8  # ViT patch side in pixels; grid = image_size // patch_size per side
    image_encoder: str = "vit"  # "image-decoder" only: "vit" (patches + self-attention) | "cnn" (conv feature grid)
    cls_token: bool = True  # "vit": prepend a learned CLS token (grid offset 1) and classify from it

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        for name, allowed in (
            ("arch", ARCHS),
            ("positions", POSITIONS),
            ("image_encoder", IMAGE_ENCODERS),
            ("input_kind", INPUT_KINDS),
            ("head", HEADS),
            ("pool", POOLS),
        ):
            if getattr(self, name) not in allowed:
                raise AttnvizError(f"model config: {name}={getattr(self, name)!r} is not one of {', '.join(allowed)}")
        check_ranges("model", self, MODEL_RANGES)
        if self.n_layers == 0 and not (self.arch == "image-decoder" and self.image_encoder == "cnn"):
            raise AttnvizError(
                f"model config: n_layers=0 leaves the {self.arch} without layers (only a cnn image encoder takes 0); "
                "it takes at least 1"
            )
        if self.d_model % self.n_heads:
            raise AttnvizError(f"model config: d_model={self.d_model} does not divide into n_heads={self.n_heads}")
        if self.arch in ("vit", "image-decoder") and self.image_size % self.patch_size:
            raise AttnvizError(
                f"model config: image_size={self.image_size} is not a multiple of patch_size={self.patch_size}"
            )

    @property
    def target_vocab(self) -> int:
        return self.tgt_vocab_size or self.vocab_size

    @property
    def grid(self) -> int:
        """Patches (or CNN cells) per image side."""
        return self.image_size // self.patch_size

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        return cls(**_known(cls, d))


@dataclass
class TrainConfig:
    """How one model is trained."""

    task: str = "sequence-classification"  # registry name in attnviz.training.tasks.TASKS
    preset: str = "demo"  # preset the configs came from (recorded for reproduction)
    steps: int = 1000  # optimizer steps in total
    epochs: int = 0  # when > 0: steps was set to this many passes over the training set (--epochs N)
    batch_size: int = 64  # examples per step
    lr: float = 1e-3  # peak learning rate (AdamW), reached after warmup
    warmup: int = 50  # linear warmup steps, then cosine decay to lr * 0.05
    weight_decay: float = 0.01  # AdamW weight decay
    grad_clip: float = 1.0  # clip the gradient norm to this; 0 = off
    seed: int = 0  # seeds parameters, batches and dropout (data sets have their own fixed seeds)
    device: str = "auto"  # "auto" (CUDA when available, else CPU) | "cpu" | "cuda"
    log_every: int = 10  # emit a progress event every this many steps
    eval_every: int = 0  # also measure held-out metrics every this many steps; 0 = only at the end
    checkpoint_every: int = 200  # save a resumable checkpoint every this many steps (and on interrupt)
    # keep the weights of every N-th step as snapshots/step-NNNNNN.safetensors (for checkpoint averaging,
    # `attnviz.training.average`); 0 = off.  Training itself is unchanged by it
    snapshot_every: int = 0
    n_train: int = 20000  # training examples generated
    n_test: int = 2000  # held-out examples generated (a separate seed; never trained on)
    # guided alignment (Garg et al. 2019), encoder-decoder tasks with alignment labels; see training/guided.py
    align_weight: float = 0.0  # weight of the alignment loss added to the task loss; 0 = off
    align_heads: list = field(default_factory=list)  # supervised cross-attention heads, [[decoder layer, head], ...]
    align_convention: str = "input"  # rows: "input" (the decoder's input token, Shift-Att) | "predict" (its output)
    align_labels: str = "gold"  # where the labels come from: "gold" = the task's links of the training split only
    label_smoothing: float = 0.0  # label smoothing of the token cross-entropy ("lm" heads); 0 = off
    # model selection without touching the test split: every N-th training example becomes a validation split
    # (never trained on); evaluations every eval_every steps measure it (Task.validate) and the best step's
    # weights (Task.val_key, lower is better) are restored before the final test evaluation; 0 = off
    validation: int = 0
    # a second selection criterion for tasks that translate (Task.val_decode): when > 0, each validation also
    # decodes the validation split greedily, and only steps whose validation BLEU is at least this can be selected
    # (the lowest val_key among them), so alignment is not bought with translation quality; 0 = off
    val_min_bleu: float = 0.0
    gloss_pairs: bool = False  # translation: add word-by-word gloss renderings of the training verses (see tasks)
    # start from a finished run of the same model config: its folder's checkpoint weights (and, for tasks whose
    # state lives in the model, its model.onnx's tokenizers); the optimizer starts fresh; "" = random init
    init_from: str = ""
    # the checkpoint files whose weights were averaged into this model after training (`attnviz average`); [] = none
    average_of: list = field(default_factory=list)

    def __post_init__(self):
        check_ranges("train", self, TRAIN_RANGES)
        if self.device not in DEVICES and not re.fullmatch(r"cuda:\d+", self.device):  # "gpu": an internal error
            raise AttnvizError(
                f"train config: device={self.device!r} is not one of {', '.join(DEVICES)} (or cuda:N, the N-th GPU)"
            )
        if self.validation == 1:  # every training example held out: the split to train on was empty
            raise AttnvizError(
                "train config: validation=1 would hold out every training example; it takes 0 (off) or 2 or more "
                "(every N-th training example becomes the validation split)"
            )
        if self.align_convention not in CONVENTIONS:
            raise AttnvizError(
                f"train config: align_convention={self.align_convention!r} is not one of {', '.join(CONVENTIONS)}"
            )
        if self.align_labels not in ALIGN_LABELS:
            raise AttnvizError(
                f"train config: align_labels={self.align_labels!r} is not one of {', '.join(ALIGN_LABELS)}"
            )
        if self.align_weight and not self.align_heads:
            raise AttnvizError("train config: align_weight > 0 needs align_heads ([[decoder layer, head], ...])")
        self.align_heads = [[int(l), int(h)] for l, h in self.align_heads]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        return cls(**_known(cls, d))


def _known(cls, d: dict) -> dict:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}


# Size presets shared by all tasks; a task adds its own fields on top (see Task.configs).
MODEL_PRESETS: dict[str, dict] = {
    # tests and CI: a few thousand parameters, exports in well under a second
    "tiny": dict(d_model=16, n_heads=2, n_layers=1, n_dec_layers=1, d_ff=32, dropout=0.0),
    # shipped demo models: small enough to train in minutes on 2 CPU cores, a few hundred kB on disk
    "demo": dict(d_model=64, n_heads=4, n_layers=2, n_dec_layers=2, d_ff=128, dropout=0.0),
}
TRAIN_PRESETS: dict[str, dict] = {
    "tiny": dict(
        steps=30, batch_size=32, lr=3e-3, warmup=5, log_every=5, checkpoint_every=1000, n_train=512, n_test=128
    ),
    "demo": dict(steps=1500, batch_size=64, lr=1e-3, warmup=100, log_every=10, checkpoint_every=250),
}
PRESETS = tuple(MODEL_PRESETS)


def preset_configs(
    preset: str, model: dict | None = None, train: dict | None = None
) -> tuple[ModelConfig, TrainConfig]:
    """Build (ModelConfig, TrainConfig) from a named preset plus task-specific overrides."""
    if preset not in MODEL_PRESETS:
        raise AttnvizError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    mc = ModelConfig(**{**MODEL_PRESETS[preset], **(model or {})})
    tc = TrainConfig(**{**TRAIN_PRESETS[preset], **(train or {}), "preset": preset})
    return mc, tc


__all__ = ["ModelConfig", "TrainConfig", "MODEL_PRESETS", "TRAIN_PRESETS", "PRESETS", "preset_configs"]
