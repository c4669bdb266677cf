"""Input adapters: text (HF tokenizer.json or a vocab from metadata), images, raw feeds."""

from __future__ import annotations

import contextlib
import functools
import itertools
import re
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnviz import AttnvizError
from attnviz.core import metadata as md
from attnviz.core.attention import PatchGrid
from attnviz.core.setting_words import fix as fix_words
from attnviz.core.untrusted import npz_problem, open_regular, parse_json, read_bytes, regular_file
from attnviz.core.words import dtype_words
from attnviz.runtime import byte_tokens as bt
from attnviz.runtime import tokenizer_file as tf
from attnviz.runtime.quiet_stderr import muted as _rust_guard  # the one stderr redirection, every thread's
from attnviz.runtime.raster import open_raster
from attnviz.runtime.sidecar import beside, sidecar

# HF naming conventions for inputs; metadata attnviz.inputs overrides
NAME_ROLES = [
    (re.compile(r"^decoder_input_ids$|^decoder_.*ids$"), "decoder_tokens"),
    (re.compile(r"^decoder_attention_mask$"), "decoder_mask"),
    (re.compile(r"input_ids$|^ids$|^tokens?$|^src$|^source$|^x_ids$"), "tokens"),
    (re.compile(r"attention_mask$|^mask$|padding_mask$"), "mask"),
    (re.compile(r"token_type_ids$|segment_ids$"), "token_types"),
    (re.compile(r"position_ids$"), "positions"),
    (re.compile(r"^cache_position$"), "cache_position"),
    (re.compile(r"pixel_values$|^image|^images?$|^pixels$"), "image"),
    (re.compile(r"^input_features$"), "audio"),  # log-mel frames (Whisper, Speech2Text)
    (re.compile(r"^input_values$"), "audio"),  # raw samples (wav2vec2, HuBERT, WavLM, data2vec-audio)
    (re.compile(r"past_key_values|^past_|\.key$|\.value$"), "past"),
    (re.compile(r"encoder_hidden_states|encoder_outputs?"), "encoder_states"),
    (re.compile(r"^tgt$|^target$|^target_ids$"), "decoder_tokens"),
]


@functools.lru_cache(maxsize=4096)  # every role lookup asks again (a model's roles are read per generation step)
def guess_role(name: str, dtype: str, rank: int) -> str:
    for rx, role in NAME_ROLES:
        if rx.search(name):
            return role
    if dtype.startswith("float") and rank == 4:
        return "image"
    if dtype.startswith("float") and rank == 3:
        return "series"
    if dtype.startswith("int") and rank == 2:
        return "tokens"
    return "unknown"


@dataclass
class IOInfo:
    """One declared input or output of a graph."""

    name: str
    dtype: str
    shape: list[int | str]  # ints for fixed dims, strings for symbolic ones

    @property
    def rank(self) -> int:
        return len(self.shape)

    def describe(self) -> str:
        return f"{self.name}: {self.dtype}[{', '.join(str(d) for d in self.shape)}]"


@dataclass
class Encoded:
    ids: list[int]
    tokens: list[str]
    special: list[bool]
    type_ids: list[int]


