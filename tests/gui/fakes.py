"""Synthetic models for GUI tests: the runtime's model interface over softmax-of-random maps."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnviz import AttnvizError
from attnviz.core.attention import AttentionResult, DenseMap, PatchGrid, SiteInfo, TokenAxis


@dataclass
class IO:
    name: str
    dtype: str
    shape: list


def softmax_maps(rng, h, tq, tk, causal=False, sharp=3.0):
    x = rng.normal(size=(1, h, tq, tk)).astype(np.float32) * sharp
    if causal:
        off = tk - tq
        mask = np.triu(np.ones((tq, tk), bool), k=1 + off)
        x[..., mask] = -1e9
    x = np.exp(x - x.max(-1, keepdims=True))
    return x / x.sum(-1, keepdims=True)


def sites_for(stack, kind, layers, heads):
    return [
        SiteInfo(stack, kind, i, heads, f"/{stack}/layer.{i}/{kind}_attn/Softmax", "softmax") for i in range(layers)
    ]


class FakeModel:
    """kind: encoder | encoder-decoder | vision | vision-decoder | none (no attention) | broken (fails to run).

    It satisfies the runtime's model Protocol (attnviz.runtime.protocol.AttnModel), as the window sees only that
    surface: members a fake has nothing for return the Protocol's defaults (no cache, no pairing, no limit)."""

    needs_probe = False
    provider_note = ""
    position_limit = None
    vision_tower = False  # a fake "vision-decoder" is a captioner (cross-attention), not a VLM set
    tokenizers = (None, None)

    def __init__(self, path, kind="encoder", layers=2, heads=4, provider="CPUExecutionProvider", delay=0.0):
        self.path = Path(path)
        self.name = self.path.stem
        self.kind = kind
        self.layers, self.heads = layers, heads
        self.provider = provider
        self.delay = delay
        self.calls = 0
        vision = kind.startswith("vision")
        self.inputs = (
            [IO("pixel_values", "float32", [1, 3, 32, 32])] if vision else [IO("input_ids", "int64", ["batch", "seq"])]
        )
        self.roles = {i.name: "image" if vision else "tokens" for i in self.inputs}
        if kind == "vision-decoder":  # a captioning model: its decoder reads the caption's tokens
            self.inputs.append(IO("decoder_input_ids", "int64", ["batch", "decoder_sequence"]))
            self.roles["decoder_input_ids"] = "decoder_tokens"
        self.timings = {"load_s": 0.0}
        self.outputs = [IO("logits", "float32", ["batch", "seq", 10])]
        task = "sequence-classification" if kind == "encoder" else kind
        self.metadata = {"attnviz.task": task, "attnviz.sample": '{"text": "the cat sat on the mat"}'}
        self.meta = {"task": task, "sample": {"text": "the cat sat on the mat"}, "labels": ["negative", "positive"]}
        if kind == "none":
            self.sites, self.no_attention_reason = [], "the graph has no Softmax over a QK^T MatMul (a CNN?)"
        else:
            self.no_attention_reason = None
            enc = sites_for("encoder", "self", layers, heads)
            dec = []
            if kind in ("encoder-decoder", "vision-decoder"):
                for i in range(layers):
                    dec += [
                        SiteInfo("decoder", "self", i, heads, f"/dec/{i}/self", "softmax"),
                        SiteInfo("decoder", "cross", i, heads, f"/dec/{i}/cross", "softmax"),
                    ]
            self.sites = enc + dec

    def analyze_request(self, req, progress=None, cancelled=None):
        """The runtime's entry for a built request (what the window's worker calls)."""
        return self.analyze(
            text=req.text, text_pair=req.text_pair, image=req.image, feeds=req.feeds, generate=req.generate
        )

    # -- the Protocol's behaviour: a fake runs only through analyze() --------------------------------------
    def probe(self) -> bool:
        return all(s.heads for s in self.sites)

    def describe(self) -> dict:
        return {"model": str(self.path), "kind": self.kind, "sites": [s.to_dict() for s in self.sites]}

    def check_feeds(self, feeds):
        raise AttnvizError(f"{self.name}: a stand-in model takes no raw feeds")

    def run(self, feeds, mode="auto"):
        return self.check_feeds(feeds)

    def logits(self, feeds):
        return self.check_feeds(feeds)

    def grid(self, n_keys, image_hw=None):
        return None  # analyze() lays its image tokens out itself

    def cache_stepper(self):
        return None

    def pair_with_encoder(self):
        return None

    def prompt_feed(self):
        return None  # no feed marks where a prompt ends (a VLM's does: runtime/vlm.py)

    def load_image(self, source, spec):
        return None

    def several_images(self, count):
        if count > 1:
            raise AttnvizError(f"{count} images given and {self.path.name} takes one image per run")
        return None

    def vision_grids(self, n_keys):
        return []

    def tower_rows(self, n_keys):
        return []

    def analyze(self, text=None, text_pair=None, image=None, feeds=None, generate=0):
        import time

        self.calls += 1
        if self.delay:
            time.sleep(self.delay)
        if self.kind == "broken":
            raise AttnvizError(f"{self.name}: onnxruntime failed: [ONNXRuntimeError] Invalid rank for input: input_ids")
        rng = np.random.default_rng(abs(hash((text, text_pair, image, generate))) % 2**32)
        L, H = self.layers, self.heads
        grid = None
        img = None
        if self.kind.startswith("vision"):
            if not image:
                raise AttnvizError(f"{self.name} needs an image; choose one with --image or the input panel")
            from PIL import Image, UnidentifiedImageError

            try:
                with Image.open(image) as im:
                    img = np.asarray(im.convert("RGB").resize((32, 32)))
            except (OSError, UnidentifiedImageError):
                raise AttnvizError(f"{Path(image).name}: not an image Pillow can read; use a PNG or JPEG") from None
            grid = PatchGrid(4, 4, 1)
            src = TokenAxis(["[CLS]"] + [f"p{i}" for i in range(16)], [True] + [False] * 16)
        else:
            words = (text or "").split() or ["hello"]
            if text_pair:
                words = words + ["[SEP]"] + text_pair.split()
            labels = ["[CLS]"] + words + ["[SEP]"]
            src = TokenAxis(labels, [w in ("[CLS]", "[SEP]") for w in labels])
        S = len(src)
        maps = [DenseMap(softmax_maps(rng, H, S, S)) for _ in range(L)]
        gen = []
        dec_ax = None
        if self.kind in ("encoder-decoder", "vision-decoder"):
            g = int(generate or 0) or 1
            vocab = (
                ["le", "chat", "est", "sur", "le", "tapis", "."]
                if self.kind == "encoder-decoder"
                else ["a", "red", "square", "on", "blue", "."]
            )
            gen = [vocab[i % len(vocab)] for i in range(g)]
            dl = ["<s>"] + gen[:-1]  # like the runtime: the last generated token is not fed back
            dec_ax = TokenAxis(dl, [True] + [False] * (len(dl) - 1))
            T = len(dl)
            dmaps = []
            for _ in range(L):
                dmaps += [DenseMap(softmax_maps(rng, H, T, T, causal=True)), DenseMap(softmax_maps(rng, H, T, S))]
            maps = maps + dmaps
        outputs = {"logits": np.array([[0.2, 1.5]], np.float32)} if self.kind == "encoder" else {}
        return AttentionResult(
            maps=maps,
            sites=list(self.sites),
            tokens=src,
            key_tokens=dec_ax,
            patch_grid=grid,
            image=img,
            outputs=outputs,
            generated=gen,
            prompt_len=1 if gen else 0,
            info={"provider": self.provider, "timings": {"run": 0.003}, "model": self.name},
        )


def make_opener(models: dict):
    """An opener like ``attnviz.runtime.open_model`` that serves FakeModels by file name."""

    def opener(path, provider="auto", tokenizer=None, probe=True):
        p = Path(path)
        if p.suffix != ".onnx":
            raise AttnvizError(f"{p.name}: not an ONNX model")
        spec = models.get(p.name)
        if spec is None:
            raise AttnvizError(f"{p.name}: not a valid ONNX file (protobuf parse failed); re-export the model")
        m = FakeModel(p, **spec)
        m.tokenizer = tokenizer
        return m

    return opener
