"""PaliGemma (SigLIP + linear projector, Gemma decoder): the decoder attends bidirectionally over the image and the
prompt prefix (token type 0) and causally after it.

transformers builds that mask inside ``PaliGemmaModel.forward`` from ``token_type_ids``; the language model alone
(what most Hub exports hold) is causal, so its maps are not the model's.  The exported decoder therefore takes
``token_type_ids`` after ``position_ids`` and builds the model's mask itself: a key is seen when the query is at
or after it, or when both are prefix tokens of the tokens fed in this run.  With an empty cache that is
transformers' first-step mask; a cached step feeds suffix tokens (type 1), for which it is causal, as
transformers' steps are.  attnviz feeds the token types from the ids (0 through the prefix's closing newline).
The processor's layout: the image's tokens, BOS, the prefix, ``"\\n"``, then the suffix (type 1); positions count
from 1.
"""

from __future__ import annotations

import numpy as np

from attnviz.training.hf_onnx import _torch_nn_module
from attnviz.training.hf_vlm_families.base import Decoder, Recipe, Sample, filled_cache


class PaliGemmaVision(_torch_nn_module()):  # type: ignore[misc]
    """``pixel_values`` -> ``image_features`` (``PaliGemmaModel.get_image_features``: SigLIP's last states through
    the projector, scaled)."""

    def __init__(self, model):
        super().__init__()
        self.inner = model.model

    def forward(self, pixel_values):
        return self.inner.get_image_features(pixel_values).pooler_output


class PrefixDecoder(Decoder):
    """``inputs_embeds``, ``attention_mask``, ``position_ids``, ``token_type_ids``, past key/values -> logits,
    present key/values, with PaliGemma's prefix mask (see the module's docstring)."""

    def forward(self, inputs_embeds, attention_mask, position_ids, token_type_ids, *past):
        import torch

        cache = filled_cache(self.lm.config, past, self.layers)
        new, total = inputs_embeds.shape[1], attention_mask.shape[1]
        offset = total - new  # the cached tokens before these
        q = torch.arange(new, device=inputs_embeds.device)[:, None] + offset
        k = torch.arange(total, device=inputs_embeds.device)[None, :]
        # prefix tokens of this run see each other (keys beyond the cache indexed into the run's token types)
        key_types = torch.cat([torch.ones_like(attention_mask[:, :offset]), token_type_ids], dim=1)
        prefix = (token_type_ids[:, :, None] == 0) & (key_types[:, None, :] == 0)
        seen = ((k <= q)[None] | prefix) & (attention_mask[:, None, :] != 0)
        floor = torch.finfo(inputs_embeds.dtype).min
        mask = torch.zeros(seen.shape, dtype=inputs_embeds.dtype).masked_fill(~seen, floor)[:, None]
        window = getattr(self.lm.config, "sliding_window", None)
        if window:  # PaliGemma 2 (Gemma 2): its sliding layers see the last ``window`` keys of the same mask
            near = torch.zeros_like(mask).masked_fill((k <= q - window)[None, None], floor)
            mask = {"full_attention": mask, "sliding_attention": torch.minimum(mask, near)}
        return self.step(inputs_embeds, mask, position_ids, cache)


class PaliGemma(Recipe):
    newline: int | None = None  # the tokenizer's "\n" (the prefix's closing token), learnt in samples()

    def vision(self, model):
        return PaliGemmaVision(model)

    def vision_maps(self, model, s: Sample) -> list[np.ndarray]:
        import torch

        with torch.no_grad():
            v = model.model.vision_tower(torch.as_tensor(s.pixel_values), output_attentions=True)
        return [a.numpy() for a in v.attentions]

    def decoder(self, model, layers: int):
        return PrefixDecoder(model, layers)

    def decoder_inputs(self, past: int, new: int) -> tuple[dict, dict]:
        import torch

        inputs = {
            "position_ids": torch.arange(past, past + new)[None] + 1,
            # both kinds in the trace, so that neither is a constant of the graph
            "token_type_ids": (torch.arange(new)[None] >= new // 2).long(),
        }
        return inputs, {"position_ids": {0: "batch", 1: "sequence"}, "token_type_ids": {0: "batch", 1: "sequence"}}

    def layout(self, model, tok, text: str, token: int, n: int, bos: int | None) -> list[int]:
        """PaliGemmaProcessor's: the image's tokens, BOS, the first half of the words (the prefix), the newline,
        the rest (the suffix); without a one-token newline the whole text is prefix."""
        words = list(tok(text, add_special_tokens=False)["input_ids"])
        nl = self.newline
        head = [token] * n + ([bos] if bos is not None else [])
        if nl is None:
            return head + words
        half = max(1, len(words) // 2)
        return head + words[:half] + [nl] + words[half:]

    @staticmethod
    def _newline(tok) -> int | None:
        ids = tok("\n", add_special_tokens=False)["input_ids"]
        return int(ids[0]) if len(ids) == 1 else None

    def types(self, model, ids: np.ndarray) -> np.ndarray:
        """Token type 1 after the prefix's closing newline (the first after the image tokens), 0 before."""
        out = np.zeros(ids.shape, np.int64)
        nl = self.newline
        token = model.config.image_token_index
        for b, row in enumerate(ids):
            images = np.flatnonzero(row == token)
            start = images[-1] + 1 if images.size else 0
            ends = np.flatnonzero(row[start:] == nl) if nl is not None else np.zeros(0, int)
            if ends.size:
                out[b, start + ends[0] + 1 :] = 1
        return out

    def samples(self, model, tok, texts, bos):
        self.newline = self._newline(tok)
        return super().samples(model, tok, texts, bos)

    def torch_kw(self, model, pixels: np.ndarray, ids: np.ndarray) -> dict:
        import torch

        return super().torch_kw(model, pixels, ids) | {"token_type_ids": torch.as_tensor(self.types(model, ids))}