class TextEncoder:
    """What the runtime needs from a tokenizer."""

    unk_id: int | None = None
    # the tokenizer file's own padding (tokenizers' ``Tokenizer.padding``: pad_id, direction, a fixed length), kept
    # for a batch of texts (a dual encoder's candidates); None: the file sets none
    padding: dict | None = None

    def token_id(self, token: str) -> int | None:
        """The id of ``token`` in the vocabulary (None: not in it, or the tokenizer cannot say)."""
        return None

    def encode(self, text: str, pair: str | None = None, add_special: bool = True) -> Encoded:  # pragma: no cover
        raise NotImplementedError

    def encode_ids(self, text: str, pair: str | None = None, add_special: bool = True) -> Encoded:
        """:meth:`encode` where only ids, special flags and type ids are read (a corpus run): ``tokens`` may be
        left empty, as a tokenizer that builds its labels one by one does."""
        return self.encode(text, pair, add_special)

    def encode_many(self, texts: list[str], pairs: list[str | None] | None = None, add_special: bool = True):
        """:meth:`encode_ids` of each text (a corpus's items, in order): ``(ids, special, type_ids)`` flat numpy
        arrays and each text's token count.  A tokenizer that can encodes them in one call; this default goes
        one by one."""
        pairs = pairs or [None] * len(texts)
        encs = [self.encode_ids(t, p, add_special) for t, p in zip(texts, pairs)]
        ids = np.fromiter((v for e in encs for v in e.ids), np.int32)
        special = np.fromiter((v for e in encs for v in e.special), bool)
        types = np.fromiter((v for e in encs for v in (e.type_ids or [0] * len(e.ids))), np.int8)
        return ids, special, types, np.array([len(e.ids) for e in encs], np.int64)

    def leading_text(self, text: str, n: int) -> str:  # pragma: no cover
        """The start of ``text`` that its first ``n`` tokens cover (special tokens not counted): what a model
        given those tokens alone read of it (``--max-tokens``)."""
        raise NotImplementedError

    def label(self, i: int) -> str:  # pragma: no cover
        raise NotImplementedError

    def is_special(self, i: int) -> bool:
        return False

    def decode(self, ids) -> str:
        """The text of ``ids`` (special tokens kept): labels joined by spaces unless the tokenizer knows better."""
        return " ".join(self.label(int(i)) for i in ids)

    def row_labels(self, ids) -> list[str]:
        """A row's labels; a tokenizer whose labels depend on the position (a VLM's image tokens) overrides it."""
        return [self.label(int(i)) for i in ids]

    def image_grid(self, ids) -> PatchGrid | None:
        """Where a row's image tokens lie on the image (a vision–language decoder's tokenizer says), else None."""
        return None

    def for_image(self, tiles) -> TextEncoder:
        """This tokenizer for a prompt about one image split into ``tiles`` (a vision–language family's
        ``vlm_families.Tiles``, or None): the placeholder expansion of some families depends on the split."""
        return self

    def for_images(self, tiles_each: list) -> TextEncoder:
        """:meth:`for_image` for a prompt about the images whose splits ``tiles_each`` lists, in order (a family
        that takes several matches its placeholders to them in order, and refuses a prompt whose count differs)."""
        return self.for_image(tiles_each[-1] if tiles_each else None)

    def image_grids(self, ids) -> list[PatchGrid]:
        """Where each image's tokens lie on its image, in order (one grid per image of the row)."""
        g = self.image_grid(ids)
        return [] if g is None else [g]

    @property
    def size(self) -> int:  # pragma: no cover
        raise NotImplementedError


def one_image_per_run(name: str, count: int) -> None:
    """Refuse ``count`` > 1 images for a model that takes one image a run (every model but a vision–language set
    whose family takes several), in one line."""
    if count > 1:
        raise AttnvizError(
            f"{count} images given and {name} takes one image per run; {fix_words('one_image')}", param="image"
        )


def load_tokenizer(text: str, head: str, fix: str):
    """The ``tokenizers.Tokenizer`` in ``text``, or one line that says what the text is instead: ``head`` names it
    (a file, a model's metadata), ``fix`` ends the line."""
    from tokenizers import Tokenizer

    try:
        cfg = _parsed_json(text, head, fix)
    except AttnvizError as e:
        words = tf.text_problem(text)  # None: valid JSON the guard refused (nesting, digits): its line stands
        raise (_not_a_tokenizer(head, words, fix) if words else AttnvizError(str(e), param="tokenizer")) from None
    try:
        _check_template(cfg)
        with _rust_guard():
            return Tokenizer.from_str(text)
    except (KeyboardInterrupt, SystemExit):
        raise
    except tf.TemplateError as e:
        raise _not_a_tokenizer(head, str(e), fix) from None
    except BaseException:  # a Rust panic is a BaseException; serde's words are no help: say what the text is
        import tokenizers

        with _rust_guard():
            words = tf.json_problem(cfg, Tokenizer.from_str, tokenizers.__version__)
        raise _not_a_tokenizer(head, words, fix) from None


SAVED = "that save_pretrained (or tokenizer.save) wrote for the model"  # the file a refusal asks for


