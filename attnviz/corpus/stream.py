"""Where a corpus run's partials come from (:class:`Stream`), apart from :mod:`attnviz.corpus.run` so that the
engines that build one (:mod:`attnviz.corpus.ray_engine`) need not import the run that imports them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from attnviz.corpus import items as it
from attnviz.corpus.fold import Partial


@dataclass(frozen=True)
class MostlyUnknown:
    """The items whose text is mostly the tokenizer's unknown token (runtime/unknown_tokens.py): a corpus in a
    language or script the model does not read.  run.json records it; the command says it once at the end.  One
    account for ``attnviz corpus``, ``compare --texts`` and ``ablate --texts`` (:meth:`report`), read back by the
    window's Corpus view (:meth:`from_run`)."""

    items: int
    token: str  # the unknown token's label ("[UNK]", "<unk>")

    KEYS = ("items_mostly_unknown", "unknown_token")  # run.json's

    @classmethod
    def of(cls, tok, count: int | None) -> MostlyUnknown | None:
        """The count of items mostly of ``tok``'s unknown token, labelled (None: not counted, or ``tok`` names
        no unknown token)."""
        unk = getattr(tok, "unk_id", None)
        return None if count is None or unk is None else cls(count, tok.label(unk))

    @classmethod
    def of_texts(cls, model, kind: str, enc) -> MostlyUnknown | None:
        """The items of ``enc`` mostly of the unknown token, by the tokenizer that read them: ``enc`` is
        :func:`attnviz.corpus.plan.encode_items`' (a decoder's text by its decoder tokenizer) or, for an
        encoder-decoder, :func:`attnviz.corpus.pairs.encode_pairs`' (a source or a target mostly unknown)."""
        src, tgt = model.tokenizers
        if kind == "encoder-decoder":
            from attnviz.corpus.pairs import mostly_unknown_items

            return cls.of(src or tgt, mostly_unknown_items(enc, src, tgt))
        return cls.of((tgt or src) if kind == "decoder" else src, enc.mostly_unknown)

    @classmethod
    def from_run(cls, run: dict) -> MostlyUnknown | None:
        """What a results folder's run.json says (None: not counted)."""
        items, token = (run.get(k) for k in cls.KEYS)
        if isinstance(items, int) and not isinstance(items, bool) and isinstance(token, str):
            return cls(items, token)
        return None

    def report(self, items: int) -> tuple[dict, str | None]:
        """run.json's keys, and the note said once after the run (None when no item is mostly unknown) of a
        corpus of ``items`` items."""
        from attnviz.runtime.unknown_tokens import corpus_note

        return dict(zip(self.KEYS, (self.items, self.token))), corpus_note(self.items, items, self.token)


def unknown_report(unknown: MostlyUnknown | None, items: int) -> tuple[dict, str | None]:
    """:meth:`MostlyUnknown.report`, or nothing where the items were not counted."""
    return ({}, None) if unknown is None else unknown.report(items)


@dataclass
class Stream:
    """Where the partials come from: the driver's plan (resumable) or Ray Data reading the file itself."""

    partials: Callable[[int], Iterator[Partial]]  # from batch n on
    items: Callable[[], dict[int, it.Item]]  # Item.index -> item, for the examples (after the run)
    total: int | None  # items, for the progress bar (None: Ray counts them itself)
    data_sha: str
    data_sha_of: str  # "items": the items analysed; "file": the file's bytes (Ray never hands them to the driver)
    fingerprint: str | None  # checkpoint identity; None: not resumable from the driver's checkpoint
    workers: int
    threads: int
    resumed: tuple[int, int] = (0, 0)  # Ray Data runs: (items, tokens) an interrupted run had already reduced
    gold: dict | None = None  # --gold-column: what run.json says of it (column, convention, punctuation)
    audio: Callable | None = None  # --audio-dir: the summed boundary counts (or None) -> run.json's audio_gold
    batches: int | None = None  # the plan's batch count (None: Ray Data cuts the batches itself)
    cut: dict | None = None  # --max-tokens: run.json's account of the cut (run._truncation; None: not asked)
    # the settings the fingerprint stands for, by name (flag -> value), kept beside it (corpus/resume_settings.py)
    settings: dict | None = None
    # the items mostly of the unknown token (None: not counted: no tokenizer, or one that names no unknown token)
    unknown: MostlyUnknown | None = None
    # the local engine's worker layout (engines.LAYOUTS) and what chose it (engines.layout_choice); None: Ray's
    layout: tuple[str, str] | None = None
