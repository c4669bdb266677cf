"""Reference word times (a TSV ``word start end`` or a Praat TextGrid's word tier) and how close an alignment's
word boundaries come to them: the speech analogue of the alignment error rate.

Both readers take text from strangers: bounded (bytes, words, tiers), every number finite and in order, every
refusal one :class:`~attnviz.AttnvizError` line naming the file, the line and the fix.
"""

from __future__ import annotations

import difflib
import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from attnviz import AttnvizError

MAX_BYTES = 16 * 2**20
MAX_WORDS = 200_000
MAX_SECONDS = 1e6  # a time past this (11 days) is no recording's
TOLERANCES = (0.02, 0.05, 0.10)  # seconds: the 20 / 50 / 100 ms a boundary may miss by and still count
# interval labels that mark no word (silence, short pause, spoken noise) in forced-aligner output (MFA, Kaldi)
SILENCE = frozenset({"", "sil", "sp", "spn", "<sil>", "<eps>", "<unk>", "#"})
WORD_TIERS = ("words", "word")


@dataclass(frozen=True)
class GoldWord:
    text: str
    start: float
    end: float


def decode_text(data: bytes, what: str) -> str:
    """UTF-8 (a BOM allowed), or UTF-16 with its BOM (what Praat writes for non-ASCII TextGrids)."""
    if len(data) > MAX_BYTES:
        raise AttnvizError(f"{what}: larger than {MAX_BYTES // 2**20} MB; give one recording's word times")
    try:
        if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
            text = data.decode("utf-16")
        else:
            text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise AttnvizError(f"{what}: not UTF-8 or UTF-16 text; give a TSV or a Praat TextGrid") from None
    if "\x00" in text:
        raise AttnvizError(f"{what}: holds NUL characters; give a text file (TSV or TextGrid)")
    return text


def _time(raw: str, what: str) -> float:
    try:
        v = float(raw)
    except ValueError:
        raise AttnvizError(f"{what}: {raw[:20]!r} is not a time in seconds") from None
    if not math.isfinite(v) or not 0 <= v <= MAX_SECONDS:
        raise AttnvizError(f"{what}: time {raw[:20]} is not a time in a recording (0 to {MAX_SECONDS:g} s)")
    return v


def _word(text: str, start: float, end: float, what: str) -> GoldWord:
    if end < start:
        raise AttnvizError(f"{what}: ends ({end:g} s) before it starts ({start:g} s); give start then end")
    return GoldWord(text, start, end)


def _checked(words: list[GoldWord], what: str) -> list[GoldWord]:
    if not words:
        raise AttnvizError(f"{what}: holds no words; give one 'word start end' line per word")
    for a, b in zip(words, words[1:]):
        if b.start < a.start:
            raise AttnvizError(
                f"{what}: {b.text[:30]!r} starts ({b.start:g} s) before {a.text[:30]!r} ({a.start:g} s); "
                "give the words in the order they are spoken"
            )
    return words


def parse_tsv(text: str, what: str) -> list[GoldWord]:
    """``word<TAB>start<TAB>end`` a line (seconds; spaces separate too when the word has none); a header line
    ``word start end`` and ``#`` comments are passed over; silence labels are not words."""
    words: list[GoldWord] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cells = line.split("\t") if "\t" in line else line.split()
        cells = [c.strip() for c in cells]
        where = f"{what} line {n}"
        if len(cells) < 3:
            raise AttnvizError(f"{where}: {len(cells)} fields; give 'word<TAB>start<TAB>end' (seconds)")
        if n == 1 and [c.lower() for c in cells[:3]] == ["word", "start", "end"]:
            continue
        if cells[0].lower() in SILENCE:
            continue
        words.append(_word(cells[0], _time(cells[1], where), _time(cells[2], where), where))
        if len(words) > MAX_WORDS:
            raise AttnvizError(f"{what}: more than {MAX_WORDS:,} words; give one recording's word times")
    return _checked(words, what)


