"""Run a model on numpy feeds, from PyTorch or from an exported ONNX file, behind one interface.

Tasks evaluate through a :class:`Runner` so the same metric code measures a model during training
(``TorchRunner``) and an exported file in ``attnviz eval`` (``OnnxRunner``, onnxruntime on the CPU).
Feeds are ``{onnx_input_name: np.ndarray}``; see :data:`attnviz.training.model.INPUTS`.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from attnviz import AttnvizError


class Runner(Protocol):
    input_names: tuple[str, ...]

    def logits(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """The first graph output for a batch of feeds."""
        ...

    def attention(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Every attention map ``[B, H, Tq, Tk]``, canonical order (encoder, then decoder self/cross per layer)."""
        ...


class TorchRunner:
    """A PyTorch :class:`~attnviz.training.model.AttnModel` in eval mode, no gradients."""

    def __init__(self, model, device=None):
        import torch

        self.model = model
        self.device = device or next(model.parameters()).device
        self.input_names = tuple(model.input_names)
        self._torch = torch

    def _tensors(self, feeds):
        return {k: self._torch.as_tensor(np.asarray(feeds[k])).to(self.device) for k in self.input_names}

    def logits(self, feeds):
        was = self.model.training
        self.model.eval()
        try:
            with self._torch.no_grad():
                return self.model(**self._tensors(feeds)).float().cpu().numpy()
        finally:
            self.model.train(was)

    def attention(self, feeds):
        was = self.model.training
        self.model.eval()
        try:
            with self._torch.no_grad():
                _, probs = self.model(**self._tensors(feeds), return_attention=True)
            return [p.float().cpu().numpy() for p in probs]
        finally:
            self.model.train(was)


class OnnxRunner:
    """An exported model on onnxruntime (CPU unless ``provider`` says otherwise)."""

    def __init__(self, path: str, provider: str = "cpu"):
        # the viewer's sessions: no spin-waiting (ORT's spinning threads fight torch's in one process: 2-7x slower),
        # TF32 off on CUDA, and --provider cuda refused in one line where CUDA cannot run (a plain session fell back
        # to the CPU with only a UserWarning, and `eval --provider cuda` printed CPU numbers as if from the GPU)
        from attnviz.runtime.session import make_session

        self.path = str(path)
        try:
            self.session, _ = make_session(self.path, provider=provider)
        except AttnvizError:
            raise
        except Exception as e:  # onnxruntime raises its own exception types for unreadable files
            raise AttnvizError(f"cannot load ONNX model {self.path}: {str(e).splitlines()[0]}") from e
        self.provider = self.session.get_providers()[0]
        self.input_names = tuple(i.name for i in self.session.get_inputs())
        self._engine = None

    def logits(self, feeds):
        return self.session.run(None, {k: np.asarray(feeds[k]) for k in self.input_names})[0]

    def attention_result(self, feeds):
        """The engine's :class:`~attnviz.core.AttentionResult` (:func:`attnviz.runtime.open_model`)."""
        if self._engine is None:
            from attnviz.runtime import open_model

            self._engine = open_model(self.path, provider="cpu")
        return self._engine.run({k: np.asarray(feeds[k]) for k in self.input_names})

    def attention(self, feeds):
        """Maps found by attnviz's engine, canonical order."""
        return [m.array() for m in self.attention_result(feeds).maps]


def batched(n: int, size: int):
    """Index slices covering ``range(n)`` in chunks."""
    for s in range(0, n, size):
        yield slice(s, min(n, s + size))


def take(data: dict[str, np.ndarray], idx) -> dict[str, np.ndarray]:
    return {k: v[idx] for k, v in data.items()}
