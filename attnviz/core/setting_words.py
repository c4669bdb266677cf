"""How a refusal or a run's note names the setting that fixes it: the command line's flag ("give --max-seconds 30")
or, in the window, the input panel's field ("set max seconds to 30"), or where the window has no control for it
(the memory cap, a feeds file, a quantized variant), what its user can do there instead.

A refusal is worded where its problem is found, deep in the runtime (a clip too long for the model, a run over the
memory cap); a message naming a flag sent the window's user looking for a flag the window has no place for.  The
window runs its requests under :func:`worded` with its fields' words (:data:`attnviz.app.fields.WINDOW`), so the
same refusal names what the user there can change; outside it (the CLI, a script) the flags are named.  A context
variable, as :mod:`attnviz.runtime.shorten` carries the cut: no run signature has to carry who asked.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field


@dataclass(frozen=True, eq=False)  # one object per front end: hashed by identity (a cache key beside a setting)
class Wording:
    """The phrases that name a setting (by :class:`~attnviz.AttnvizError` ``param``) with a value to give it, and
    the fixes whose words differ by more than a setting's name (:data:`FIXES`)."""

    names: Mapping[str, str]  # param -> what the user knows it as ("--max-seconds", "max seconds")
    give: str  # the fix: "give {name} {value}"
    again: str  # a second value of the same setting after "or": "{name} {value}" ("or to 31" in the window)
    by: str  # how something is done: "with {name} {value}"
    setting: str = "{name} {value}"  # a value named at the head of a refusal or note: "--max-tokens 8"
    fixes: Mapping[str, str] = field(default_factory=dict)  # key of FIXES -> this front end's words


# the fixes whose sentence is the front end's own, not "set NAME to VALUE": a feeds file, the memory cap, a variant
# have a flag and no window control.  The command line's words, byte for byte what its refusals always said; the
# window's (attnviz.app.fields.WINDOW) say what its user can do there.  Each template takes the values named in it.
FIXES = {
    # a memory refusal past any machine (runtime/errors.py: onnxruntime's arena)
    "lower_need": "cut the input with --max-tokens N, or keep the maps per head with --memory ondemand",
    # ... and a memory refusal whose input names no cut of its own (runtime/memory_kept.py)
    "lower_need_if": "if the need grows with the input, cut it with --max-tokens N, or keep the maps per head with "
    "--memory ondemand",
    "raise_cap": "raise the cap with --max-memory {gb}",  # the arena's refusal
    "raise_cap_or_env": "raise the cap with --max-memory {gb} (or {env}={gb})",  # the estimate's (core/limits.py)
    "cap_given": "--max-memory {gb}",  # where the cap came from, in its refusal's parentheses
    # request.validate: beams without a generation
    "beams_need_generate": "--beams {beams} searches a generation; give --generate N too (or drop --beams)",
    "no_input": "no input: give --text T, --image PATH, --audio FILE or --inputs FEEDS.npz",
    "no_input_text": "give --text (its sample: --text {shown}) or --inputs FEEDS.npz",
    "no_input_image": "give --image (its sample: --image {shown}) or --inputs FEEDS.npz",
    "no_input_audio": "give --audio (its sample: --audio {shown}) or --inputs FEEDS.npz",
    "generate_batch": "--generate runs one sequence; these inputs hold a batch of {rows} rows: give one row, or drop "
    "--generate to see every row",
    "beams_batch": "--beams searches one sequence; these inputs hold a batch of {rows} rows: give one row",
    "beams_frames": "--beams: the hypotheses' runs gave {label} different frames; drop --beams",
    "beams_frames_some": "--beams: {label} is a vision tower's frames in some hypotheses' runs only",
    "more_steps": "give more --generate steps",
    "fewer_steps": "ask for fewer --generate steps",  # over the steps' limit (core/limits.py)
    "smaller_figure": "lower --dpi or --width-in",  # over the figure's pixels' limit
    "dark_map": "--scale row draws each query row on its own top (or --span LO-HI with --scale map, its top the window's)",
    "room": "{name}'s decoder holds {positions} positions; a prompt of {prompt} tokens and --generate {generate} need "
    "{fed}: give --generate {most} or fewer",
    "room_pair": " (or a shorter --text-pair)",
    "pair_apart": "so --max-tokens cannot tell them apart; remove it from the text, or leave out --max-tokens",
    "truncate": "use --max-tokens {n} to truncate",
    "one_image": "give one image (--image once)",
    # an image opened with no model (`attnviz open cat.png`; the window: an image dropped before any model)
    "image_needs_model": "an image is opened by a vision or captioning model: attnviz open MODEL.onnx --image {name}",
    "image_size": "give --image-size H W",
    "image_size_file": "give --image-size or fix the file",
    "image_stat": "give --image-{key}",
    "image_stat_finite": "give numbers with --image-{key}",
    "image_std_zero": "give a non-zero --image-std",
    "feeds": ", or give {what} with --inputs FEEDS.npz",  # the one way to a model input no file makes
    "sound_file": "give a sound file (--audio FILE)",
    "encoder_input": "give the encoder's input (--text or --image; the encoder_model.onnx beside it runs) or open "
    "the export folder",
    "full_variant": "(a Hub repository: --variant full)",
    "choose_variant": "(choose one with --variant NAME)",
    "cpu": "use --provider cpu",
    "tokenizer": "pass --tokenizer FILE",
    "generate_ablate": "--generate needs a decoder or encoder-decoder model and one input row",
    "ablate_feeds": "(open the merged model file, or run attnviz ablate --inputs FEEDS.npz)",
    "alignment_heads": "fix it or name the heads with --heads",
    "alignment_head": "fix it or give --heads",
    "no_audio": "File ▸ Open audio…, or --audio FILE",
    "gold_file": "--gold file",  # reference word times (align-audio --gold; the window's File ▸ Load word times)
    # a run's notes (info["notes"]): what the cut kept, named as it was set
    "cut_text": "the text as --max-tokens cut it",
    "cut_what": "{what} as --max-tokens cut it",
}

