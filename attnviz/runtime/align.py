"""Word alignments from the cross-attention of any encoder-decoder ONNX model (``attnviz align``).

For each sentence pair (whitespace-separated words, the Pharaoh convention) the model runs teacher-forced on
``[decoder start] + target subwords``; its cross-attention maps (``[L, H, Tq, Tk]``) are merged back to words
and read as links by :mod:`attnviz.core.align`.  Subword -> word maps come from the model's own tokenizer fed
the *pre-split* words (a Hugging Face ``tokenizer.json`` reports the word of every piece), so a word the
tokenizer splits stays one word and punctuation glued to a word stays with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from attnviz import AttnvizError
from attnviz.core import align
from attnviz.core import metadata as md
from attnviz.core.rows import beam_rows
from attnviz.core.setting_words import fix
from attnviz.core.words import with_article
from attnviz.runtime.errors import Cancelled
from attnviz.runtime.inputs import HFTokenizer, TextEncoder

if TYPE_CHECKING:
    from attnviz.runtime.protocol import AttnModel
from attnviz.runtime.limits import SHORTEN, check_positions


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


def encode_words(encoder: TextEncoder, words: list[str], special: bool) -> Encoded:
    """Pieces of a pre-split sentence and the word of each piece (``special``: add the tokenizer's specials)."""
    if isinstance(encoder, HFTokenizer):  # a Hugging Face tokenizers.Tokenizer: it knows each piece's word
        enc = encoder.encode_words(words, special)  # guarded: a failure is one line, as any encode's
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


def _fill(model: AttnModel, feeds: dict, ids: list[int], roles: dict[str, str]) -> None:
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

    def __init__(self, model: AttnModel):
        self.model = model
        roles = set(model.roles.values())
        cross = [i for i, s in enumerate(model.sites) if s.kind == "cross"]
        if "decoder_tokens" not in roles or "tokens" not in roles or not cross:
            raise AttnvizError(
                f"{model.path.name} is not an encoder-decoder text model with cross-attention "
                f"(it is {with_article(model.kind)} model); attnviz align needs one"
            )
        src_tok, tgt_tok = model.tokenizers
        if src_tok is None:
            raise AttnvizError(
                f"no tokenizer for {model.path.name}: put tokenizer.json beside the model or {fix('tokenizer')}"
            )
        self.src_tok: TextEncoder = src_tok
        self.tgt_tok: TextEncoder = tgt_tok or src_tok
        sp = md.section(model.meta, "special")
        self.start = int(sp.get("decoder_start", sp.get("bos", 0)))
        self.declared = md.alignment_heads(model.meta)
        eos = sp.get("eos")
        self.eos = int(eos) if eos is not None else None

    def source(self, src_words: list[str]) -> tuple[Encoded, dict[str, np.ndarray]]:
        """The source's pieces (each with its word) and the encoder's feeds of them (position limit checked)."""
        src = encode_words(self.src_tok, src_words, special=True)
        check_positions(self.model, len(src.ids), "the source sentence", SHORTEN)
        feeds: dict[str, np.ndarray] = {}
        _fill(
            self.model,
            feeds,
            src.ids,
            {"tokens": "tokens", "mask": "mask", "token_types": "token_types", "positions": "positions"},
        )
        return src, feeds

    def run(self, src_words: list[str], tgt_words: list[str]) -> PairAttention:
        src, feeds = self.source(src_words)
        tgt = encode_words(self.tgt_tok, tgt_words, special=False)
        check_positions(self.model, len(tgt.ids) + 1, "the target sentence", SHORTEN)  # + the decoder's start
        _fill(self.model, feeds, [self.start] + tgt.ids, {"tokens": "decoder_tokens", "mask": "decoder_mask"})
        result = self.model.analyze(feeds=feeds, mode="dense")
        return PairAttention(_cross(result, 0), src, tgt, len(src_words), len(tgt_words))

    def steps_for(self, src_words: list[str]) -> int:
        """The default generation length: twice the source's pieces plus 10, within the decoder's positions."""
        n = 2 * len(encode_words(self.src_tok, src_words, special=True).ids) + 10
        return self.max_steps(n)

    def max_steps(self, n: int) -> int:
        """``n`` steps, or as many as the decoder's positions take: a translation cut short is run teacher-forced
        on ``[start] + its pieces``, so one fewer than the positions."""
        from attnviz.core.limits import limit as cap

        n = min(n, cap("generate"))  # the default for a very long source stays within the generation cap
        limit = self.model.position_limit
        return min(n, max(1, limit.tokens - 1)) if limit is not None else n

    def translate(self, src_words: list[str], steps: int, beams: int = 1) -> Translation:
        """The model's own translation of ``src_words`` (greedy, or the best of a ``beams``-beam search) as words,
        with the cross-attention the search ran it with.  Its words are the target tokenizer's decoding of the
        generated pieces split at spaces, the words the teacher-forced path (:meth:`run`) would be given; where
        those words encode to other pieces than the generated ones, or the search stopped before EOS (its last
        piece never read back: no row for it), the words are run teacher-forced instead, so that the links are
        always those of the words written."""
        src, feeds = self.source(src_words)
        result = self.model.analyze(feeds=feeds, generate=steps, beams=beams, mode="dense")
        best = beam_rows(result)
        ids = [int(t) for t in (best[0]["ids"] if best else result.info.get("generated_ids") or [])]
        ended = bool(ids) and self.eos is not None and ids[-1] == self.eos
        pieces = ids[:-1] if ended else ids
        words = self.tgt_tok.decode(pieces).split() if pieces else []
        if not words:
            return Translation([], None, ended, False)
        tgt = encode_words(self.tgt_tok, words, special=False)
        if ended and tgt.ids == pieces:  # the searched rows are the words' own: [start] + every piece
            attn = _cross(result, 0)[:, :, : len(pieces) + 1, : len(src.ids)]
            return Translation(words, PairAttention(attn, src, tgt, len(src_words), len(words)), ended, False)
        return Translation(words, self.run(src_words, words), ended, True)


@dataclass
class Translation:
    """A model's own translation of one sentence (:meth:`Aligner.translate`)."""

    words: list[str]  # [] when the search chose EOS first
    pair: PairAttention | None  # the words' cross-attention (None: no words)
    ended: bool  # the search reached EOS within its steps
    rerun: bool  # the words were run teacher-forced (not the search's own pieces or rows)


def _cross(result, row: int) -> np.ndarray:
    """Batch row ``row``'s cross-attention maps of ``result``, ``[L, H, Tq, Tk]`` in layer order."""
    cross = sorted((s.layer, i) for i, s in enumerate(result.sites) if s.kind == "cross")
    return np.stack([np.asarray(result.maps[i].array()[row], dtype=np.float32) for _, i in cross])


def select(attn: np.ndarray, head: tuple[int, int] | None = None, layer: int | None = None) -> np.ndarray:
    """``[Tq, Tk]`` map to read links from: one head, one layer's head mean, or the mean of everything."""
    if head is not None:
        return attn[head[0], head[1]]
    if layer is not None:
        return attn[layer].mean(0)
    return attn.mean((0, 1))


def pharaoh_set(gold_path) -> tuple:
    """``(src, tgt, gold)`` paths of a test set named by its gold file: ``X.gold`` (or any name) with ``X.src``
    and ``X.tgt`` beside it (what :func:`attnviz.training.data_translation.write_pharaoh_files` writes)."""
    from pathlib import Path

    gold = Path(gold_path)
    src, tgt = gold.with_suffix(".src"), gold.with_suffix(".tgt")
    missing = [p.name for p in (gold, src, tgt) if not p.is_file()]
    if missing:
        raise AttnvizError(
            f"gold alignments need {gold.stem}.src, {gold.stem}.tgt and the Pharaoh file side by side "
            f"in {gold.parent}; missing: {', '.join(missing)}"
        )
    return src, tgt, gold


def score_test_set(model: AttnModel, gold_path, convention: str | None = None, cancelled=None) -> dict:
    """Per-head / per-layer AER, precision and recall of ``model`` on a Pharaoh test set (:func:`pharaoh_set`).

    ``convention`` defaults to the model's declared one, else "predict".  Returns
    :func:`attnviz.core.align.alignment_table` plus ``"convention"`` and ``"name"``.
    """
    src, tgt, gold_file = pharaoh_set(gold_path)
    try:
        src_lines, tgt_lines = align.read_lines(src), align.read_lines(tgt)
        gold = align.read_pharaoh(gold_file)
    except (OSError, UnicodeDecodeError) as e:
        raise AttnvizError(f"cannot read the test set {gold_file.stem}: {e}") from None
    except align.PharaohError as e:
        raise AttnvizError(str(e)) from None
    if not (len(src_lines) == len(tgt_lines) == len(gold)) or not gold:
        raise AttnvizError(
            f"{gold_file.stem}: .src, .tgt and the gold file need the same number of lines "
            f"(they have {len(src_lines)}, {len(tgt_lines)}, {len(gold)})"
        )
    # a gold set that never links a punctuation-only target word (e.g. the NT set) does not ask for one:
    # give those words no link instead of counting them as errors
    punct = [[is_punctuation(w) for w in t.split()] for t in tgt_lines]
    skip_punct = not any(punct[k][j] for k, g in enumerate(gold) for _, j in g[0] | g[1] if j < len(punct[k]))
    aligner = Aligner(model)
    if convention is None:
        convention = aligner.declared[1] if aligner.declared else "predict"
    samples = []
    for k, (s, t, g) in enumerate(zip(src_lines, tgt_lines, gold)):
        if cancelled is not None and cancelled():
            raise Cancelled("cancelled")
        sw, tw = s.split(), t.split()
        if not sw or not tw:
            raise AttnvizError(f"{gold_file.stem} line {k + 1}: an empty sentence; every line needs a word")
        try:
            align.check_gold(g, len(sw), len(tw), f"{gold_file.name} line {k + 1}: ")
        except align.PharaohError as e:
            raise AttnvizError(str(e)) from None
        sample = aligner.run(sw, tw).sample(convention, *g)
        if skip_punct:
            sample.skip = punct[k]
        samples.append(sample)
    table = align.alignment_table(samples)
    return {**table, "convention": convention, "name": gold_file.stem, "skip_punctuation": skip_punct}


def is_punctuation(word: str) -> bool:
    """True for a word made only of Unicode punctuation ("," "." "“" "—")."""
    import unicodedata

    return bool(word) and all(unicodedata.category(c).startswith("P") for c in word)
