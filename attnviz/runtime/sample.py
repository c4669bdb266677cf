"""A model's own sample input (``attnviz.sample`` metadata), with a relative image path resolved.

The GUI opens a model with it; ``attnviz figure MODEL`` falls back to it when no input is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from attnviz.core import metadata as md

if TYPE_CHECKING:
    from attnviz.runtime.request import AnalyzeRequest

KEYS = ("text", "text_pair", "image", "audio", "generate")
# each key's value in words, for messages; "text" is overridden when the model reads it as a series (SERIES_TEXT)
WORDS = {
    "text": "text",
    "text_pair": "text pair",
    "image": "image",
    "audio": "audio clip",
    "generate": "generate {value}",
}
SERIES_TEXT = "numeric series"


def sample_input(meta: dict, model_path: str | Path) -> dict:
    """``{"text"|"text_pair"|"image"|"generate": value}`` from the metadata; {} when there is none."""
    sample = meta.get("sample") or {}
    if not isinstance(sample, dict):
        return {}
    out = {k: sample[k] for k in KEYS if sample.get(k) not in (None, "")}
    for key in ("image", "audio"):
        if out.get(key):
            found = _sample_file(str(out[key]), Path(model_path), RUN_SAMPLE if key == "image" else None)
            if found is None:  # a model's metadata never makes attnviz read a file outside the model's folder
                del out[key]
            else:
                out[key] = str(found)
    return out


FOLDER_META = "encoder_model.onnx"  # the file of a model folder whose metadata holds the folder's sample
# the image `attnviz train` writes beside the model it exports (the metadata names the demo's copy under resources/)
RUN_SAMPLE = "sample.png"
# demos keep samples in resources/samples/ beside models/ (checkout) or beside the model (wheel: attnviz/demos)
DEMO_SAMPLES = Path("resources", "samples")


def _sample_file(name: str, model_path: Path, run_sample: str | None) -> Path | None:
    """Where the sample image (clip) a model's metadata names is: a relative path inside the model's folder (a
    speech model's folder itself), a run folder's ``run_sample``, or the checkout's ``resources/samples/``; None for an absolute path, a path out of
    the folder, or no such file (never the current directory: the same model opens the same from anywhere)."""
    rel = Path(name)
    if rel.is_absolute() or ".." in rel.parts:
        return None
    # a speech model is a folder (encoder_model.onnx + decoder_model.onnx): its sample clip lies inside it
    folder = model_path if model_path.is_dir() else model_path.parent
    candidates = [(folder / rel, folder)]  # (file, the folder it must stay in)
    if run_sample:
        candidates.append((folder / run_sample, folder))
    if rel.parent == DEMO_SAMPLES:
        candidates.append((folder.parent / rel, folder.parent / DEMO_SAMPLES))
    # resolved, as external data is (runtime/loading.py): a link in the folder does not lead out of it either
    return next((c for c, base in candidates if c.is_file() and base.resolve() in c.resolve().parents), None)


@dataclass(frozen=True)
class Sample:
    """A model's sample input and the roles of the model's inputs, which say what its values are."""

    values: dict  # as sample_input returns it; {} when the model has none
    roles: frozenset[str] = frozenset()

    def describe(self) -> str:
        """The values in words: "text", "image", "numeric series, generate 8"."""
        # a "text" fills the series input of a model that has no token input (runtime/builders.prepare)
        words = WORDS | ({"text": SERIES_TEXT} if "series" in self.roles and "tokens" not in self.roles else {})
        return ", ".join(words[k].format(value=self.values[k]) for k in KEYS if k in self.values)


def sample_for_path(model_path: str | Path) -> Sample:
    """:func:`sample_input` read from an ONNX file's metadata without loading its weights, with the roles of the
    graph's inputs (metadata ``attnviz.inputs`` first, else guessed from names, as the engine does)."""
    import onnx

    from attnviz.runtime.inputs import guess_role
    from attnviz.runtime.model import io_info

    # a speech folder's sample is in its encoder's metadata (the engine's ModelSet reads it there too)
    path = Path(model_path) / FOLDER_META if Path(model_path).is_dir() else Path(model_path)
    try:
        m = onnx.load(str(path), load_external_data=False)
    except Exception:
        return Sample({})
    meta = md.parse({p.key: p.value for p in m.metadata_props})
    given = md.section(meta, "inputs")
    weights = {t.name for t in m.graph.initializer}
    inputs = [io_info(v) for v in m.graph.input if v.name not in weights]
    roles = frozenset(given.get(i.name) or guess_role(i.name, i.dtype, i.rank) for i in inputs)
    return Sample(sample_input(meta, model_path), roles)


def require_input(req: AnalyzeRequest, model_path: str | Path) -> None:
    """Refuse a request that names no input at all (no text, image, audio or feeds) with :func:`no_input`'s line (the CLI
    checks this before opening the model; the window before running it)."""
    from attnviz import AttnvizError

    if req.text is None and req.image is None and req.audio is None and req.feeds is None:
        raise AttnvizError(no_input(model_path))


SAMPLE_KEYS = ("text", "image", "audio")  # a sample's input, as no_input_<key> names its flag
SAMPLE_SHOWN_WHOLE = 240  # characters of a sample text a refusal quotes whole (past it, its first 40 and "…")


def no_input(model_path) -> str:
    """The line for a request with no input: what this model takes, shown by its own sample when it has one
    (a forecaster's series goes in --text as numbers, which the generic line never said)."""
    from attnviz.core.setting_words import fix
    from attnviz.core.words import with_article

    generic = fix("no_input")
    path = Path(str(model_path))
    # a folder too: a Whisper export's sample is its clip (the spoken-digits demo's: the generic line named --text and
    # --image first, which it cannot take)
    sample = sample_for_path(path) if path.is_file() or path.is_dir() else None
    if sample is None or not (set(sample.values) & set(SAMPLE_KEYS)):
        return generic
    key, value = next((k, str(sample.values[k])) for k in SAMPLE_KEYS if k in sample.values)
    what = sample.describe().split(",")[0]
    what = what if what == "text" else with_article(what)  # "text", "an image", "a numeric series", "an audio clip"
    import shlex

    if key != "text" or len(value) <= SAMPLE_SHOWN_WHOLE:
        # pasted as it is, the line's own flag runs the sample: a path cut short named no file, and a text cut at 40
        # characters with "…" (the translation demo's verse, the forecaster's 32 numbers) ran on that cut text
        shown = shlex.quote(value)
    else:
        shown = repr(value[:40] + "…")
    return f"no input: {path.name} takes {what}; {fix(f'no_input_{key}', shown=shown)}"