# the command line's: the words every refusal had before the window named its fields
FLAGS = Wording(
    names={
        "max_seconds": "--max-seconds",
        "max_tokens": "--max-tokens",
        "generate": "--generate",
        "beams": "--beams",
        "output": "--out",  # the file a run writes (core/writes.py's messages name it)
    },
    give="give {name} {value}",
    again="{name} {value}",
    by="with {name} {value}",
    fixes=FIXES,
)

_WORDING: ContextVar[Wording] = ContextVar("attnviz_setting_words", default=FLAGS)


def current() -> Wording:
    """The wording of who is asking now (the command line's unless inside :func:`worded`)."""
    return _WORDING.get()


def _say(template: str, param: str, value: float | None) -> str:
    # a count as it is (":g" wrote a million tokens as 1e+06), seconds without trailing zeros
    shown = f"{value:g}" if isinstance(value, float) else str(value)
    return template.format(name=name(param), value=shown)


def setting(param: str, value: float | None) -> str:
    """The setting at ``value`` as a refusal or a note names it: ``--max-tokens 8`` (the window: ``max tokens 8``)."""
    return _say(_WORDING.get().setting, param, value)


def name(param: str) -> str:
    """The setting itself: ``--max-tokens`` (the window: ``max tokens``; "" where the window's message needs no name:
    its export file is the one its dialog just chose)."""
    names = _WORDING.get().names
    return names[param] if param in names else FLAGS.names[param]


def fix(key: str, wording: Wording | None = None, /, **values: object) -> str:
    """The fix ``key`` of :data:`FIXES` in the words of who asked (or of ``wording``), its values filled in."""
    w = wording or _WORDING.get()
    return (w.fixes.get(key) or FLAGS.fixes[key]).format(**values)


def give(param: str, value: float) -> str:
    """``give --max-seconds 30`` (the window: ``set max seconds to 30``)."""
    return _say(_WORDING.get().give, param, value)


def again(param: str, value: float) -> str:
    """The same setting's other value, after "or": ``--max-seconds 31`` (the window: ``to 31``)."""
    return _say(_WORDING.get().again, param, value)


def by(param: str, value: float) -> str:
    """``with --max-seconds 12.3`` (the window: ``by setting max seconds to 12.3``)."""
    return _say(_WORDING.get().by, param, value)


@contextlib.contextmanager
def worded(wording: Wording) -> Iterator[None]:
    """Refusals raised inside name their settings with ``wording``."""
    token = _WORDING.set(wording)
    try:
        yield
    finally:
        _WORDING.reset(token)
