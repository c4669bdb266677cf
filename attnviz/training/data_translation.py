"""Parallel data with gold word alignments for the ``translation`` task.

Two sources, one shape (:class:`AlignedPair`):

* **Greek → English New Testament** (:func:`load_bible`): SBL Greek New Testament words, Berean Standard
  Bible words and the Biblica team's *manual* word alignments between them, as shipped by the PyPI package
  ``bible-alignments`` (CC-BY-4.0; SBLGNT © 2010 Society of Biblical Literature and Logos Bible Software;
  BSB public domain).  Install it with ``pip install --no-deps bible-alignments``: its own requirements
  (django, jupyterlab, pandas...) are only needed by its Python API, which we never import; we read its data
  files, which land in a top-level ``site-packages/data/`` folder:

  - ``data/sources/SBLGNT.tsv``: one Greek word a row; ``id`` = ``nBBCCCVVVWWW`` (book, chapter, verse, word).
  - ``data/eng/targets/BSB/nt_BSB.tsv``: one English token a row (punctuation included); ``id`` =
    ``BBCCCVVVWWW``; ``source_verse`` = the Greek verse it belongs to (differs from the id's verse for a few
    re-versified tokens); ``exclude = y`` marks punctuation that annotators never align; ``skip_space_after``.
  - ``data/eng/alignments/BSB/SBLGNT-BSB-manual.json``: Scripture Burrito records
    ``{"source": [greek ids], "target": [english ids]}``; a record links every source id to every target id.

  Verses are grouped by Greek verse; the 80 records that link across a verse boundary merge those verses into
  one unit (``id = "44005039+44005040"``).  Units without any alignment are dropped: 7,9xx units, ~190k links.

* **Synthetic pair** (:func:`synthetic_pairs`): an English-like SVO source with adjectives before nouns and a
  target language with its own vocabulary, SOV order, adjectives after nouns and no articles.  Gold links are
  known by construction, so CI can train a tiny model for seconds and still check the alignment pipeline.

Tokenisation: :func:`train_tokenizer` trains a small WordPiece vocabulary (``tokenizers``) on the word lists;
:func:`encode_words` encodes a pre-split word list and returns the subword ids plus the subword → word map
(``word_ids``), which :mod:`attnviz.training.metrics` uses to merge attention back to words.
"""

from __future__ import annotations

import csv
import functools
import importlib.util
import random
import sys
import sysconfig
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from attnviz import AttnvizError
from attnviz.core.untrusted import read_json
from attnviz.core.writes import atomic_write_bytes

if TYPE_CHECKING:  # tokenizers loads on first use, not when this module is imported
    from tokenizers import Tokenizer

INSTALL_HINT = "pip install --no-deps bible-alignments"

# relative paths inside the package's top-level data/ folder
SOURCE_TSV = "sources/SBLGNT.tsv"
TARGET_TSV = "eng/targets/BSB/nt_BSB.tsv"
ALIGNMENT_JSON = "eng/alignments/BSB/SBLGNT-BSB-manual.json"
DATA_FILES = (SOURCE_TSV, TARGET_TSV, ALIGNMENT_JSON)

# special tokens, in id order (ids 0..4 in every vocabulary we train)
PAD, UNK, BOS, EOS = "[PAD]", "[UNK]", "[BOS]", "[EOS]"
SPECIALS = [PAD, UNK, BOS, EOS]


@dataclass(frozen=True)
class AlignedPair:
    """One sentence pair with gold word alignment.

    ``links`` are ``(src_word_index, tgt_word_index)`` pairs (sure links; this data has no "possible" ones).
    ``tgt_skip[j]`` is True for target words outside the alignment task (punctuation the annotators never
    align); AER ignores them on both sides.
    """

    id: str
    src: tuple[str, ...]
    tgt: tuple[str, ...]
    links: frozenset[tuple[int, int]]
    tgt_skip: tuple[bool, ...] = ()
    tgt_text: str = ""  # detokenised target (spacing as printed); " ".join(tgt) when empty
    src_gloss: tuple[str, ...] = ()  # SBLGNT's English gloss of each source word ("" = none, e.g. an article)
    tagged: bool = False  # a gloss rendering (gloss_pair): the model sees a marker before the source

    def text(self) -> str:
        return self.tgt_text or " ".join(self.tgt)


