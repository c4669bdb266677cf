"""How many generation steps a run takes when nobody says: one rule for the window, ``attnviz figure``,
``extract``, ``compare``, ``ablate`` and a corpus run (plain Python: the command line's parsers and ``attnviz
corpus``'s settings read it before numpy is imported, and a text model's ``extract`` imports no generation module).
"""

from __future__ import annotations

# enough for a sentence or a caption, few enough to run in a second on a CPU (a generation stops at EOS first)
DEFAULT_GENERATE = 32
# which input holds the decoder's text, per model kind: given, it is a target to teacher-force instead
DECODER_TEXT = {"encoder-decoder": "text_pair", "vision-decoder": "text"}


def default_generate(kind: str, given: dict | None = None) -> int:
    """Generation steps when none are asked for, the same in the window and in ``attnviz figure``.

    Translation and captioning generate (what they are for, and what Alignment and the strip show); a
    target the caller gave is teacher-forced instead (generating would continue it).  Decoder-only graphs
    may be forecasters with no token input, so they just run."""
    key = DECODER_TEXT.get(str(kind or ""))
    if key is None:
        return 0
    return 0 if (given or {}).get(key) else DEFAULT_GENERATE