def encode_pretokenized(tok, words: list[str], add_special: bool, source: str):
    """``tok.encode(words, is_pretokenized=True)`` of a ``tokenizers.Tokenizer``, guarded as every encode here: a
    Rust panic's report kept off the terminal, and a failure one line (:func:`encode_error`; ``source`` names the
    tokenizer in it).  For :class:`HFTokenizer` and for callers holding a bare Tokenizer (training's translation
    data: attnviz/training/data_translation.py)."""
    try:
        with _rust_guard():
            return tok.encode(words, is_pretokenized=True, add_special_tokens=add_special)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:
        again = lambda t: t.encode(words, is_pretokenized=True, add_special_tokens=add_special)  # noqa: E731
        raise encode_error(tok, source, [("text", " ".join(map(str, words)))], list(words), again, False) from None


def encode_error(tok, source: str, texts: list[tuple[str, object]], pieces: list, again, pair: bool) -> AttnvizError:
    """One line on an encode of ``tok`` that raised or panicked: what is wrong with ``texts`` (what each is, its
    value) or with the tokenizer (``source`` names it), and the fix (:mod:`attnviz.runtime.encode_problem`); never
    the library's own words, which name its code.  ``pieces``: what was encoded (the texts, or a text's words);
    ``again(t)``: that encode with tokenizer ``t``."""
    from attnviz.runtime import encode_problem as ep

    p = ep.text_problem(texts) or ep.tokenizer_problem(tok, pieces, again, pair, _rust_guard)
    head = "" if p.param != "tokenizer" else f"tokenizer {source} cannot encode this text: "
    return AttnvizError(f"{head}{p.words}; {p.fix}", param=p.param)


