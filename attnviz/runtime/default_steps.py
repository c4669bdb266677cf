"""The generation steps a run takes when nobody says how many: one rule for the window, ``attnviz figure``,
``extract``, ``compare`` and ``ablate``.

``extract`` once ran a translation with no steps unless asked, while ``figure MODEL`` and the window generated 32:
``extract`` then ``figure --maps`` drew something else than ``figure MODEL`` (gen30).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnviz.runtime.protocol import AttnModel


def default_steps(model: AttnModel, given: dict | None = None) -> int:
    """The view model's default for the model's kind (:func:`attnviz.core.view.default_generate`: translation and
    captioning generate, a given target is teacher-forced instead), cut to what a speech decoder's positions hold
    (:func:`attnviz.runtime.speech.default_steps_in_room`)."""
    from attnviz.core.view.defaults import default_generate
    from attnviz.runtime.speech import default_steps_in_room

    return default_steps_in_room(model.meta, default_generate(model.kind, given))


def given_texts(args) -> dict:
    """What :func:`default_steps` reads of a command's input flags: a target given is teacher-forced."""
    return {"text": getattr(args, "text", None), "text_pair": getattr(args, "text_pair", None)}
