"""Training tasks and their registry.

A task owns its data (generated or read offline, fixed seeds, held-out test split), its loss, its metrics
and the ``attnviz.*`` metadata that makes its exported model self-describing.  The loop, the export and the
``train`` / ``eval`` commands only talk to tasks through :class:`Task`; adding a task = one module with a
``Task`` subclass + one line in :data:`TASKS`.

The interface
-------------
Subclass :class:`Task` and set/implement:

``name`` (str), ``summary`` (one line for ``attnviz train --help``)

``configs(preset) -> (ModelConfig, TrainConfig)``
    Architecture and training settings for ``"tiny"`` (tests: trains in seconds) and ``"demo"`` (shipped
    model).  Start from :func:`attnviz.training.config.preset_configs` and add task fields (vocab sizes,
    classes, head, image size, steps...).  ``TrainConfig.task`` must be ``self.name``.

``make_split(split, mcfg, tcfg) -> dict[str, np.ndarray]``
    ``split`` is ``"train"`` or ``"test"``.  Deterministic (fixed seeds, the test split never overlaps the
    training data).  Keys: the model's input names (``attnviz.training.model.input_names(mcfg)``:
    ``input_ids``, ``attention_mask``, ``series``, ``pixel_values``, ``decoder_input_ids``) with the dtypes
    of the exported graph (int64 ids/masks, float32 values/pixels), plus target keys, all with the same
    first dimension (examples).  Targets used by the default :meth:`loss`: ``labels`` – int64 class per
    example (classify head) or int64 next-token per position with ``-100`` = ignore (lm heads,
    encoder-decoder, image-decoder); ``targets`` – float32 ``[N, horizon]`` (forecast head).  Extra keys
    (gold alignments, boxes...) are allowed and travel along in batches.

``loss(logits, batch) -> torch scalar`` (optional)
    Default: cross-entropy / MSE chosen from the model head (see above).

``evaluate(runner, data, mcfg) -> dict[str, float | ...]``
    Held-out metrics (JSON-serialisable) computed only through ``runner.logits(feeds)`` and
    ``runner.attention(feeds)`` (:mod:`attnviz.training.runners`), so the same code scores the PyTorch model
    during training and the ONNX file in ``attnviz eval``.  Use :func:`feeds_of` to cut feeds from a batch
    and :func:`greedy_decode` for generation.

``metadata(mcfg) -> dict``
    The ``attnviz.*`` keys the task knows (see :mod:`attnviz.core.metadata`): ``vocab``, ``labels``,
    ``special``, ``tokenize``, ``image``, ``sample``...  The export adds ``task``, ``inputs``, ``config``
    and ``metrics`` itself.

``example_feeds(mcfg) -> dict[str, np.ndarray]`` (optional)
    A small batch (≥ 2 examples, ideally different lengths) the export traces and checks parity on.
    Default: the first 3 test examples.

``collate(batch) -> batch`` (optional)
    Applied to each training batch (numpy) before it becomes tensors.  Default :func:`trim_padding` drops
    trailing all-padding columns (source: ``attention_mask``; target: ``labels == -100``), so long padded
    splits (translation) train at the cost of each batch's longest example.

``target`` (optional class attribute) says what the shipped model must reach (documentation only).

``trains_itself`` (optional class attribute, default False): the task owns its whole run (``run(out, preset, seed,
steps, say)``) and its held-out evaluation of what it exported (``evaluate_folder``); ``spoken-digits`` trains
transformers' Whisper and exports the speech folder the runtime opens, which the loop above does not build.

Helpers: :func:`predict` (logits over a split), :func:`greedy_decode` (generation through ``runner.logits``),
:func:`attention_groups` (canonical maps -> encoder / decoder self / cross lists per layer, e.g. for AER or the
pointing game), :func:`split_seed` (fixed data seeds), :func:`register` (add a task to :data:`TASKS`).

Encoder-decoder specifics: ``ModelConfig.vocab_size`` is the source vocabulary and ``tgt_vocab_size`` the
target one; ``decoder_input_ids`` = ``[bos] + target`` (right-padded), ``labels`` = ``target + [eos]`` then
``-100``; ``max_len`` must cover the longest source and target.  Metadata ``vocab`` may be
``{"source": [...], "target": [...]}`` and ``special`` ids (bos/eos) refer to the target vocabulary; a HF
``tokenizer.json`` can go in ``tokenizer`` / ``target_tokenizer`` (strings).
"""

