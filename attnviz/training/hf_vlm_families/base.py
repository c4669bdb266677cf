"""What every vision–language family's export shares, and the :class:`Recipe` each family adapts.

A recipe says what differs between families on the way to the Hub's three files and in the check against
transformers: the image-features graph and its inputs (LLaVA's image, Idefics3's frames and pixel mask, Qwen2-VL's
flattened patches and grid), the decoder graph's extra inputs (PaliGemma's token types, Qwen2-VL's 3-D positions),
how a prompt lays out the image tokens, which keywords transformers' model takes for the same image and prompt,
and the vision tower's eager maps as attnviz shows them.  The defaults are LLaVA's (one image of the tower's size
per prompt row, one run of image tokens after BOS, positions counted over the tokens).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnviz.training.hf_onnx import _torch_nn_module

IMAGE_TOKEN_KEYS = ("image_token_index", "image_token_id")


@dataclass
class Sample:
    """One check: ``feeds`` as attnviz's VLMSet takes them (``pixel_values``, ``input_ids`` with the placeholder
    expanded, ``attention_mask``) and ``torch_kw``, transformers' keywords for the same image and prompt."""

    feeds: dict[str, np.ndarray]
    torch_kw: dict[str, Any] = field(default_factory=dict)

    @property
    def input_ids(self) -> np.ndarray:
        return self.feeds["input_ids"]

    @property
    def pixel_values(self) -> np.ndarray:
        return self.feeds["pixel_values"]


def image_token(config) -> int:
    return next(int(v) for k in IMAGE_TOKEN_KEYS if isinstance(v := getattr(config, k, None), int))


# --------------------------------------------------------------------------- the graphs every family shares
class Embed(_torch_nn_module()):  # type: ignore[misc]
    """``input_ids`` -> ``inputs_embeds`` (the language model's token embedding alone)."""

    def __init__(self, model):
        super().__init__()
        self.embed = model.get_input_embeddings()

    def forward(self, input_ids):
        return self.embed(input_ids)


def filled_cache(config, past, layers: int):
    """A DynamicCache holding the given past keys and values (``key0, value0, key1, ...``), so that the decoder's
    presents are past + new."""
    import transformers

    cache = transformers.DynamicCache(config=config)
    for i in range(layers):
        cache.update(past[2 * i], past[2 * i + 1], i)
    return cache


class Decoder(_torch_nn_module()):  # type: ignore[misc]
    """``inputs_embeds``, ``attention_mask``, ``position_ids``, past key/values -> ``logits``, present key/values:
    the language model and its head, the cache filled from the pasts so that its presents are past + new."""

    def __init__(self, model, layers: int):
        super().__init__()
        self.lm, self.head, self.layers = model.get_decoder(), model.get_output_embeddings(), layers

    def forward(self, inputs_embeds, attention_mask, position_ids, *past):
        return self.step(inputs_embeds, attention_mask, position_ids, filled_cache(self.lm.config, past, self.layers))

    def step(self, inputs_embeds, attention_mask, position_ids, cache) -> tuple:
        """One run of the language model on a filled cache: logits, then every layer's present key and value."""
        out = self.lm(
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
        )
        present = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
        return (self.head(out.last_hidden_state), *present)


