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
    language or script the model does not read.  run.json records it; the command says it once at the end."""

    items: int
    token: str  # the unknown token's label ("[UNK]", "<unk>")


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
