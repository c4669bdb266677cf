"""Word alignments from the cross-attention of any encoder-decoder ONNX model (``attnviz align``).

For each sentence pair (whitespace-separated words, the Pharaoh convention) the model runs teacher-forced on
``[decoder start] + target subwords``; its cross-attention maps (``[L, H, Tq, Tk]``) are merged back to words
and read as links by :mod:`attnviz.core.align`.  Subword -> word maps come from the model's own tokenizer fed
the *pre-split* words (a Hugging Face ``tokenizer.json`` reports the word of every piece), so a word the
tokenizer splits stays one word and punctuation glued to a word stays with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnviz import AttnvizError
from attnviz.core import align
from attnviz.core import metadata as md


@dataclass
class Encoded:
    ids: list[int]
    word_ids: list[int]  # word index of each piece, -1 for specials


@dataclass
class PairAttention:
    """The cross-attention of one sentence pair with its word maps."""

    attn: np.ndarray  # [L, H, Tq, Tk] float32; rows = [start] + target pieces
    src: Encoded
    tgt: Encoded
    n_src: int
    n_tgt: int

    def sample(self, convention: str, sure=(), possible=()) -> align.AlignmentSample:
        qw = align.row_words(self.tgt.word_ids, convention, n_rows=self.attn.shape[2])
        return align.AlignmentSample(self.attn, qw, self.src.word_ids, self.n_src, self.n_tgt, set(sure), set(possible))


def encode_words(encoder, words: list[str], special: bool) -> Encoded:
    """Pieces of a pre-split sentence and the word of each piece (``special``: add the tokenizer's specials)."""
    tok = getattr(encoder, "tok", None)
    if tok is not None:  # a Hugging Face tokenizers.Tokenizer: it knows each piece's word
        enc = tok.encode(words, is_pretokenized=True, add_special_tokens=special)
        return Encoded(list(enc.ids), [-1 if w is None else int(w) for w in enc.word_ids])
    # a plain vocabulary (metadata list): encode word by word, then add the specials the full encoding has
    ids: list[int] = []
    wids: list[int] = []
    for k, w in enumerate(words):
        e = encoder.encode(w, add_special=False)
        ids += e.ids
        wids += [k] * len(e.ids)
    if special:
        full = encoder.encode(" ".join(words), add_special=True)
        lead = next((i for i, s in enumerate(full.special) if not s), len(full.special))
        trail = len(full.ids) - lead - len(ids)
        if trail >= 0:
            ids = full.ids[:lead] + ids + full.ids[len(full.ids) - trail :]
            wids = [-1] * lead + wids + [-1] * trail
    return Encoded(ids, wids)


def _fill(model, feeds: dict, ids: list[int], roles: dict[str, str]) -> None:
    """Token ids plus the mask / type / position inputs of one side (``roles``: generic -> the model's role)."""
    n = len(ids)
    for i in model.inputs:
        role = model.roles[i.name]
        dtype = np.dtype(i.dtype) if i.dtype in ("int64", "int32", "float32", "bool") else np.int64
        if role == roles["tokens"]:
            feeds[i.name] = np.asarray([ids], dtype=dtype)
        elif role == roles["mask"]:
            feeds[i.name] = np.ones((1, n), dtype=dtype)
        elif role == roles.get("token_types"):
            feeds[i.name] = np.zeros((1, n), dtype=dtype)
        elif role == roles.get("positions"):
            feeds[i.name] = np.arange(n, dtype=dtype)[None]


class Aligner:
    """Runs one encoder-decoder model on sentence pairs and returns :class:`PairAttention`."""

    def __init__(self, model):
        self.model = model
        roles = set(model.roles.values())
        cross = [i for i, s in enumerate(model.sites) if s.kind == "cross"]
        if "decoder_tokens" not in roles or "tokens" not in roles or not cross:
            raise AttnvizError(f"{model.path.name} is not an encoder-decoder text model with cross-attention "
                               f"(it is a {model.kind} model); attnviz align needs one")
        self.src_tok, tgt_tok = model.tokenizers
        if self.src_tok is None:
            raise AttnvizError(f"no tokenizer for {model.path.name}: put tokenizer.json beside the model or pass --tokenizer FILE")
        self.tgt_tok = tgt_tok or self.src_tok
        sp = model.meta.get("special") if isinstance(model.meta.get("special"), dict) else {}
        self.start = int(sp.get("decoder_start", sp.get("bos", 0)))
        self.declared = md.alignment_heads(model.meta)

    def run(self, src_words: list[str], tgt_words: list[str]) -> PairAttention:
        src = encode_words(self.src_tok, src_words, special=True)
        tgt = encode_words(self.tgt_tok, tgt_words, special=False)
        feeds: dict[str, np.ndarray] = {}
        _fill(self.model, feeds, src.ids, {"tokens": "tokens", "mask": "mask", "token_types": "token_types",
                                           "positions": "positions"})
        _fill(self.model, feeds, [self.start] + tgt.ids, {"tokens": "decoder_tokens", "mask": "decoder_mask"})
        result = self.model.analyze(feeds=feeds, mode="dense")
        cross = sorted((s.layer, i) for i, s in enumerate(result.sites) if s.kind == "cross")
        attn = np.stack([np.asarray(result.maps[i].array()[0], dtype=np.float32) for _, i in cross])  # (L, H, Tq, Tk)
        return PairAttention(attn, src, tgt, len(src_words), len(tgt_words))


def select(attn: np.ndarray, head: tuple[int, int] | None = None, layer: int | None = None) -> np.ndarray:
    """``[Tq, Tk]`` map to read links from: one head, one layer's head mean, or the mean of everything."""
    if head is not None:
        return attn[head[0], head[1]]
    if layer is not None:
        return attn[layer].mean(0)
    return attn.mean((0, 1))
