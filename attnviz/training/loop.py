"""The training loop, written as a generator of :class:`Progress` events.

The CLI draws a progress bar from the events; a GUI can plot them and stop training by closing the
generator (``events.close()``), which saves a checkpoint at the last finished step.

Reproducibility: parameters are initialised from ``TrainConfig.seed``; batch ``s`` is drawn from
``np.random.default_rng([seed, s])`` and dropout is seeded with ``(seed, s)``, so a resumed run sees the same
batches as an uninterrupted one and needs no saved RNG state.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from attnviz import AttnvizError
from attnviz.training import budget, data_check, guided
from attnviz.training import checkpoint as ckpt
from attnviz.training.config import ModelConfig, TrainConfig
from attnviz.training.runners import TorchRunner, take

# TrainConfig fields that may differ between an interrupted run and its resumption
_RESUME_FREE = {"log_every", "eval_every", "checkpoint_every", "snapshot_every", "device"}


@dataclass
class Progress:
    """One progress report of a training run."""

    step: int  # optimizer steps done so far
    total: int  # steps of the whole run
    loss: float  # training loss averaged since the previous event
    metrics: dict = field(default_factory=dict)  # lr; held-out metrics on eval steps and at the end
    elapsed: float = 0.0  # seconds of training in this process
    done: bool = False  # the last event of a finished run (metrics hold the final held-out results)
    message: str = ""  # e.g. "resumed from step 400"


def pick_device(name: str):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():  # (cuda:N too: --set device=cuda:1)
        why = cpu_build_beside_gpu() or "PyTorch sees no CUDA GPU"
        raise AttnvizError(f"device {name!r} requested but {why}; use --device cpu or auto")
    return torch.device(name)


def cpu_build_beside_gpu() -> str:
    """Why torch cannot use an NVIDIA GPU this machine has, when the reason is its CPU-only build (what the README's
    install command gets, from PyTorch's CPU index): "sees no CUDA GPU" sent a researcher looking for a driver
    problem.  "" otherwise."""
    import torch

    from attnviz.runtime.isolation import gpu_present

    if torch.version.cuda is not None or not gpu_present():
        return ""
    return (
        f"this PyTorch ({torch.__version__}) is a CPU-only build and cannot use this machine's GPU (install a CUDA "
        "build of torch, pytorch.org)"
    )


def lr_at(step: int, tc: TrainConfig) -> float:
    """Linear warmup to ``lr``, then cosine decay to 5 % of it."""
    if step < tc.warmup:
        return tc.lr * (step + 1) / tc.warmup
    frac = (step - tc.warmup) / max(1, tc.steps - tc.warmup)
    return tc.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def param_groups(model, weight_decay: float) -> list[dict]:
    """AdamW groups as in nanoGPT: decay the matrices (weights, embeddings), not biases or LayerNorm gains."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]


def steps_for_epochs(epochs: int, tc: TrainConfig, n: int | None = None) -> int:
    """Optimizer steps for ``epochs`` passes over ``n`` training examples (default: ``tc.n_train``)."""
    return max(1, epochs * math.ceil((tc.n_train if n is None else n) / tc.batch_size))


class Trainer:
    """Holds the model, data and optimizer of one run; :meth:`events` trains.

    With ``out`` set, the run lives in that folder: ``config.json`` at start, checkpoints every
    ``checkpoint_every`` steps, on interruption and at the end.  An unfinished checkpoint with the same
    configuration there is resumed; a different configuration, a finished run or a damaged checkpoint raise
    :class:`AttnvizError` unless ``restart=True``.  ``exported`` names the file the caller writes from a
    finished run: a finished run without it (interrupted or failed while exporting) is taken up again as finished,
    its final weights loaded and nothing trained, so the caller can export it.
    """

    def __init__(
        self,
        task,
        mcfg: ModelConfig,
        tcfg: TrainConfig,
        out: str | Path | None = None,
        restart: bool = False,
        exported: str | None = None,
    ):
        import torch

        from attnviz.training.model import AttnModel

        self.task, self.mcfg, self.tcfg = task, mcfg, tcfg
        self.out: Path | None = None  # made below, once the configuration is known to fit the data
        self.exported = exported
        self.device = pick_device(tcfg.device)
        torch.manual_seed(tcfg.seed)
        budget.check_training_memory(mcfg, tcfg)  # from shapes, before a 4 TB d_model is allocated
        self.model = AttnModel(mcfg).to(self.device)
        guided.check(mcfg, tcfg)
        self.optimizer = torch.optim.AdamW(param_groups(self.model, tcfg.weight_decay), lr=tcfg.lr)
        self.step = 0
        self.losses: list[list[float]] = []  # [step, loss] per event, for plots
        self.metrics: dict = {}
        self.message = ""
        self.finished = False
        # best validation step so far: {"step", "value", "metrics"} (TrainConfig.validation)
        self.best: dict | None = None
        self._best_weights: dict | None = None  # in memory when there is no run folder
        task.label_smoothing = tcfg.label_smoothing
        if tcfg.val_min_bleu > 0 and not (tcfg.validation and task.decodes):
            raise AttnvizError(
                f"val_min_bleu needs a validation split (--set validation=N) and a task that translates; "
                f"{task.name} with validation={tcfg.validation} has not"
            )
        if tcfg.validation and not task.val_key:  # its make_split("validation") was the test split, or a KeyError
            from attnviz.training.tasks import TASKS

            carving = ", ".join(t.name for t in TASKS.values() if t.val_key)
            raise AttnvizError(
                f"validation={tcfg.validation}: {task.name} has no validation split to select a step on (only "
                f"{carving} carve one out of their training data); leave validation at 0"
            )
        task.val_bleu = tcfg.val_min_bleu > 0
        # the data first: a configuration too small for it is refused before the run folder is touched
        self.train_data = task.make_split("train", mcfg, tcfg)
        self.test_data = task.make_split("test", mcfg, tcfg)
        self.val_data = task.make_split("validation", mcfg, tcfg) if tcfg.validation else None
        for data in (self.train_data, self.test_data, self.val_data or {}):
            data_check.check(task.name, mcfg, data)
        if tcfg.epochs:  # passes over the split as built, not n_train: translation's drops its long verses, carves
            # the validation split out of it and adds gloss pairs (with both, `--epochs 1` was 0.53 of a pass)
            tcfg.steps = steps_for_epochs(tcfg.epochs, tcfg, len(next(iter(self.train_data.values()))))
            tcfg.warmup = min(tcfg.warmup, max(1, tcfg.steps // 10))
        if out is not None:
            self.out = ckpt.ensure_writable_dir(out)
            self._resume_or_start(restart)
        if tcfg.init_from:
            self._init_from(Path(tcfg.init_from))
        self.n_train = len(next(iter(self.train_data.values())))

    # -- run folder ------------------------------------------------------------
    def _state(self) -> dict:
        return {
            "task": self.task.name,
            "model": self.mcfg.to_dict(),
            "train": self.tcfg.to_dict(),
            "total": self.tcfg.steps,
            "finished": self.finished,
            "losses": self.losses,
            "metrics": self.metrics,
            "best": self.best,
        }

    def _resume_or_start(self, restart: bool) -> None:
        if self.out is None:  # a run without a folder has nothing to resume
            return
        if restart:  # a stale checkpoint must not be mistaken for this run's after an early interruption
            for name in (ckpt.STATE, ckpt.TENSORS):
                (self.out / name).unlink(missing_ok=True)
        prev = None if restart else ckpt.load_state(self.out)
        if prev is not None:
            where = self.out / ckpt.STATE
            differ = _differences(prev, self.task.name, self.mcfg.to_dict(), _strip(self.tcfg.to_dict()))
            # `--steps 2000` on a finished 1000-step run meant "train it longer": say how, not only how to overwrite
            further = (
                f", or train it further from its weights into a new folder (--set init_from={self.out} --out NEW)"
                if prev.get("finished") and prev.get("task") == self.task.name
                else ""
            )
            if differ:
                raise AttnvizError(
                    f"{self.out} holds a run with a different task or configuration ({where}: {differ}); "
                    f"pass --restart to overwrite it or choose another --out{further}"
                )
            if prev.get("finished") and (self.exported is None or (self.out / self.exported).exists()):
                raise AttnvizError(
                    f"{self.out} already holds a finished run; pass --restart to train again or choose another "
                    f"--out{further}"
                )
            self.step = int(prev["step"])
            ckpt.load_tensors(self.out, self.model, self.optimizer, self.step)
            self.losses = prev.get("losses", [])
            self.best = prev.get("best")
            self.message = f"resumed from step {self.step}/{self.tcfg.steps} ({where})"
            if prev.get("finished"):  # the weights saved at the end (best step restored): export them again
                self.finished = True
                self.metrics = prev.get("metrics") or {}
                self.message = (
                    f"training had finished at step {self.step} ({where}) but {self.exported} was not written; "
                    f"exporting it now"
                )
        ckpt.atomic_write_json(
            self.out / ckpt.CONFIG, {"task": self.task.name, "model": self.mcfg.to_dict(), "train": self.tcfg.to_dict()}
        )

    def _init_from(self, run: Path) -> None:
        """Fine-tuning: the weights of a finished run of the same architecture (dropout may differ) and its
        model's task state (tokenizers); on resume the run's own checkpoint replaces the weights afterwards."""
        from attnviz.training.exported import read_config

        model_file = run / "model.onnx"
        if not model_file.is_file():
            raise AttnvizError(f"init_from {run}: no model.onnx there (a finished `attnviz train` run folder)")
        name, mcfg, tcfg, meta = read_config(model_file)
        theirs, ours = ({**m.to_dict(), "dropout": 0} for m in (mcfg, self.mcfg))
        if name != self.task.name or theirs != ours:  # said only "differs", not in what nor what to do
            said = [f"task {name}, now {self.task.name}"] if name != self.task.name else []
            said += [f"{k} {theirs[k]!r}, now {ours.get(k)!r}" for k in sorted(theirs) if theirs[k] != ours.get(k)]
            more = f"; and {len(said) - 3} more" if len(said) > 3 else ""
            raise AttnvizError(
                f"init_from {run}: that run's model differs from this one ({'; '.join(said[:3])}{more}); fine-tune "
                f"it as it was trained (attnviz train {name} --preset {tcfg.preset}, and the model fields it set; see "
                f"{run / ckpt.CONFIG}) or start from scratch"
            )
        if hasattr(self.task, "restore"):  # the tokenizers the weights were trained with
            # into a copy of the task: the registry's instance is every later run's in this process
            self.task = copy.copy(self.task)
            self.task.restore(meta)
        if self.step == 0:
            self.model.load_state_dict(ckpt.read_weights(run / ckpt.TENSORS), strict=True)

    def save(self) -> None:
        if self.out is not None:
            ckpt.save(self.out, self.model, self.optimizer, self.step, self._state())

    # -- training --------------------------------------------------------------
    def _batch(self, step: int):
        import torch

        rng = np.random.default_rng([self.tcfg.seed, step])
        idx = rng.integers(0, self.n_train, size=self.tcfg.batch_size)
        b = self.task.collate(take(self.train_data, idx))
        return {k: torch.as_tensor(v).to(self.device) for k, v in b.items()}

    def evaluate(self) -> dict:
        return self.task.evaluate(TorchRunner(self.model, self.device), self.test_data, self.mcfg)

    def validate(self) -> dict:
        """Measure the validation split and keep this step's weights when they are the best so far."""
        m = self.task.validate(TorchRunner(self.model, self.device), self.val_data, self.mcfg)
        key = self.task.val_key
        # below the BLEU floor a step is never selected, however well it aligns (TrainConfig.val_min_bleu)
        eligible = m.get("bleu", 0.0) >= self.tcfg.val_min_bleu
        if key and eligible and (self.best is None or m[key] < self.best["value"]):
            self.best = {"step": self.step, "value": m[key], "key": key, "metrics": m}
            if self.out is not None:
                ckpt.save_best(self.out, self.model, self.step)
            else:
                self._best_weights = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        return {"validation": m}

    def _restore_best(self) -> None:
        """Before the final evaluation: go back to the best validation step (a no-op without validation)."""
        if self.best is None:
            return
        if self.out is not None:
            ckpt.load_best(self.out, self.model, self.best["step"])
        elif self._best_weights is not None:
            self.model.load_state_dict(self._best_weights)

    def events(self) -> Generator[Progress, None, None]:
        """Train to ``TrainConfig.steps``, yielding progress; closing the generator stops after a checkpoint."""
        import torch

        tc = self.tcfg
        names = self.model.input_names
        t0 = time.perf_counter()
        running, count = 0.0, 0
        consistent = True  # False only while the optimizer updates parameters
        if self.message:
            yield Progress(self.step, tc.steps, float("nan"), {}, 0.0, message=self.message)
        if self.finished:  # taken up only to be exported: nothing to train or measure again
            yield Progress(self.step, tc.steps, float("nan"), dict(self.metrics), 0.0, done=True)
            return
        try:
            self.model.train()
            while self.step < tc.steps:
                s = self.step
                torch.manual_seed(tc.seed * 1_000_003 + s)  # dropout pattern of this step
                lr = lr_at(s, tc)
                for g in self.optimizer.param_groups:
                    g["lr"] = lr
                batch = self._batch(s)
                if tc.align_weight:
                    logits, probs = self.model(**{k: batch[k] for k in names}, return_attention=True)
                    loss = self.task.loss(logits, batch) + tc.align_weight * guided.loss(
                        probs, batch["align"], self.mcfg, tc
                    )
                else:
                    logits = self.model(**{k: batch[k] for k in names})
                    loss = self.task.loss(logits, batch)
                if not torch.isfinite(loss):
                    # batches and dropout are seeded per step: resuming would diverge at this step again, so the
                    # line says what changes it (and that such a change needs --restart), not "rerun to resume"
                    raise AttnvizError(
                        f"training diverged at step {s} (loss {loss.item()}); lower the learning rate "
                        f"(--set lr=..., now {tc.lr:g}) and start over with --restart: resuming the same command "
                        f"would diverge at the same step again"
                    )
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if tc.grad_clip:
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), tc.grad_clip)
                consistent = False
                self.optimizer.step()
                self.step = s + 1
                consistent = True
                running += loss.item()
                count += 1
                metrics = {"lr": lr}
                if tc.eval_every and (self.step % tc.eval_every == 0 or (tc.validation and self.step == tc.steps)):
                    self.model.eval()
                    if tc.validation:  # model selection never looks at the test split
                        metrics.update(self.validate())
                    elif self.step < tc.steps:
                        metrics.update(self.evaluate())
                    self.model.train()
                if self.out is not None and tc.checkpoint_every and self.step % tc.checkpoint_every == 0:
                    self.save()
                if self.out is not None and tc.snapshot_every and self.step % tc.snapshot_every == 0:
                    ckpt.save_snapshot(self.out, self.model, self.step)
                if self.step % tc.log_every == 0 or self.step == tc.steps or len(metrics) > 1:
                    avg = running / count
                    self.losses.append([self.step, avg])
                    running, count = 0.0, 0
                    yield Progress(self.step, tc.steps, avg, metrics, time.perf_counter() - t0)
            self.model.eval()
            self._restore_best()
            self.metrics = self.evaluate()
            if self.best is not None:
                self.metrics["validation"] = self.best
            self.finished = True
            self.save()
            last = self.losses[-1][1] if self.losses else float("nan")
            yield Progress(self.step, tc.steps, last, dict(self.metrics), time.perf_counter() - t0, done=True)
        except BaseException:  # KeyboardInterrupt, GeneratorExit (stop button), errors: keep what was done
            if consistent and not self.finished and self.step > 0:
                self.save()
            raise


def _strip(train: dict | None) -> dict:
    return {k: v for k, v in (train or {}).items() if k not in _RESUME_FREE}


def _differences(prev: dict, task: str, model: dict, train: dict, most: int = 3) -> str:
    """What a run folder's checkpoint.json holds against this command's run, "steps 30, now 40": the refusal said
    only "a different task or configuration", and `--steps 40` on a finished 30-step run read as a riddle."""
    said = [f"task {prev.get('task')}, now {task}"] if prev.get("task") != task else []
    for old, new in ((prev.get("model") or {}, model), (_strip(prev.get("train")), train)):
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                said.append(f"{key} {old.get(key)!r}, now {new.get(key)!r}")
    return "; ".join(said[:most]) + (f"; and {len(said) - most} more" if len(said) > most else "")


def train(task, mcfg: ModelConfig, tcfg: TrainConfig, out=None, restart: bool = False) -> Iterator[Progress]:
    """Convenience: ``Trainer(...).events()``."""
    return Trainer(task, mcfg, tcfg, out, restart).events()
