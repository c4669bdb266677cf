"""PaliGemma (SigLIP vision tower + linear projector, Gemma decoder).

The processor (``PaliGemmaProcessor``): the image resized to the tower's size (attnviz's own resize / rescale /
normalise with the folder's SigLIP mean and std), every patch an image token (no CLS); the prompt laid out as
``<image>``×``image_seq_length`` + BOS + the prefix text + ``"\\n"`` (BOS after the last ``<image>``; a prompt
without one gets it in front), tokenized whole with no further special tokens, token type 0; a suffix (the
tokenizer's pair) + EOS follows with token type 1.

The decoder attends bidirectionally over token type 0 (the image and the prefix) and causally after it;
transformers builds that mask from ``token_type_ids`` and counts positions from 1.  A decoder file with a
``token_type_ids`` input is fed them (0 through the prefix's closing newline, 1 after); the Hub's files have none
(the language model alone, whose mask is causal), and attnviz says so in one line rather than pass causal maps off
as the model's.
"""

from __future__ import annotations

import numpy as np

from attnviz import AttnvizError
from attnviz.core.patch_names import patch_name
from attnviz.runtime import inputs as ip
from attnviz.runtime.vlm_families.base import Family, config_int
from attnviz.runtime.vlm_families.llava import LlavaTokens

IMAGE = "<image>"
NO_PREFIX_MASK = (
    "PaliGemma attends bidirectionally over the image and the prompt prefix (transformers builds that mask from "
    "token_type_ids), but this decoder file takes no token_type_ids and builds a causal mask from its 2-D "
    "attention_mask: these are the export's maps and tokens, not the model's; re-export the decoder with a "
    "token_type_ids input (PaliGemmaModel on inputs_embeds)"
)


class PaliGemma(Family):
    name = "paligemma"
    placeholder = IMAGE
    placed_when_missing = True  # PaliGemmaProcessor puts the image's tokens in front of a prompt without <image>
    position_offset = 1  # PaliGemma's positions count from 1 (PaliGemmaModel.forward, prepare_inputs_for_generation)
    # PaliGemmaProcessor takes a list of images for one text: each <image> (or, without any, one per image in
    # front) becomes one image's tokens, in order, all before the BOS; the model scatters each image's features
    # into its run, in order
    several_images = True

    def __init__(self, config: dict, preprocessor: dict, processor: dict, where: str):
        super().__init__(config, preprocessor, processor, where)
        vision, text = config.get("vision_config"), config.get("text_config")
        if not isinstance(vision, dict) or not isinstance(text, dict):
            raise AttnvizError(f"{where}: config.json has no vision_config / text_config; give the repository's own")
        token = config.get("image_token_index", config.get("image_token_id"))
        if not isinstance(token, int) or isinstance(token, bool):
            raise AttnvizError(f"{where}: config.json has no image_token_index; give the repository's own")
        self.token = token
        self.bos = config_int(text, "bos_token_id", where) if "bos_token_id" in text else 2
        self.eos = config_int(text, "eos_token_id", where) if "eos_token_id" in text else 1
        self.rows = self.cols = config_int(vision, "image_size", where) // config_int(vision, "patch_size", where)
        declared = preprocessor.get("image_seq_length")
        if isinstance(declared, int) and declared != self.n:
            raise AttnvizError(
                f"{where}: the processor expands <image> to {declared} tokens and the vision grid has {self.n} "
                "patches; the config files do not belong together"
            )

    @property
    def n(self) -> int:
        return self.rows * self.cols

    def label(self, k: int) -> str:
        return patch_name(*divmod(k % self.n, self.cols))  # as the tower names its patch (core/patch_names.py)

    newline: int | None = None  # the tokenizer's "\n" (the prefix's closing token), known once tokens() is made

    def tokens(self, inner: ip.TextEncoder) -> ip.TextEncoder:
        tok = PaliGemmaTokens(inner, self)
        self.newline = tok.newline
        return tok

    def probe_ids(self) -> list[int]:
        return [self.token] * self.n + [self.bos]

    def decoder_notes(self, decoder_inputs: list[ip.IOInfo]) -> list[str]:
        return [] if any(i.name == "token_type_ids" for i in decoder_inputs) else [NO_PREFIX_MASK]

    def token_types(self, ids: np.ndarray) -> np.ndarray:
        """The processor's token types from the ids: 0 through the prefix's closing newline (the first after the
        BOS that follows the image tokens), 1 after it; a row with no such newline is prefix throughout."""
        out = np.zeros(ids.shape, np.int64)
        for b, row in enumerate(ids):
            images = np.flatnonzero(row == self.token)
            start = images[-1] + 1 if images.size else 0
            ends = np.flatnonzero(row[start:] == self.newline) if self.newline is not None else np.zeros(0, int)
            if ends.size:
                out[b, start + ends[0] + 1 :] = 1
        return out

    def describe(self) -> dict:
        return super().describe() | {"grid": [self.rows, self.cols], "prefix": "bidirectional over token type 0"}


class PaliGemmaTokens(LlavaTokens):
    """The folder's tokenizer with PaliGemmaProcessor's layout: the image tokens (``(r,c)``), BOS, the prefix,
    ``"\\n"``; a pair (the suffix) with EOS after it."""

    def __init__(self, inner: ip.TextEncoder, family: PaliGemma, count: int = 1):
        # the labels, grid and special ids are LLaVA's (a run of image tokens on one grid each); the layout its own
        super().__init__(inner, family, count)
        self.pali = family
        nl = inner.encode("\n", add_special=False).ids
        self.newline = nl[0] if len(nl) == 1 else None  # the prefix's closing token (token types switch after it)

    def for_images(self, tiles_each: list) -> ip.TextEncoder:
        return self if len(tiles_each) <= 1 else PaliGemmaTokens(self.inner, self.pali, len(tiles_each))

    def encode(self, text: str, pair: str | None = None, add_special: bool = True) -> ip.Encoded:
        fam = self.pali
        if IMAGE not in text:  # the processor's own fallback: each image's tokens in front
            text = IMAGE * self.count + text
        elif self.count > 1 and text.count(IMAGE) != self.count:
            raise fam.placeholder_count(text.count(IMAGE), self.count)
        end = text.rfind(IMAGE) + len(IMAGE)
        before, after = text[:end], text[end:]
        head = self.inner.encode(before.replace(IMAGE, IMAGE * fam.n), add_special=False)
        prefix = self.inner.encode(after + "\n", add_special=False)
        ids = [*head.ids, fam.bos, *prefix.ids]
        types = [0] * len(ids)
        if pair is not None:
            suffix = self.inner.encode(pair, add_special=False).ids + [fam.eos]
            ids += suffix
            types += [1] * len(suffix)
        if sum(i == fam.token for i in ids) % fam.n:
            raise AttnvizError(f"the tokenizer does not keep {IMAGE} as one token; give the repository's own tokenizer")
        return ip.Encoded(ids, self.row_labels(ids), [self.is_special(i) for i in ids], types)