class HFTokenizer(TextEncoder):
    def __init__(self, tok, source: str):
        self.padding = dict(tok.padding) if tok.padding else None  # before it is switched off below
        tok.no_padding()  # one sequence at a time: padding would only add [PAD] columns to every map
        # tokenizer.json truncation is a training-time choice (MiniLM's says 128 though its positions go to 512);
        # a viewer of long inputs keeps every token and says when the text is longer than that limit
        trunc = tok.truncation
        self.max_length = int(trunc["max_length"]) if trunc else None
        tok.no_truncation()
        self.tok = tok
        self.source = source
        # the unknown token's id, where the model names one (runtime/unknown_tokens.py: a text mostly of it is said)
        kind = tok.model  # the tokenizers library's model (WordPiece, BPE, ...), not an attention model
        unk = getattr(kind, "unk_token", None)
        self.unk_id = tok.token_to_id(unk) if isinstance(unk, str) and unk else None
        self._special = set()
        self._added = set()  # written as they read, never as a byte-level BPE's byte stand-ins
        try:
            for t in tok.get_added_tokens_decoder().values():
                self._added.add(t.content)
                if t.special:
                    self._special.add(t.content)
        except Exception:
            pass
        self.byte_level = _byte_level(tok)

    def token_id(self, token: str) -> int | None:
        return self.tok.token_to_id(token)

    @classmethod
    def from_file(cls, path: Path, beside_model: bool = False) -> HFTokenizer:
        """The tokenizer in ``path``: one the user gave, or (``beside_model``) the one found beside the model."""
        fix = (
            f"replace it with the tokenizer.json {SAVED}, or give another"
            if beside_model
            else f"give the tokenizer.json {SAVED}"
        )
        head = f"tokenizer file {path}"
        # regular files only: a FIFO named tokenizer.json must not block
        with _about_tokenizer():
            data = read_bytes(path, "tokenizer", 64 * 2**20)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise _not_a_tokenizer(head, tf.binary_problem(), fix) from None
        return cls._build(text, str(path), head, fix)

    @classmethod
    def from_str(cls, s: str, source: str) -> HFTokenizer:
        fix = "re-export the model, or give a tokenizer.json"
        return cls._build(s, source, f"the tokenizer in {source}", fix)

    @classmethod
    def _build(cls, text: str, source: str, head: str, fix: str) -> HFTokenizer:
        return cls(load_tokenizer(text, head, fix), source)

    def encode(self, text, pair=None, add_special=True):
        enc, out = self._encode(text, pair, add_special)
        out.tokens = [self._clean(t) for t in enc.tokens]
        return out

    def _clean(self, t: str) -> str:
        """The label of token ``t``: a byte-level BPE's bytes read as the text they stand for ('café', '注意',
        not 'cafÃ©', 'æ³¨æĦı'), then :func:`clean_token`."""
        text = bt.token_text(t) if self.byte_level and t not in self._added else None
        if text is None:
            return clean_token(t)
        return text.replace("\n", "\\n").strip() or clean_token(t)

    def encode_ids(self, text, pair=None, add_special=True):
        return self._encode(text, pair, add_special)[1]  # the labels cost a quarter of the encoding

    def _encode(self, text, pair, add_special):
        """The tokenizer's own encoding and an :class:`Encoded` of it without labels."""
        try:
            with _rust_guard():
                enc = self.tok.encode(text, pair, add_special_tokens=add_special)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:
            texts = [("text", text)] + ([("pair text", pair)] if pair is not None else [])
            again = lambda t: t.encode(text, pair, add_special_tokens=add_special)  # noqa: E731
            raise self._encode_error(texts, [t for _, t in texts], again, pair is not None) from None
        _check_tokens(len(enc.ids))
        sm = list(enc.special_tokens_mask) if enc.special_tokens_mask else [False] * len(enc.ids)
        return enc, Encoded(list(enc.ids), [], [bool(x) for x in sm], list(enc.type_ids))

    def encode_words(self, words: list[str], add_special: bool):
        """The tokenizer's own encoding of a text already split into ``words`` (each piece knows its word)."""
        return encode_pretokenized(self.tok, words, add_special, self.source)

    def _encode_error(self, texts: list[tuple[str, object]], pieces: list, again, pair: bool) -> AttnvizError:
        return encode_error(self.tok, self.source, texts, pieces, again, pair)

    def leading_text(self, text, n):
        enc = self._encode(text, None, False)[0]
        spans = [o for o, sp in zip(enc.offsets, enc.special_tokens_mask or [0] * len(enc.offsets)) if not sp]
        return text if n >= len(spans) else text[: spans[n - 1][1]] if n > 0 else ""

    def encode_many(self, texts, pairs=None, add_special=True):
        """One ``encode_batch`` (tokenizers' Rust threads, as a user's own batched script tokenises), read into flat
        arrays without a Python int per token.  Any failure goes one by one instead, so that the error names the
        text it came from."""
        if pairs is not None and any(p is not None for p in pairs):
            if any(p is None for p in pairs):  # a mix of single texts and pairs: one by one
                return super().encode_many(texts, pairs, add_special)
            inputs: list = list(zip(texts, pairs))
        else:
            inputs = list(texts)
        try:
            with _rust_guard(any_thread=False):  # a failure is encoded again one by one, each guarded
                encs = self.tok.encode_batch(inputs, add_special_tokens=add_special)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:
            return super().encode_many(texts, pairs, add_special)
        # each Encoding's lists are built anew at every attribute read: read once, flattened by C iterators (a
        # generator per token cost ~30 % more of the driver's CPU here, at 100k tokens)
        ids_of = [e.ids for e in encs]
        counts = np.fromiter(map(len, ids_of), np.int64, len(ids_of))
        try:
            if len(counts):
                _check_tokens(int(counts.max()))  # the longest fails if any does: one check, not one a text
        except AttnvizError:
            for c in counts:  # the first text over the limit, as each was checked in turn
                _check_tokens(int(c))
            raise
        n = int(counts.sum())
        flat = itertools.chain.from_iterable
        ids = np.fromiter(flat(ids_of), np.int32, n)
        special = np.fromiter(flat([e.special_tokens_mask for e in encs]), bool, n)
        types = np.fromiter(flat([e.type_ids for e in encs]), np.int8, n)
        return ids, special, types, counts

    def label(self, i):
        t = self.tok.id_to_token(int(i))
        return self._clean(t) if t is not None else f"<{i}>"

    def decode(self, ids):
        """The tokenizer's own decoding (a byte-level BPE's bytes joined into text, spaces where its tokens hold
        them): word timestamps split words where Whisper's tokenizer does."""
        try:
            with _rust_guard():
                return self.tok.decode([int(i) for i in ids], skip_special_tokens=False)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:  # the library's words name its code, not the file: say what failed and the fix
            raise AttnvizError(
                f"tokenizer {self.source} cannot turn these token ids back into text: its decoder fails on them; "
                f"give the tokenizer.json {SAVED}",
                param="tokenizer",
            ) from None

    def is_special(self, i):
        return self.tok.id_to_token(int(i)) in self._special

    @property
    def size(self):
        return self.tok.get_vocab_size(with_added_tokens=True)


