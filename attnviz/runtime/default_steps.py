"""The generation steps a run takes when nobody says how many: one rule for the window, ``attnviz figure``,
``extract``, ``compare`` and ``ablate``.

``extract`` once ran a translation with no steps unless asked, while ``figure MODEL`` and the window generated 32:
``extract`` then ``figure --maps`` drew something else than ``figure MODEL`` (gen30).
"""

from __future__ import annotations

import zipfile
from collections.abc import Mapping
from typing import TYPE_CHECKING

from attnviz.core.steps_default import default_generate

if TYPE_CHECKING:
    from attnviz.runtime.protocol import AttnModel


def default_steps(model: AttnModel, given: dict | None = None) -> int:
    """The view model's default for the model's kind (:func:`attnviz.core.steps_default.default_generate`:
    translation and captioning generate, a given target is teacher-forced instead), cut to what a speech decoder's
    positions hold (:func:`attnviz.runtime.speech.default_steps_in_room`).  Raw feeds (``--inputs``) that hold the
    decoder's tokens are a target given: run as they are, as a typed ``--text-pair`` is.  A model with no decoder
    input to generate through takes none (a default never makes a run refuse what nobody asked for)."""
    given = given or {}
    steps = default_generate(model.kind, given)
    if not steps:  # (a text model's run imports no speech or generation module: tests/runtime/test_first_map_imports)
        return 0
    from attnviz.runtime.builders import decoder_input

    decoder = decoder_input(model)
    if decoder is None:  # nothing to generate with (a decoder file alone, a graph with no decoder input): no default
        return 0
    feeds = given.get("feeds")
    if feeds is not None and decoder.name in _names(feeds):
        return 0
    from attnviz.runtime.speech import default_steps_in_room

    return default_steps_in_room(model.meta, steps)


def given_inputs(args) -> dict:
    """What :func:`default_steps` reads of a command's input flags."""
    return {k: getattr(args, a, None) for k, a in (("text", "text"), ("text_pair", "text_pair"), ("feeds", "inputs"))}


def _names(feeds) -> set[str]:
    """The input names raw feeds hold: a mapping's keys, or a .npz file's arrays (read from its listing; a file that
    cannot be read names none here and is refused, in its own words, when the run loads it)."""
    if isinstance(feeds, Mapping):
        return {str(k) for k in feeds}
    try:
        with zipfile.ZipFile(str(feeds)) as z:
            return {n.removesuffix(".npy") for n in z.namelist()}
    except (OSError, zipfile.BadZipFile, ValueError):
        return set()
