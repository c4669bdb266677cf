"""A sound run's notes that ``attnviz extract`` prints (stderr ``attnviz: note: ...``, as ``--max-tokens``' cut):
what ``--max-seconds`` cut from a clip, how the file was made the model's (channels mixed down, resampled), the
language a Whisper run detected, and a CTC head's greedy transcript.  The producers (:mod:`attnviz.runtime.audio`,
:mod:`attnviz.runtime.ctc`) word them through here, so the picker and the words cannot drift apart."""

from __future__ import annotations

import re

from attnviz.core.setting_words import setting

CTC_TRANSCRIPT = "CTC transcript (greedy)"
LANGUAGE = "language detected from the audio"
_PRINTED = re.compile(
    r"\((?:--max-seconds|max seconds) [0-9.e+-]+\)$"  # the cut (cut_note), named in either front end's words
    r"|: \d+ channels mixed down to mono$|: resampled from \d+ Hz to \d+ Hz$"
    rf"|^{re.escape(CTC_TRANSCRIPT)}|^{re.escape(LANGUAGE)}: "
)


def cut_note(name: str, seconds: float, max_seconds: float) -> str:
    return f"{name}: {seconds:.2f} s cut to the first {max_seconds:g} s ({setting('max_seconds', float(max_seconds))})"


def audio_notes(notes: object) -> list[str]:
    """The notes of a run (``info["notes"]``) about the sound it heard, in their order."""
    return [n for n in notes if isinstance(n, str) and _PRINTED.search(n)] if isinstance(notes, list) else []