# --------------------------------------------------------------------------- the recipe
class Recipe:
    """LLaVA-like defaults; a family overrides what its model does otherwise."""

    needs: tuple[str, ...] = ()  # config.json keys the family cannot do without
    generate_tokens = 4  # greedy tokens compared with transformers' generate

    # -- the image-features graph -------------------------------------------------
    def vision(self, model):  # pragma: no cover - every family defines it
        """The module: the vision file's inputs (as :meth:`vision_inputs` names them) -> ``image_features``."""
        raise NotImplementedError

    def vision_inputs(self, model, pixels: np.ndarray) -> dict:
        """The vision file's inputs (torch tensors, in ONNX order) for the set's ``pixel_values`` of one row."""
        import torch

        return {"pixel_values": torch.as_tensor(pixels)}

    def vision_axes(self) -> dict:
        return {"pixel_values": {0: "batch"}, "image_features": {0: "batch"}}

    def vision_maps(self, model, s: Sample) -> list[np.ndarray]:  # pragma: no cover - every family defines it
        """transformers' eager maps of the vision layers the export keeps, one per prompt row as attnviz shows
        them."""
        raise NotImplementedError

    # -- the decoder graph --------------------------------------------------------
    def decoder(self, model, layers: int):
        return Decoder(model, layers)

    def decoder_inputs(self, past: int, new: int) -> tuple[dict, dict]:
        """The decoder's inputs after ``inputs_embeds`` and ``attention_mask`` (``position_ids`` and any the
        family adds), for tracing with ``past`` cached and ``new`` tokens, and their dynamic axes."""
        import torch

        return {"position_ids": torch.arange(past, past + new)[None]}, {"position_ids": {0: "batch", 1: "sequence"}}

    # -- the check's inputs -------------------------------------------------------
    def pixels(self, model, g) -> tuple[np.ndarray, np.ndarray]:
        """Seeded ``pixel_values`` as attnviz's set takes them: a batch of two rows, then one row (traced on)."""
        import torch

        vcfg = model.config.vision_config
        size = vcfg.image_size if isinstance(vcfg.image_size, int) else vcfg.image_size[0]
        px = torch.randn(2, int(getattr(vcfg, "num_channels", 3) or 3), size, size, generator=g).numpy()
        return px, px[1:]

    def layout(self, model, tok, text: str, token: int, n: int, bos: int | None) -> list[int]:
        """The text's ids with one image's ``n`` placeholder tokens after the leading BOS (as LLaVA's processor
        expands ``<image>`` once per feature)."""
        ids = list(tok(text)["input_ids"])
        head = ids[:1] if ids and bos is not None and ids[0] == bos else []
        return head + [token] * n + ids[len(head) :]

    def torch_kw(self, model, pixels: np.ndarray, ids: np.ndarray) -> dict:
        """transformers' keywords for the image and prompt (besides ``output_attentions``)."""
        import torch

        t = torch.as_tensor(ids)
        return {"input_ids": t, "pixel_values": torch.as_tensor(pixels), "attention_mask": torch.ones_like(t)}

    def sample(self, model, pixels: np.ndarray, ids: np.ndarray) -> Sample:
        feeds = {"pixel_values": pixels, "input_ids": ids, "attention_mask": np.ones_like(ids)}
        return Sample(feeds, self.torch_kw(model, pixels, ids))

    def features(self, model, pixels: np.ndarray) -> int:
        """How many image tokens one row's image gives (the vision graph's features, per row)."""
        import torch

        with torch.no_grad():
            out = self.vision(model).eval()(*self.vision_inputs(model, pixels).values())
        return int(np.prod(out.shape[:-1]))

    def samples(self, model, tok, texts: tuple[str, ...], bos: int | None) -> list[Sample]:
        """A batch of two seeded images with two prompts cut to one length (no padding), then one image with the
        longer prompt (a traced length would show there)."""
        import torch

        batch_px, one_px = self.pixels(model, torch.Generator().manual_seed(0))
        token = image_token(model.config)
        rows = [self.layout(model, tok, t, token, self.features(model, batch_px[:1]), bos) for t in texts]
        short = min(len(r) for r in rows)
        out = [self.sample(model, batch_px, np.asarray([r[:short] for r in rows], np.int64))]
        if batch_px.shape[0] == 1:  # a family that runs one image at a time: the first text alone
            out = [self.sample(model, batch_px, np.asarray(rows[:1], np.int64))]
        last = self.layout(model, tok, texts[-1], token, self.features(model, one_px), bos)
        return [*out, self.sample(model, one_px, np.asarray([last], np.int64))]

    def generate_kw(self, s: Sample) -> dict:
        """transformers' keywords for ``generate`` on the sample (its row of one)."""
        return dict(s.torch_kw)

    def reset(self, model) -> None:
        """Forget what a previous forward left in the model (Qwen2-VL's rope deltas)."""