class VocabTokenizer(TextEncoder):
    """A vocabulary list from metadata: whitespace (or character) split, exact lookup."""

    def __init__(
        self, vocab: list[str], special: dict | None = None, split: str = "whitespace", encoder_side: bool = True
    ):
        self.vocab = [str(v) for v in vocab]
        self.index = {v: i for i, v in enumerate(self.vocab)}
        self.special = {k: v for k, v in (special or {}).items() if isinstance(v, int)}
        self.special_ids = set(self.special.values())
        self.split = split
        self.encoder_side = encoder_side
        self.unk_id = self.special.get("unk")

    def encode(self, text, pair=None, add_special=True):
        def pieces(t):
            return list(t.replace(" ", "")) if self.split == "chars" else t.split()

        words = pieces(text) + (pieces(pair) if pair else [])
        ids = []
        for w in words:
            i = self.index.get(w)
            if i is None:
                i = self.index.get(w.lower())
            if i is None:
                if self.unk_id is None:
                    near = ", ".join(v for v in self.vocab[:12] if v not in ("",))
                    raise AttnvizError(
                        f"unknown token {w!r}: not in the model's vocabulary of {len(self.vocab)} "
                        f"(e.g. {near}, ...); use only known tokens"
                    )
                i = self.unk_id
            ids.append(i)
        _check_tokens(len(ids))
        if add_special and self.encoder_side:
            if "cls" in self.special:
                ids = [self.special["cls"]] + ids
            if "sep" in self.special:
                ids = ids + [self.special["sep"]]
        return Encoded(ids, [self.label(i) for i in ids], [i in self.special_ids for i in ids], [0] * len(ids))

    def leading_text(self, text, n):
        pieces = list(re.finditer("[^ ]" if self.split == "chars" else r"\S+", text))  # as encode splits it
        return text if n >= len(pieces) else text[: pieces[n - 1].end()] if n > 0 else ""

    def label(self, i):
        i = int(i)
        return self.vocab[i] if 0 <= i < len(self.vocab) else f"<{i}>"

    def is_special(self, i):
        return int(i) in self.special_ids

    @property
    def size(self):
        return len(self.vocab)


# --max-tokens N: the texts encoded within tokens_kept(N) are cut to N tokens after encoding, so the cap on a text's
# tokens (it bounds the maps: T x T a head) counts the N kept.  A 200,000-token line with --max-tokens 8 was refused
# with "200,000 tokens is over the limit ...; raise ATTNVIZ_MAX_TOKENS=200000": the flag asked for was the fix.
_KEPT: ContextVar[int | None] = ContextVar("attnviz_tokens_kept", default=None)


@contextlib.contextmanager
def tokens_kept(n: int | None):
    """Within: the texts encoded are cut to their first ``n`` tokens afterwards (None: kept whole)."""
    token = _KEPT.set(n)
    try:
        yield
    finally:
        _KEPT.reset(token)


def _check_tokens(n: int) -> None:
    from attnviz.core import limits

    kept = _KEPT.get()
    limits.check("tokens", n if kept is None else min(n, kept), "the text")


@contextlib.contextmanager
def _about_tokenizer():
    """A file check's refusal (no such file, a folder, unreadable, too large) is the tokenizer setting's to fix."""
    try:
        yield
    except AttnvizError as e:
        e.param = e.param or "tokenizer"
        raise


def _not_a_tokenizer(head: str, words: str, fix: str) -> AttnvizError:
    return AttnvizError(f"{head} is not a Hugging Face tokenizer.json: {words}; {fix}", param="tokenizer")


JSON_CHECKED = "json-checked"  # the cache's kind of a tokenizer text that parse_json accepted (optcache)


def _parsed_json(text: str, source: str, fix: str = ""):
    """``parse_json(text, source)``, without its guard against hostile JSON (``check_json``: two regex passes, ~10 ms
    CPU over MiniLM's 460 kB tokenizer.json, in every command that tokenises) where an earlier process parsed
    this very text: kept (:mod:`attnviz.runtime.optcache`) by the text's sha256, Python's version and the guard's
    code; only a text that parsed whole."""
    import sys

    from attnviz.runtime import optcache

    code = _guard_code()
    key = optcache.text_key(text, JSON_CHECKED, [sys.version, code]) if code is not None else None
    if optcache.passed(JSON_CHECKED, key):
        return parse_json(text, source, fix=fix, checked=True)
    value = parse_json(text, source, fix=fix)
    optcache.keep_passed(JSON_CHECKED, key)
    return value