from __future__ import annotations

import numpy as np

from attnviz import AttnvizError
from attnviz.training.config import ModelConfig, TrainConfig
from attnviz.training.layout import cross_attention_indices, encoder_layers, input_names
from attnviz.training.runners import batched, take
from attnviz.training.seeds import split_seed  # noqa: F401  (the tasks' and their callers' name for it)


class Task:
    name: str = ""
    summary: str = ""
    target: str = ""  # the held-out result the demo model must reach, for the docs
    trains_itself: bool = False  # True: run() does training and export (see the module docstring)

    # -- must implement --------------------------------------------------------
    def configs(self, preset: str) -> tuple[ModelConfig, TrainConfig]:
        raise NotImplementedError

    def make_split(self, split: str, mcfg: ModelConfig, tcfg: TrainConfig) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def evaluate(self, runner, data: dict[str, np.ndarray], mcfg: ModelConfig) -> dict:
        raise NotImplementedError

    def metadata(self, mcfg: ModelConfig) -> dict:
        return {}

    # -- defaults --------------------------------------------------------------
    label_smoothing: float = 0.0  # set from TrainConfig.label_smoothing by the trainer

    def loss(self, logits, batch):
        import torch.nn.functional as F

        if "targets" in batch:  # forecast
            return F.mse_loss(logits, batch["targets"])
        labels = batch["labels"]
        if logits.dim() == 3:  # (B, T, V) per-position
            return F.cross_entropy(
                logits.reshape(-1, logits.size(-1)),
                labels.reshape(-1),
                ignore_index=-100,
                label_smoothing=self.label_smoothing,
            )
        return F.cross_entropy(logits, labels)

    # -- model selection on a validation split (TrainConfig.validation) -----------
    val_key: str = ""  # the validate() result that selects the checkpoint (lower is better); "" = no selection
    decodes: bool = False  # validate() can also report "bleu" of greedy decoding (TrainConfig.val_min_bleu)
    val_bleu: bool = False  # ... and does so: set from TrainConfig.val_min_bleu by the trainer

    def validate(self, runner, data: dict[str, np.ndarray], mcfg: ModelConfig) -> dict:
        """Metrics on the validation split; the default is the full evaluation."""
        return self.evaluate(runner, data, mcfg)

    def example_feeds(self, mcfg: ModelConfig, tcfg: TrainConfig) -> dict[str, np.ndarray]:
        data = self.make_split("test", mcfg, tcfg)
        return feeds_of(take(data, slice(0, 3)), mcfg)

    def collate(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Last step before a training batch becomes tensors; default: :func:`trim_padding`."""
        return trim_padding(batch)


def trim_padding(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Drop trailing columns that are padding in every example of a right-padded batch.

    Source side: columns after the longest ``attention_mask``; target side (``decoder_input_ids`` and
    per-position ``labels``): columns after the last label that is not ``-100``.  Masks and causal attention
    make the result independent of the trimmed columns, so this only saves time on long padded splits.
    """
    out = dict(batch)
    if "attention_mask" in out and "input_ids" in out:
        n = max(1, int(out["attention_mask"].sum(1).max()))
        out["input_ids"], out["attention_mask"] = out["input_ids"][:, :n], out["attention_mask"][:, :n]
    lab = out.get("labels")
    if "decoder_input_ids" in out and lab is not None and lab.ndim == 2:
        cols = np.nonzero((lab != -100).any(0))[0]
        n = int(cols[-1]) + 1 if len(cols) else 1
        out["decoder_input_ids"], out["labels"] = out["decoder_input_ids"][:, :n], lab[:, :n]
    return out


def attention_groups(maps: list, mcfg: ModelConfig) -> dict[str, list]:
    """Split canonical-order maps into ``{"encoder": [...], "decoder_self": [...], "cross": [...]}`` (per layer)."""
    if mcfg.arch == "decoder":
        return {"encoder": [], "decoder_self": list(maps), "cross": []}
    if mcfg.arch not in ("encoder-decoder", "image-decoder"):
        return {"encoder": list(maps), "decoder_self": [], "cross": []}
    cross = cross_attention_indices(mcfg)
    return {
        "encoder": list(maps[: encoder_layers(mcfg)]),
        "decoder_self": [maps[i - 1] for i in cross],
        "cross": [maps[i] for i in cross],
    }


def feeds_of(batch: dict[str, np.ndarray], mcfg: ModelConfig) -> dict[str, np.ndarray]:
    """The model inputs of a batch (drops targets and extras)."""
    return {k: batch[k] for k in input_names(mcfg)}


def predict(runner, data: dict[str, np.ndarray], mcfg: ModelConfig, batch_size: int = 256) -> np.ndarray:
    """``runner.logits`` over a whole split, concatenated along the first axis."""
    n = len(next(iter(data.values())))
    return np.concatenate([runner.logits(feeds_of(take(data, s), mcfg)) for s in batched(n, batch_size)])


def greedy_decode(runner, feeds: dict[str, np.ndarray], bos: int, eos: int, max_len: int) -> np.ndarray:
    """Greedy generation for encoder-decoder / image-decoder models.

    ``feeds`` holds the encoder-side inputs (no ``decoder_input_ids``).  Returns ``[B, max_len + 1]`` int64
    ids starting with ``bos``; positions after a sequence's ``eos`` repeat ``eos``.
    """
    b = len(next(iter(feeds.values())))
    out = np.full((b, 1), bos, dtype=np.int64)
    done = np.zeros(b, dtype=bool)
    for _ in range(max_len):
        logits = runner.logits({**feeds, "decoder_input_ids": out})  # (B, T, V)
        nxt = logits[:, -1].argmax(-1).astype(np.int64)
        nxt[done] = eos
        out = np.concatenate([out, nxt[:, None]], axis=1)
        done |= nxt == eos
        if done.all():
            break
    return out


def _registry() -> dict[str, Task]:
    from attnviz.training.tasks.captioning import Captioning
    from attnviz.training.tasks.forecasting import Forecasting
    from attnviz.training.tasks.sequence_classification import SequenceClassification
    from attnviz.training.tasks.spoken_digits import SpokenDigits
    from attnviz.training.tasks.toy import ToyCaption, ToyReverse
    from attnviz.training.tasks.translation import Translation, TranslationSynthetic
    from attnviz.training.tasks.vit_classification import VitClassification

    tasks = [
        SequenceClassification(),
        Forecasting(),
        VitClassification(),
        Translation(),
        Captioning(),
        TranslationSynthetic(),
        ToyReverse(),
        ToyCaption(),
        SpokenDigits(),  # trains_itself: a Whisper folder, its own run (tasks/spoken_digits.py)
    ]
    return {t.name: t for t in tasks}


# name -> Task instance.  New tasks: add them to _registry() above (or call register() at import time).
TASKS: dict[str, Task] = _registry()


def register(task: Task) -> Task:
    """Add (or replace) a task in :data:`TASKS`; returns it."""
    if not task.name:
        raise ValueError("a task needs a name")
    TASKS[task.name] = task
    return task


def get_task(name: str) -> Task:
    try:
        return TASKS[name]
    except KeyError:
        near = _nearest(name)
        hint = f"did you mean {near}? " if near else ""
        raise AttnvizError(f"unknown task {name!r}; {hint}choose one of: {', '.join(TASKS)}") from None


def _nearest(name: str) -> str | None:
    """The task a slip most likely meant ("Translation", "seq", "sequence-clasification"), else None."""
    import difflib

    typed = name.strip().lower().replace("_", "-")
    starts = [n for n in TASKS if n.startswith(typed)] if typed else []
    if len(starts) == 1:
        return starts[0]
    close = difflib.get_close_matches(typed, list(TASKS), n=1, cutoff=0.75)
    return close[0] if close else None