@dataclass
class Split:
    train: list[AlignedPair] = field(default_factory=list)
    test: list[AlignedPair] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------------------
# Greek -> English New Testament


def bible_data_dir() -> Path:
    """The ``data/`` folder of the installed ``bible-alignments`` package, or a one-line AttnvizError."""
    candidates: list[Path] = []
    spec = importlib.util.find_spec("bible_alignments")
    if spec is not None and spec.origin:
        candidates.append(Path(spec.origin).resolve().parent.parent / "data")
    for key in ("purelib", "platlib"):
        candidates.append(Path(sysconfig.get_paths()[key]) / "data")
    candidates += [Path(p) / "data" for p in sys.path if p.endswith("site-packages")]
    for d in candidates:
        if (d / ALIGNMENT_JSON).is_file() and (d / SOURCE_TSV).is_file() and (d / TARGET_TSV).is_file():
            return d
    raise AttnvizError(
        f"the Greek-English alignment data is not installed: run `{INSTALL_HINT}` "
        "(the package's data/ folder with SBLGNT.tsv, nt_BSB.tsv and SBLGNT-BSB-manual.json was not found)"
    )


def _read_tsv(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def _detok(words: list[str], no_space_after: list[bool]) -> str:
    out = []
    for w, tight in zip(words, no_space_after):
        out.append(w if tight else w + " ")
    return "".join(out).strip()


def load_bible(data_dir: str | Path | None = None) -> list[AlignedPair]:
    """All aligned NT verse units, in canonical (book, chapter, verse) order.

    Parsed once per process while the three files stay as they were (their size and mtime): parsing takes
    seconds, and a training run's splits, its evaluation, ``testset`` and ``align`` each ask again.  The pairs
    are frozen; every caller gets a list of its own."""
    d = Path(data_dir) if data_dir is not None else bible_data_dir()
    return list(_parse_bible(d, _stamp(d)))


def _stamp(d: Path) -> tuple[tuple[int, int], ...] | None:
    """The data files' (mtime, size): a file rewritten since the last parse is parsed again."""
    try:
        return tuple((st.st_mtime_ns, st.st_size) for st in (d.joinpath(f).stat() for f in DATA_FILES))
    except OSError:
        return None  # _parse_bible says what is missing


@functools.lru_cache(maxsize=1)
def _parse_bible(d: Path, stamp: tuple[tuple[int, int], ...] | None) -> tuple[AlignedPair, ...]:
    try:
        src_rows = _read_tsv(d / SOURCE_TSV)
        tgt_rows = _read_tsv(d / TARGET_TSV)
        records = read_json(d / ALIGNMENT_JSON, "alignments", limit=None)["records"]
    except (OSError, ValueError, KeyError, AttnvizError) as e:
        raise AttnvizError(f"cannot read the bible-alignments data in {d}: {e}; reinstall with `{INSTALL_HINT}`") from e

    src_verse = {r["id"]: r["id"][1:9] for r in src_rows}  # n40001001001 -> 40001001
    tgt_verse = {r["id"]: (r["source_verse"] or r["id"][:8]) for r in tgt_rows}

    # union-find over verses joined by a cross-verse record
    parent: dict[str, str] = {}

    def find(v: str) -> str:
        while parent.get(v, v) != v:
            v = parent[v]
        return v

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    for rec in records:
        vs = {src_verse[s] for s in rec["source"] if s in src_verse} | {
            tgt_verse[t] for t in rec["target"] if t in tgt_verse
        }
        vs_list = sorted(vs)
        for v in vs_list[1:]:
            union(vs_list[0], v)

    # words of each unit, in order
    unit_src: dict[str, list[str]] = defaultdict(list)
    unit_tgt: dict[str, list[dict[str, str]]] = defaultdict(list)
    unit_members: dict[str, set[str]] = defaultdict(set)
    for r in src_rows:
        u = find(src_verse[r["id"]])
        unit_src[u].append(r["id"])
        unit_members[u].add(src_verse[r["id"]])
    for r in tgt_rows:
        u = find(tgt_verse[r["id"]])
        unit_tgt[u].append(r)
        unit_members[u].add(tgt_verse[r["id"]])
    src_text = {r["id"]: r["text"] for r in src_rows}
    src_gloss = {r["id"]: (r.get("gloss2") or "").strip() for r in src_rows}

    unit_links: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for rec in records:
        for s in rec["source"]:
            if s not in src_verse:
                continue
            u = find(src_verse[s])
            for t in rec["target"]:
                if t in tgt_verse:
                    unit_links[u].add((s, t))

    pairs = []
    for u in sorted(unit_links):
        s_ids = sorted(unit_src[u])
        t_rows = sorted(unit_tgt[u], key=lambda r: r["id"])
        if not s_ids or not t_rows:
            continue
        s_index = {s: i for i, s in enumerate(s_ids)}
        t_index = {r["id"]: j for j, r in enumerate(t_rows)}
        links = frozenset((s_index[s], t_index[t]) for s, t in unit_links[u] if s in s_index and t in t_index)
        if not links:
            continue
        tgt_words = [r["text"] for r in t_rows]
        pairs.append(
            AlignedPair(
                id="+".join(sorted(unit_members[u])),
                src=tuple(src_text[s] for s in s_ids),
                tgt=tuple(tgt_words),
                links=links,
                tgt_skip=tuple(r["exclude"] == "y" for r in t_rows),
                tgt_text=_detok(tgt_words, [r["skip_space_after"] == "y" for r in t_rows]),
                src_gloss=tuple(src_gloss[s] for s in s_ids),
            )
        )
    return tuple(pairs)


def gloss_pair(pair: AlignedPair) -> AlignedPair | None:
    """The verse rendered word by word with SBLGNT's glosses, in Greek order: each Greek word is linked to the
    words of its own gloss (known links, no annotator needed).  ``tagged``: the model sees a marker before the
    source, so it can tell this word-by-word register from the translation it is asked for.  None when no word
    has a gloss."""
    tgt: list[str] = []
    links = set()
    for i, g in enumerate(pair.src_gloss):
        for w in g.split():
            links.add((i, len(tgt)))
            tgt.append(w)
    if not tgt:
        return None
    return AlignedPair(
        id=pair.id + "#gloss",
        src=pair.src,
        tgt=tuple(tgt),
        links=frozenset(links),
        tgt_skip=(False,) * len(tgt),
        tagged=True,
    )


def carve_validation(train: list[AlignedPair], every: int, offset: int = 3) -> tuple[list, list]:
    """(training, validation): every ``every``-th training unit becomes validation (for model selection, so the
    held-out test split is measured once, at the end)."""
    from attnviz import AttnvizError

    offset %= every  # validation=2 or 3 with offset 3 matched no unit: an empty split, an internal error later
    fit = [p for i, p in enumerate(train) if i % every != offset]
    val = [p for i, p in enumerate(train) if i % every == offset]
    if not fit or not val:  # a handful of training pairs (--set n_train=2)
        raise AttnvizError(
            f"validation={every}: {len(train)} training pairs leave {len(val)} for validation and {len(fit)} to train "
            "on; train on more pairs (n_train) or hold out fewer (a larger validation)"
        )
    return fit, val


def split_pairs(pairs: list[AlignedPair], every: int = 15, offset: int = 7) -> Split:
    """Deterministic held-out split: every ``every``-th unit (in canonical order) goes to test.

    With 7,9xx units and ``every=15`` that is 528 held-out verses spread evenly over all 27 books.
    """
    out = Split()
    for i, p in enumerate(pairs):
        (out.test if i % every == offset else out.train).append(p)
    return out


def write_pharaoh_files(pairs: list[AlignedPair], prefix: str | Path) -> tuple[Path, Path, Path]:
    """``PREFIX.src``, ``PREFIX.tgt`` (words joined by spaces, one pair a line) and ``PREFIX.gold`` (Pharaoh
    ``i-j``, 0-based source-target): the input ``attnviz align`` reads, e.g. for the held-out verses."""
    prefix = Path(prefix)
    paths = tuple(prefix.with_name(prefix.name + ext) for ext in (".src", ".tgt", ".gold"))
    texts = [
        "".join(" ".join(p.src) + "\n" for p in pairs),
        "".join(" ".join(p.tgt) + "\n" for p in pairs),
        "".join(" ".join(f"{i}-{j}" for i, j in sorted(p.links)) + "\n" for p in pairs),
    ]
    for path, text in zip(paths, texts):
        atomic_write_bytes(path, text.encode("utf-8"))
    return paths  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------------------
# synthetic language pair with gold alignment by construction

_NOUNS = ["cat", "dog", "bird", "fish", "horse", "child", "farmer", "king", "queen", "teacher", "apple", "river"]
_ADJS = ["big", "small", "red", "old", "young", "happy", "quiet", "green"]
_VERBS = ["sees", "likes", "follows", "finds", "helps", "paints", "hears", "calls"]
_DETS = ["the", "a"]
_PREPS = ["near", "behind", "under"]
# target vocabulary: one made-up word per source content word (the articles have no counterpart)
_LEX = {
    **{
        w: t
        for w, t in zip(
            _NOUNS, ["miko", "dashu", "pira", "selo", "wando", "kibi", "turo", "raja", "rani", "sensi", "ringo", "kawa"]
        )
    },
    **{w: t for w, t in zip(_ADJS, ["oki", "chisa", "aka", "furu", "waka", "gena", "shizu", "mido"])},
    **{w: t for w, t in zip(_VERBS, ["miru", "suku", "otto", "mitsu", "tasu", "kaku", "kiku", "yobu"])},
    **{w: t for w, t in zip(_PREPS, ["chika", "ushiro", "shita"])},
}


def _noun_phrase(rng: random.Random) -> list[tuple[str, str]]:
    """[(word, role)] for "det adj* noun" (role: det|adj|noun)."""
    words = [(rng.choice(_DETS), "det")]
    for _ in range(rng.choice([0, 0, 1, 1, 2])):
        words.append((rng.choice(_ADJS), "adj"))
    words.append((rng.choice(_NOUNS), "noun"))
    return words


def _reorder_np(np_idx: list[int], roles: list[str]) -> list[int]:
    """Target order of a noun phrase: noun, then adjectives in source order; articles dropped."""
    nouns = [i for i in np_idx if roles[i] == "noun"]
    adjs = [i for i in np_idx if roles[i] == "adj"]
    return nouns + adjs


def synthetic_pair(rng: random.Random, pid: str = "") -> AlignedPair:
    """One sentence: ``det adj* N V det adj* N [prep det adj* N]`` -> ``N adj* N adj* [N adj* prep'] V``.

    Subject noun phrase, then object noun phrase, then the optional prepositional phrase as a postposition,
    then the verb (SOV).  Every content word has exactly one translation; articles are unaligned.
    """
    subj, obj = _noun_phrase(rng), _noun_phrase(rng)
    verb = [(rng.choice(_VERBS), "verb")]
    pp: list[tuple[str, str]] = []
    if rng.random() < 0.4:
        pp = [(rng.choice(_PREPS), "prep")] + _noun_phrase(rng)
    src_words = subj + verb + obj + pp
    roles = [r for _, r in src_words]
    n_s, n_o = len(subj), len(obj)
    i_subj = list(range(n_s))
    i_verb = n_s
    i_obj = list(range(n_s + 1, n_s + 1 + n_o))
    order = _reorder_np(i_subj, roles) + _reorder_np(i_obj, roles)
    if pp:
        p0 = n_s + 1 + n_o
        order += _reorder_np(list(range(p0 + 1, len(src_words))), roles) + [p0]
    order.append(i_verb)
    tgt = tuple(_LEX[src_words[i][0]] for i in order)
    links = frozenset((i, j) for j, i in enumerate(order))
    return AlignedPair(id=pid, src=tuple(w for w, _ in src_words), tgt=tgt, links=links, tgt_skip=(False,) * len(tgt))


def synthetic_pairs(n: int, seed: int = 0) -> list[AlignedPair]:
    rng = random.Random(seed)
    return [synthetic_pair(rng, f"syn{seed}-{i}") for i in range(n)]


def synthetic_split(n_train: int = 2000, n_test: int = 200, seed: int = 0) -> Split:
    """Train and test drawn from different seeds (the same sentence may occur in both; the space is large)."""
    return Split(train=synthetic_pairs(n_train, seed), test=synthetic_pairs(n_test, seed + 10_007))


# ---------------------------------------------------------------------------------------------------------
# subword tokenizers


def train_tokenizer(
    sentences: list[tuple[str, ...]] | list[list[str]],
    vocab_size: int = 4000,
    lowercase: bool = False,
    strip_accents: bool = False,
    min_frequency: int = 2,
):
    """A WordPiece tokenizer (``##`` continuation prefix) trained on pre-split sentences.

    Specials ``[PAD] [UNK] [BOS] [EOS]`` get ids 0..3.  The pre-tokenizer splits on whitespace and
    punctuation (so raw text typed in the viewer splits like the training words); the decoder joins ``##``
    pieces and tidies punctuation spacing.  No post-processor: the model code adds BOS/EOS itself.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.WordPiece(unk_token=UNK, continuing_subword_prefix="##", max_input_chars_per_word=100))
    norms: list[normalizers.Normalizer] = [normalizers.NFD()] if strip_accents else [normalizers.NFC()]
    if strip_accents:
        norms.append(normalizers.StripAccents())
    if lowercase:
        norms.append(normalizers.Lowercase())
    tok.normalizer = normalizers.Sequence(norms)
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIALS,
        continuing_subword_prefix="##",
        show_progress=False,
    )
    tok.train_from_iterator((" ".join(s) for s in sentences), trainer=trainer, length=len(sentences))
    return tok


def encode_words(tok, words: tuple[str, ...] | list[str], name: str = "trained here") -> tuple[list[int], list[int]]:
    """Subword ids of a pre-split sentence and, for each subword, the index of the word it came from.  Through the
    runtime's guarded encode (a word the tokenizer cannot encode, a text that is not Unicode: one line naming it,
    never the library's panic text); ``name`` says which tokenizer in that line."""
    from attnviz.runtime.inputs import encode_pretokenized

    enc = encode_pretokenized(tok, list(words), False, name)
    word_ids = [-1 if w is None else int(w) for w in enc.word_ids]
    return list(enc.ids), word_ids


def _token_id(tok: Tokenizer, token: str, side: str = "target") -> int:
    i = tok.token_to_id(token)
    if i is None:  # a tokenizer from elsewhere: None would end up inside the id rows
        raise AttnvizError(f"the {side} tokenizer has no {token} token; train the tokenizers with attnviz again")
    return i


@dataclass
class TranslationTokenizers:
    source: Tokenizer
    target: Tokenizer
    # where each came from, for the line that refuses a pair it cannot encode ("tokenizer NAME cannot encode ...")
    names: tuple[str, str] = (
        "of the source side (trained on the task's pairs)",
        "of the target side (trained on the task's pairs)",
    )

    def encode_pair(self, pair: AlignedPair) -> dict[str, list[int]]:
        """Ids for the model plus subword->word maps.

        ``src_ids``: source subwords (no specials); ``tgt_ids``: ``[BOS] + target subwords + [EOS]``.
        ``src_words`` / ``tgt_words``: word index per position, -1 for specials.
        """
        s_ids, s_w = self._words(self.source, pair, "source", 0)
        if pair.tagged:  # the gloss-register marker: the source side's [BOS], which real sources never hold
            s_ids, s_w = [_token_id(self.source, BOS)] + s_ids, [-1] + s_w
        t_ids, t_w = self._words(self.target, pair, "target", 1)
        bos, eos = _token_id(self.target, BOS), _token_id(self.target, EOS)
        return {"src_ids": s_ids, "src_words": s_w, "tgt_ids": [bos] + t_ids + [eos], "tgt_words": [-1] + t_w + [-1]}

    def _words(self, tok: Tokenizer, pair: AlignedPair, side: str, k: int) -> tuple[list[int], list[int]]:
        """One side's :func:`encode_words`; a refusal names the pair and the side (its words' problem alone
        would not say which of thousands of pairs to look at)."""
        try:
            return encode_words(tok, pair.src if side == "source" else pair.tgt, self.names[k])
        except AttnvizError as e:  # (no param: the runtime's "(see --text)" names no flag of a training command)
            raise AttnvizError(f"pair {pair.id} ({side} words): {e}") from None


def train_tokenizers(
    pairs: list[AlignedPair], src_vocab: int = 4000, tgt_vocab: int = 4000, greek: bool = True
) -> TranslationTokenizers:
    """Source (Greek: lower-cased, accents stripped; the NT is small) and target (cased) tokenizers."""
    return TranslationTokenizers(
        source=train_tokenizer([p.src for p in pairs], src_vocab, lowercase=greek, strip_accents=greek),
        target=train_tokenizer([p.tgt for p in pairs], tgt_vocab),
    )