# a TextGrid is a run of values -- quoted strings ("" escapes a quote), numbers, <exists> -- with the long format's
# keys ("xmin =", "item [1]:") between them, which are passed over; the short format is the values alone
_TOKEN = re.compile(
    r'"((?:[^"]|"")*)"|(<exists>|<absent>)|([A-Za-z_][A-Za-z_0-9]*|\[\d*\]|[=:?])'
    r"|([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)|(\S)"
)


def _values(text: str, what: str) -> list[str | float]:
    out: list[str | float] = []
    for m in _TOKEN.finditer(text):
        s, flag, _key, num, other = m.groups()
        if s is not None:
            out.append(s.replace('""', '"'))
        elif flag is not None:
            out.append(flag)
        elif num is not None:
            out.append(float(num))
        elif other is not None:
            line = text.count("\n", 0, m.start()) + 1
            raise AttnvizError(f"{what} line {line}: unexpected {other!r}; give a Praat TextGrid (text format)")
        if len(out) > 4 * MAX_WORDS + 64:
            raise AttnvizError(f"{what}: more than {MAX_WORDS:,} intervals; give one recording's TextGrid")
    return out


class _Reader:
    def __init__(self, values: list[str | float], what: str):
        self.v, self.i, self.what = values, 0, what

    def _next(self, name: str) -> str | float:
        if self.i >= len(self.v):
            raise AttnvizError(f"{self.what}: ends before its {name}; give a whole Praat TextGrid")
        self.i += 1
        return self.v[self.i - 1]

    def _wrong(self, x: str | float, name: str) -> AttnvizError:
        return AttnvizError(f"{self.what}: {str(x)[:20]!r} where its {name} should be; give a Praat TextGrid")

    def time(self, name: str) -> float:
        x = self._next(name)
        if not isinstance(x, float):
            raise self._wrong(x, name)
        return _time(repr(x), self.what)

    def text(self, name: str) -> str:
        x = self._next(name)
        if not isinstance(x, str):
            raise self._wrong(x, name)
        return x

    def count(self, name: str, per: int) -> int:
        """A count of items of ``per`` values each: whole, and no more than the values left (a huge size cannot
        make the reader loop or allocate)."""
        if self.i >= len(self.v) or not isinstance(self.v[self.i], float):
            raise AttnvizError(f"{self.what}: no {name} where one should be; give a Praat TextGrid")
        n = float(self.v[self.i])
        self.i += 1
        if n < 0 or n != int(n) or n * per > len(self.v) - self.i:
            raise AttnvizError(f"{self.what}: {name} {n:g} does not match the values that follow; the file is cut")
        return int(n)


def parse_textgrid(text: str, what: str, tier: str | None = None) -> list[GoldWord]:
    """The words of a Praat TextGrid (long or short text format): the tier named ``tier``, else one named
    "words" or "word", else the first interval tier; empty and silence intervals are not words."""
    r = _Reader(_values(text, what), what)
    if r.text("file type") != "ooTextFile" or r.text("object class") != "TextGrid":
        raise AttnvizError(f'{what}: not a Praat TextGrid (no File type = "ooTextFile" / Object class = "TextGrid")')
    r.time("xmin")
    r.time("xmax")
    if r.text("tiers flag") != "<exists>":
        raise AttnvizError(f"{what}: has no tiers; give a TextGrid with a word tier")
    tiers: dict[str, list[GoldWord]] = {}
    for _ in range(r.count("tier count", 5)):
        cls, name = r.text("tier class"), r.text("tier name")
        r.time("tier xmin")
        r.time("tier xmax")
        if cls == "IntervalTier":
            words = []
            for k in range(r.count("interval count", 3)):
                where = f"{what} tier {name[:30]!r} interval {k + 1}"
                start, end, label = r.time("xmin"), r.time("xmax"), r.text("text")
                if label.strip().lower() not in SILENCE:
                    words.append(_word(label.strip(), start, end, where))
            tiers.setdefault(name, words)
        elif cls == "TextTier":
            for _ in range(r.count("point count", 2)):
                r.time("time")
                r.text("mark")
        else:
            raise AttnvizError(f"{what}: tier class {cls[:30]!r}; a TextGrid holds IntervalTier and TextTier tiers")
    if tier is not None:
        if tier not in tiers:
            raise AttnvizError(f"{what}: no interval tier {tier!r} (its tiers: {', '.join(tiers) or 'none'})")
        return _checked(tiers[tier], f"{what} tier {tier!r}")
    if not tiers:
        raise AttnvizError(f"{what}: has no interval tier; give a TextGrid with a word tier")
    name = next((n for n in tiers if n.strip().lower() in WORD_TIERS), next(iter(tiers)))
    return _checked(tiers[name], f"{what} tier {name!r}")


