"""The notes of a run that a command prints after its output (stderr ``attnviz: note: ...``): what ``--max-tokens``
cut, a text the tokenizer mostly did not know, and the sound's notes (``--max-seconds``' cut, resampling, channels
mixed down, the detected language, a CTC head's transcript), and a dual encoder's (why no score, how its texts
were padded).  ``extract`` and ``figure`` print them through here, so
a figure drawn from a model run (or from an .npz, which keeps ``info["notes"]``) says what the maps say."""

from __future__ import annotations

from attnviz.core.notice import say


def printed_notes(info: dict | None) -> list[str]:
    """The run's notes a command prints, in the order extract has always printed them (cut, unknown, sound)."""
    from attnviz.core.text_scores import score_notes
    from attnviz.runtime.audio_notes import audio_notes
    from attnviz.runtime.truncation import cut_notes
    from attnviz.runtime.unknown_tokens import unknown_notes

    notes = (info or {}).get("notes")
    return [*cut_notes(notes), *unknown_notes(notes), *audio_notes(notes), *score_notes(notes)]


def say_run_notes(info: dict | None) -> None:
    for note in printed_notes(info):
        say(note)
