"""The window's decisions about files, models and inputs, as plain functions (one message per refusal)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from attnviz import AttnvizError
from attnviz.core.view import Selection, clamp, layer_range
from attnviz.runtime.audio import AUDIO_SUFFIXES
from attnviz.runtime.folder import CORPUS_FILES, is_corpus_results
from attnviz.runtime.raster import IMAGE_SUFFIXES

if TYPE_CHECKING:
    from attnviz.core.setting_words import Wording
    from attnviz.runtime.protocol import AttnModel

# what a path opens as, by extension (a folder is an export folder: a model)
OPENERS = {
    ".onnx": "model",
    ".npz": "maps",
    **{s: "image" for s in IMAGE_SUFFIXES},
    **{s: "audio" for s in AUDIO_SUFFIXES},
}


def file_kind(path) -> str:
    """``"model"``, ``"image"``, ``"audio"``, ``"maps"`` or ``"corpus"`` (an ``attnviz corpus`` results folder) for a path the
    user opened or dropped; one message otherwise."""
    p = Path(path)
    kind = ("corpus" if _results_folder(p) else "model") if p.is_dir() else OPENERS.get(p.suffix.lower())
    if kind is None:
        # a figure's recipe is drawn again by the command that wrote it (figure --help said open read it too)
        recipe = (
            f"; a figure recipe is drawn again by: attnviz figure --recipe {p}" if p.suffix.lower() == ".json" else ""
        )
        raise AttnvizError(
            f"cannot open {p.name}: attnviz opens ONNX models (.onnx), images (.png, .jpg, …), sound files "
            f"(.wav, .flac, .ogg) and attention maps (.npz from 'attnviz extract'){recipe}"
        )
    if not p.exists():
        raise AttnvizError(f"cannot open {p}: no such file")
    return kind


def _results_folder(p: Path) -> bool:
    """A corpus results folder, or what is left of one (a results file, no model): the Corpus view then names
    the missing file, where a model folder's open would only say it has no .onnx file."""
    if is_corpus_results(p):
        return True
    return any((p / n).is_file() for n in CORPUS_FILES) and not any(p.glob("*.onnx"))


def dropped(paths: list[str]) -> tuple[str, str | None] | None:
    """What a drop of several files opens: a model first, with an image dropped beside it; else the first file."""
    if not paths:
        return None
    paths = sorted(paths, key=lambda p: 0 if p.lower().endswith(".onnx") else 1)
    images = [u for u in paths[1:] if Path(u).suffix.lower() in IMAGE_SUFFIXES]
    if paths[0].lower().endswith(".onnx") and images:
        return paths[0], images[0]
    return paths[0], None


def model_kind(model: AttnModel) -> str:
    return model.kind


def model_kind_words(model: AttnModel) -> str:
    """The kind as the window says it (a dual encoder's towers named; :func:`model_kind` is the engine's word)."""
    from attnviz.runtime.model_summary import kind_words

    return kind_words(model.kind, model.sites)


def model_name(model: AttnModel) -> str:
    return model.name or "this model"


def default_generate(model: AttnModel, given: dict | None = None) -> int:
    """Generation steps for a freshly opened model: the view model's one default, shared with ``attnviz figure``
    (:func:`attnviz.core.steps_default.default_generate`)."""
    from attnviz.runtime.default_steps import default_steps

    return default_steps(model, given)


def sample_input(model: AttnModel) -> dict:
    """The model's ``attnviz.sample`` input, with relative image paths resolved."""
    from attnviz.runtime.sample import sample_input as from_meta

    return from_meta(model.meta, model.path)


def takes_audio(model: AttnModel | None) -> bool:
    return model is not None and "audio" in set(model.roles.values())


def first_input(model: AttnModel, given: dict, current_image: str = "", current_audio: str = "") -> dict:
    """The input a freshly opened model runs: its sample, the image (sound) the user already chose (for an image
    (speech) model without a sample), then what the caller gave; ``generate`` defaults per family."""
    values = sample_input(model)
    if model_kind(model).startswith("vision") and not values.get("image") and current_image:
        values["image"] = current_image
    if current_audio and takes_audio(model):
        values["audio"] = current_audio
    values.update(given)
    values.setdefault("generate", default_generate(model, given))
    return values


def several_texts_problem(model: AttnModel, given: dict) -> str | None:
    """Several ``--text`` for a model that takes one (not a dual encoder): what `extract` says (runtime/builders.py),
    where the window joined them into one text and the tokenizer then refused a word of the join."""
    texts = given.get("text")
    dual = model.kind == "vision" and "tokens" in set(model.roles.values())
    if not isinstance(texts, list | tuple) or len(texts) < 2 or dual:
        return None
    from attnviz.runtime.builders import several_texts_message

    return several_texts_message(len(texts), f"{model_name(model)} ({model.kind}) takes one text")