def parse_gold(data: bytes, name: str, tier: str | None = None) -> list[GoldWord]:
    """A reference file's words: a TextGrid by its ``.TextGrid`` suffix or its first line, else a TSV."""
    text = decode_text(data, name)
    head = text.lstrip()[:80]
    if Path(name).suffix.lower() == ".textgrid" or head.startswith("File type"):
        return parse_textgrid(text, name, tier)
    return parse_tsv(text, name)


# -- scoring ------------------------------------------------------------------------------------------------------
def normalise(word: str) -> str:
    """A word compared: case and punctuation set aside ("Hello," is "hello")."""
    w = unicodedata.normalize("NFKC", word).casefold()
    return "".join(ch for ch in w if not unicodedata.category(ch).startswith("P")).strip()


def match(pred: Sequence[str], gold: Sequence[str]) -> list[tuple[int, int]]:
    """(predicted index, gold index) of the words both say, in order (the longest matching blocks of the
    normalised words): a generated transcript that differs from the reference is scored where it agrees."""
    a, b = [normalise(w) for w in pred], [normalise(w) for w in gold]
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return [(i + k, j + k) for i, j, n in sm.get_matching_blocks() for k in range(n)]


@dataclass(frozen=True)
class BoundaryScore:
    """How close the predicted word boundaries (each matched word's start and end) come to the reference."""

    within: tuple[float, ...]  # share of boundaries within each of TOLERANCES
    mean_abs_error_s: float
    boundaries: int
    matched_words: int
    gold_words: int


def boundary_errors(
    pred: Sequence[tuple[float, float]], gold: Sequence[GoldWord], pairs: Sequence[tuple[int, int]]
) -> list[float]:
    """|predicted − reference| seconds of the start and the end of each matched word."""
    out = []
    for i, j in pairs:
        out.append(abs(pred[i][0] - gold[j].start))
        out.append(abs(pred[i][1] - gold[j].end))
    return out


@dataclass
class BoundaryCounts:
    """What a score needs, summed clip after clip (no error list kept: a large model's every head over a corpus
    holds hundreds of millions of boundaries): boundaries within each tolerance, their errors' sum, the count."""

    within: list[int]
    error_sum: float = 0.0
    boundaries: int = 0
    matched_words: int = 0

    @classmethod
    def empty(cls, tolerances: Sequence[float] = TOLERANCES) -> BoundaryCounts:
        return cls([0] * len(tolerances))

    def add(self, errors: Sequence[float], matched: int, tolerances: Sequence[float] = TOLERANCES) -> None:
        """Count ``errors`` (seconds); a hair of float slack: 0.06 − 0.04 is a 20 ms miss."""
        e = [float(x) for x in errors]
        for k, t in enumerate(tolerances):
            self.within[k] += sum(x <= t + 1e-9 for x in e)
        self.error_sum += sum(e)
        self.boundaries += len(e)
        self.matched_words += matched

    def score(self, gold_words: int) -> BoundaryScore:
        """The shares within each tolerance and the mean error; NaN when nothing matched."""
        if not self.boundaries:
            return BoundaryScore(tuple(math.nan for _ in self.within), math.nan, 0, self.matched_words, gold_words)
        n = self.boundaries
        return BoundaryScore(tuple(w / n for w in self.within), self.error_sum / n, n, self.matched_words, gold_words)


def score(
    errors: Sequence[float], matched: int, gold_words: int, tolerances: Sequence[float] = TOLERANCES
) -> BoundaryScore:
    """:class:`BoundaryCounts` of one list of errors, scored."""
    counts = BoundaryCounts.empty(tolerances)
    counts.add(errors, matched, tolerances)
    return counts.score(gold_words)