@functools.cache
def _guard_code() -> str | None:
    """sha256 of the JSON guard's source (core/untrusted.py); None without it (nothing kept)."""
    from attnviz.core import untrusted
    from attnviz.runtime import optcache

    return optcache.sources_digest(untrusted.__file__)


def _check_template(cfg) -> None:
    """TemplateProcessing naming a special token it does not define panics in Rust at encode time: refuse it now."""
    post = cfg.get("post_processor") if isinstance(cfg, dict) else None
    procs = [post] if isinstance(post, dict) else []
    if isinstance(post, dict) and isinstance(post.get("processors"), list):
        procs += [p for p in post["processors"] if isinstance(p, dict)]
    for proc in procs:
        if proc.get("type") != "TemplateProcessing":
            continue
        defined = md.section(proc, "special_tokens")
        for part in ("single", "pair"):
            for piece in proc.get(part) or []:
                tok = piece.get("SpecialToken") if isinstance(piece, dict) else None
                if isinstance(tok, dict) and tok.get("id") not in defined:
                    raise tf.TemplateError(
                        f"its post_processor template uses special token {tok.get('id')!r} that it does not define"
                    )


def _byte_level(tok) -> bool:
    """Whether ``tok`` (a tokenizers Tokenizer) decodes as a byte-level BPE (its tokens stand for bytes)."""
    try:
        dec = tok.decoder
        return dec is not None and bt.is_byte_level(dec.__getstate__())
    except Exception:  # a decoder the library cannot describe: its tokens are shown as stored
        return False


def clean_token(t: str) -> str:
    """Readable labels: byte-level BPE 'Ġ' and sentencepiece '▁' mark a leading space."""
    if t is None:
        return ""
    return t.replace("Ġ", " ").replace("▁", " ").replace("Ċ", "\\n").strip() or t


def find_tokenizers(
    model_path: Path, meta: dict, explicit: str | None = None
) -> tuple[TextEncoder | None, TextEncoder | None]:
    """(encoder-side, decoder-side) tokenizers: --tokenizer, metadata, tokenizer.json beside the model, vocab."""
    special = md.section(meta, "special")
    split = str(meta.get("tokenize", "whitespace"))
    src: TextEncoder | None = None
    tgt: TextEncoder | None = None
    if explicit:
        with _about_tokenizer():
            p = regular_file(explicit, "tokenizer")
        src = tgt = HFTokenizer.from_file(p)
        return src, tgt
    if isinstance(meta.get("tokenizer"), str) and meta["tokenizer"].strip().startswith("{"):
        src = HFTokenizer.from_str(meta["tokenizer"], f"{model_path.name} metadata")
    if isinstance(meta.get("target_tokenizer"), str) and meta["target_tokenizer"].strip().startswith("{"):
        tgt = HFTokenizer.from_str(meta["target_tokenizer"], f"{model_path.name} metadata")
    if src is None:
        # MODEL.tokenizer.json, else the folder's tokenizer.json (a Hub repo's above onnx/: the sidecar guard)
        own = model_path.with_suffix(".tokenizer.json")
        cand = beside(model_path, own) if own.exists() else sidecar(model_path, "tokenizer.json")
        if cand is not None:
            src = HFTokenizer.from_file(cand, beside_model=True)
    vocab = meta.get("vocab")
    if src is None and vocab is not None:
        if isinstance(vocab, dict):
            src_special = md.section(special, "source")
            src = VocabTokenizer(vocab.get("source", []), src_special, split)
            if tgt is None:
                tgt = VocabTokenizer(vocab.get("target", []), special, split, encoder_side=False)
        elif isinstance(vocab, list):
            src = VocabTokenizer(vocab, special, split)
    if tgt is None and isinstance(vocab, list) and src is not None and not isinstance(src, HFTokenizer):
        tgt = VocabTokenizer(vocab, special, split, encoder_side=False)
    if tgt is None:
        tgt = src
    return src, tgt


# --------------------------------------------------------------------------- images
@dataclass
class ImageSpec:
    height: int
    width: int
    channels: int
    mean: list[float]
    std: list[float]
    source: str  # where these numbers came from
    preset: str = "custom"  # attnviz.core.preprocess preset the mean/std match
    stats_source: str = "metadata"  # where mean/std came from: metadata | given | the default preset

    def describe(self) -> str:
        """One line for the run info, the sidebar and figure recipes."""
        f = lambda xs: "/".join(f"{x:.3g}" for x in xs)  # noqa: E731
        return f"{self.preset} (mean {f(self.mean)}, std {f(self.std)}), {self.height}×{self.width}, from {self.stats_source}"


