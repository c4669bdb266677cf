"""The Model sidebar's Run section in a researcher's words: the engine's run facts (``result.info`` keys and the
model's timings) by name, with values that say what they mean.

The engine records ``mode: dense``, ``loop_cache: numpy`` and ``session_dense_s``; the sidebar showed them as they
were ("mode dense", "loop_cache numpy", "session dense 169 ms", "image_preproc…"), words of the engine, not of the
user.  A fact not named here keeps its key, underscores as spaces.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from attnviz.core.rows import BEAMS_KEY, score_text
from attnviz.core.words import count


@dataclass(frozen=True)
class RunFact:
    label: str  # the row's name
    values: dict[str, str] = field(default_factory=dict)  # an engine value -> its meaning (others shown as they are)


RUN_FACTS: dict[str, RunFact] = {
    # how the maps were kept (the CLI's --memory auto|dense|ondemand; the window has no such control, so its
    # sidebar says what the mode means and names no flag)
    "mode": RunFact("maps kept", {"dense": "all in memory", "ondemand": "per head, recomputed when shown"}),
    # where a generation's loop kept its key/value cache between steps (runtime/model_loop.py)
    "loop_cache": RunFact(
        "generation cache", {"numpy": "host memory", "cpu": "host memory (IO binding)", "cuda": "GPU memory"}
    ),
    "generation": RunFact("generation", {"kv-cache": "step by step with a key/value cache"}),
    "image_preprocessing": RunFact("image preprocessing"),
    "provider_note": RunFact("device note"),
    "map_dtype": RunFact("map precision"),
    "pinned": RunFact("pinned outputs"),
    # a speech decoder's forced prompt (core.attention.SPEECH_PROMPT_KEY): Whisper's four tokens before the words
    "speech_prompt_len": RunFact("forced prompt (tokens)"),
    # the model's timings (AttnModel.timings, seconds): one onnxruntime session per way of keeping the maps
    "session_dense": RunFact("session set-up (all maps)"),
    "session_ondemand": RunFact("session set-up (maps per head)"),
    "session_plain": RunFact("session set-up (no maps)"),
}


def run_fact(key: str, value: object) -> tuple[str, object]:
    """``(label, value)`` of one run fact for the sidebar: named and explained by :data:`RUN_FACTS`, else the key
    with spaces for underscores and the value as it is."""
    fact = RUN_FACTS.get(key)
    if fact is None:
        return key.replace("_", " "), value
    return fact.label, fact.values.get(value, value) if isinstance(value, str) else value


# the engine's keys of a beam search that :func:`beam_summary` says in a beam's words: "batch 4" named the K
# hypotheses as if they were a padded batch's rows, and "beam steps 11" stood apart from them
BEAM_KEYS = ("batch", "beam_steps")


def _beams(info: dict) -> list[dict] | None:
    beams = info.get(BEAMS_KEY)
    if not isinstance(beams, list) or len(beams) < 2:
        return None
    return [b if isinstance(b, dict) else {} for b in beams]


def _score(b: dict) -> str:
    score = b.get("score")
    return score_text(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else "?"


def beam_summary(info: dict, shown: int) -> str | None:
    """The Run section's one line of a beam search: ``4 beams, best first, over 11 steps; beam 1 shown (score
    -0.567)`` (``shown``: the beam the views draw, the beam box's); None for any other result."""
    beams = _beams(info)
    if beams is None:
        return None
    steps = info.get("beam_steps")
    over = f", over {count(int(steps), 'step')}" if isinstance(steps, int) and not isinstance(steps, bool) else ""
    b = min(max(int(shown), 0), len(beams) - 1)
    return f"{len(beams)} beams, best first{over}; beam {b} shown (score {_score(beams[b])})"


def beam_lines(info: dict) -> list[str]:
    """A beam search's hypotheses for the Run section, best first: ``beam 0 (score -0.758): In the beginning ...``
    (``info["beams"]``, :data:`attnviz.core.rows.BEAMS_KEY`); empty for any other result."""
    return [
        f"beam {i} (score {_score(b)}): " + " ".join(str(w) for w in b.get("generated") or [])
        for i, b in enumerate(_beams(info) or [])
    ]