def waiting_for_audio(model: AttnModel, values: dict) -> str | None:
    """What to do when a speech model opens with no sound to hear (the window waits for one instead of running
    into the engine's refusal); None when it can run."""
    if not takes_audio(model) or values.get("audio"):
        return None
    return (
        f"{model_name(model)} is a speech model: choose a sound file (File ▸ Open audio…, the audio field, "
        "or drop a .wav / .flac / .ogg on the window)"
    )


def check_audio_model(model: AttnModel | None, audio) -> None:
    """A sound file opened on its own needs a speech model."""
    name = Path(audio).name
    if model is None:
        raise AttnvizError(f"open a speech model (a Whisper folder) first, then the sound {name}", param="audio")
    if not takes_audio(model):
        raise AttnvizError(
            f"{model_name(model)} does not hear sound; open a speech model (a Whisper folder) for {name}",
            param="audio",
        )


def no_attention_reason(model: AttnModel) -> str:
    return model.no_attention_reason or "no attention operations were found"


def check_runnable(model: AttnModel | None) -> None:
    """A model is open and has attention to show; else one message saying what to do."""
    if model is None:
        raise AttnvizError("no model open: use File ▸ Open model… or drop an .onnx file on the window")
    if not model.sites:
        raise AttnvizError(f"{model_name(model)}: no attention to show — {no_attention_reason(model)}")


def check_image_model(model: AttnModel | None, image, wording: Wording | None = None) -> None:
    """An image opened on its own needs a vision or captioning model (``wording``: who is told, the window or the
    command line, `attnviz open cat.png`, which has no model to open it first)."""
    from attnviz.core.setting_words import fix

    name = Path(image).name
    if model is None:
        raise AttnvizError(fix("image_needs_model", wording, name=name), param="image")
    if not (model_kind(model) or "vision").startswith("vision"):
        raise AttnvizError(
            f"{model_name(model)} takes text, not images; open a vision or captioning model for {name}",
            param="image",
        )


def neighbour_head(n_layers: int, heads_in, layer: int, head: int, d: int) -> tuple[int, int]:
    """The head ``d`` steps from (layer, head), wrapping into the previous / next layer at the ends
    (``heads_in(layer)`` gives a layer's head count; the session clamps what runs off the block)."""
    h = head + d
    if h < 0 and layer > 0:
        layer -= 1
        h = heads_in(layer) - 1
    elif h >= heads_in(layer) and layer < n_layers - 1:
        layer += 1
        h = 0
    return layer, h


def head_step(sel: Selection, n_layers: int, heads_in, d: int) -> tuple[int, int]:
    """Where ←/→ (``d`` = -1/+1) go from the selection: the neighbouring head (:func:`neighbour_head`); from an
    aggregate or rollout, the first head (→) or the last (←) of the layers it reduces, the ends of the overview's
    frame (stepping from the spin boxes' hidden head skipped head 0: → from "mean over heads" showed head 1)."""
    if sel.mode != "head":
        lo, hi = layer_range(sel, n_layers)
        return (lo, 0) if d > 0 else (hi, heads_in(hi) - 1)
    return neighbour_head(n_layers, heads_in, sel.layer, sel.head, d)


def on_block(sel: Selection, blocks, block: int, **changes) -> Selection:
    """The selection moved to ``block`` (the Alignment and Image views draw one block of their own): rollout
    multiplies square self-attention maps, so on a cross-attention block it becomes the mean over heads."""
    mode = "mean" if sel.mode == "rollout" and blocks[block].kind == "cross" else sel.mode
    return clamp(sel.with_(block=block, mode=mode, **changes), blocks)


def on_mode(sel: Selection, mode: str, n_layers: int, **changes) -> Selection:
    """The "show" box moved to ``mode``.  Rollout multiplies the layers' maps from the first up: chosen over the one
    layer the default mean reads (the last), it was a one-layer "rollout" that `figure --aggregate rollout` never
    draws; it starts at layer 0 then, as the command line's does.  A range the user widened is kept."""
    new = sel.with_(mode=mode, **changes)
    lo, hi = layer_range(sel, n_layers)
    if mode == "rollout" and sel.mode != "rollout" and lo == hi and "layer_lo" not in changes and n_layers > 1:
        new = new.with_(layer_lo=0, layer_hi=-1)
    return new


def result_status(result) -> str:
    """The status bar's line for a drawn result: its maps and generated words, and first a note a researcher must
    not miss (a text mostly of the tokenizer's unknown token: every map is [UNK] against [UNK]); the Run section
    of the sidebar lists every note whole."""
    from attnviz.core.rows import beam_rows
    from attnviz.runtime.unknown_tokens import unknown_notes

    gen = f", generated “{' '.join(result.generated)}”" if result.generated else ""
    beams = beam_rows(result)
    if gen and beams is not None:  # the line stays while the beam box shows another beam: say whose words these are
        gen += f" (the best of {len(beams)} beams; the beam box shows the others)"
    line = f"{len(result.maps)} attention maps{gen}"
    unknown = unknown_notes((result.info or {}).get("notes"))
    return f"note: {unknown[0]} · {line}" if unknown else line