def image_spec(
    meta: dict,
    input_shape: list,
    size: tuple[int, int] | None = None,
    mean: list[float] | None = None,
    std: list[float] | None = None,
) -> ImageSpec:
    im = md.section(meta, "image")
    ch = _image_int(im.get("channels"), "channels") or (
        input_shape[1] if len(input_shape) == 4 and isinstance(input_shape[1], int) else 3
    )
    src = "metadata" if im else "defaults"
    if size is not None and not all(type(v) is int and 0 < v <= IMAGE_MAX_SIDE for v in size):
        raise AttnvizError(
            f"--image-size {' '.join(map(str, size))}: give the height and width in pixels, each in 1..{IMAGE_MAX_SIDE}"
        )
    if size is None:
        if im.get("size"):
            s = im["size"]
            s = list(s) if isinstance(s, (list, tuple)) and len(s) == 2 else [s, s]
            size = (_image_int(s[0], "size"), _image_int(s[1], "size"))
        elif len(input_shape) == 4 and all(isinstance(d, int) and d > 0 for d in input_shape[2:]):
            size = (int(input_shape[2]), int(input_shape[3]))
            src = "input shape"
        else:
            size = (224, 224)
    from attnviz.core import preprocess

    stats_src = (
        "given"
        if (mean or std)
        else "metadata"
        if (im.get("mean") or im.get("std"))
        else f"default preset {preprocess.DEFAULT} (the model's metadata has no image statistics)"
    )
    dm, ds = preprocess.stats(preprocess.DEFAULT, ch)
    m = mean or _image_floats(im.get("mean"), "mean") or dm
    s = std or _image_floats(im.get("std"), "std") or ds
    m, s = [float(x) for x in m], [float(x) for x in s]
    if ch == 1 and len(m) == 3:  # an RGB preset for a grey model: the channel average
        m, s = [sum(m) / 3], [sum(s) / 3]
    return ImageSpec(size[0], size[1], ch, m, s, src, preprocess.name_of(m, s), stats_src)


IMAGE_MAX_SIDE = 16384  # pixels a side a model's image input may ask for; more is no model's preprocessing


def _image_int(v, key: str) -> int:
    """A size or channel count from the model's image metadata (or its preprocessor_config.json): 1..max, or 0
    when absent; anything else is one line, not an int() error."""
    if v is None:
        return 0
    if type(v) is not int or not 0 < v <= (IMAGE_MAX_SIDE if key == "size" else 4):
        raise AttnvizError(
            f"the model's image {key} {str(v)[:40]} (its metadata or preprocessor_config.json) is not a whole number "
            f"in 1..{IMAGE_MAX_SIDE if key == 'size' else 4}; {fix_words('image_size_file')}"
        )
    return v


def _image_floats(v, key: str) -> list | None:
    """Per-channel mean or std from the model's metadata: a list of numbers (None when absent)."""
    if v is None:
        return None
    if not isinstance(v, list) or not 0 < len(v) <= 4 or not all(type(x) in (int, float) for x in v):
        raise AttnvizError(
            f"the model's image {key} {str(v)[:40]} (its metadata or preprocessor_config.json) is not a list of "
            f"numbers per channel; {fix_words('image_stat', key=key)}"
        )
    return v


def load_image(path: str | Path, spec: ImageSpec) -> tuple[np.ndarray, np.ndarray]:
    """Return (pixel array [1, C, H, W] float32 normalised, the resized image [H, W, 3] uint8)."""
    from PIL import Image

    p = Path(path)
    for name, vals in (("mean", spec.mean), ("std", spec.std)):
        if not all(np.isfinite(vals)):
            raise AttnvizError(f"image {name} {vals} is not finite; {fix_words('image_stat_finite', key=name)}")
    if any(v == 0 for v in spec.std):
        raise AttnvizError(
            f"image std {spec.std} contains 0 (every pixel would divide by zero); {fix_words('image_std_zero')}"
        )
    with open_raster(p) as im:  # raster formats only, pixel cap, first frame
        img = im.convert("L" if spec.channels == 1 else "RGB")
    img = img.resize((spec.width, spec.height), Image.Resampling.BICUBIC)
    a = np.asarray(img, dtype=np.float32) / 255.0
    if a.ndim == 2:
        a = a[:, :, None]
    x = (a - np.asarray(spec.mean, np.float32)) / np.asarray(spec.std, np.float32)
    shown = np.asarray(img.convert("RGB"), dtype=np.uint8)
    return x.transpose(2, 0, 1)[None].astype(np.float32), shown


def load_feeds(path: str | Path) -> dict[str, np.ndarray]:
    p = Path(path)
    try:
        with open_regular(p, "inputs") as f:
            if f.read(2) != b"PK":  # np.load takes any other file for a pickle: "holds pickled Python objects" misled
                raise AttnvizError(
                    f"inputs {p}: not a .npz file (not a zip archive); save feeds with numpy.savez(name=array, ...)"
                )
            f.seek(0)
            with np.load(f, allow_pickle=False) as z:
                feeds = {k: z[k] for k in z.files}
    except AttnvizError:
        raise
    except Exception as e:
        raise AttnvizError(
            f"inputs {p}: not a readable .npz ({npz_problem(e)}); save feeds with numpy.savez(name=array, ...)"
        ) from None
    for k, a in feeds.items():
        _check_feed(p, k, a)
    return feeds


FEED_KINDS = "biuf"  # bool, signed and unsigned integers, floats: what an ONNX model input can take from a file


def _check_feed(p: Path, name: str, a: np.ndarray) -> None:
    """A feed from a file is plain numbers with a batch row and no NaN, else one line naming it."""
    if a.dtype.names is not None or a.dtype.kind not in FEED_KINDS:
        raise AttnvizError(
            f"inputs {p}: {name} holds {dtype_words(a.dtype)}, which no model input takes; save it as a numeric array (whole "
            "numbers for token ids and masks, floats for pixels and values) with numpy.savez"
        )
    if a.ndim == 0 or a.shape[0] == 0:
        raise AttnvizError(f"inputs {p}: {name} has shape {list(a.shape)}, no batch row; give at least one")
    if a.dtype.kind == "f" and np.isnan(a).any():
        raise AttnvizError(f"inputs {p}: {name} holds NaN values; give numbers")


def parse_series(text: str) -> np.ndarray:
    """A forecaster's series typed as numbers separated by spaces or commas (``--text``, the window's text box)."""
    words = _series_words(text)
    try:
        vals = [float(x) for x in words]
    except ValueError:
        word = next(x for x in words if not _is_float(x))
        raise AttnvizError(
            f"this model takes a numeric series and {word[:40]!r} is not a number: give numbers separated by spaces "
            "or commas"
        ) from None
    if not vals:
        raise AttnvizError("empty series: give numbers separated by spaces or commas")
    # the model takes float32: a value past its range would become inf in the cast (numpy warns on stderr) and
    # every map NaN; NaN and inf are no measurement either
    top = float(np.finfo(np.float32).max)
    bad = next((v for v in vals if not abs(v) <= top), None)
    if bad is not None:
        fix = "give a measured value in its place" if bad != bad else "give smaller numbers"  # NaN: no size to shrink
        raise AttnvizError(f"series value {bad:g} is not a finite number within float32's range (±{top:.3g}); {fix}")
    return np.asarray(vals, np.float32)


def _series_words(text: str) -> list[str]:
    """The series' numbers as typed.  An empty item between commas (``1,,2``, ``1, ,2``) is refused, naming its
    position: it is a value left out or a comma typed twice, and reading it as ``1,2`` shifted every later value
    one step earlier in time.  A comma ending a line stays allowed (a row copied from a spreadsheet or a CSV line,
    ``1, 2, 3,``): nothing follows it, so no value moves."""
    words: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        line = line[:-1] if line.endswith(",") else line  # the line's own end: nothing after it moves
        if not line:
            continue
        for field in line.split(","):
            if not field.strip() and not words:
                raise AttnvizError("series item 1 is empty (a comma before the first value); remove the comma")
            if not field.strip():
                raise AttnvizError(
                    f"series item {len(words) + 1} is empty (nothing between two commas, after {words[-1][:40]!r}); "
                    "give the missing value there or remove the extra comma"
                )
            words.extend(field.split())
    return words


def _is_float(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True
