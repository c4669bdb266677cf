"""A corpus run's result files by name, and the refusal of an ``--out`` that would replace an input.

Plain Python (no numpy): ``attnviz corpus`` checks its ``--out`` before it starts its workers, which it does before
it imports numpy and the run's modules (corpus/prestart.py); :mod:`attnviz.corpus.output` writes and reads them."""

from __future__ import annotations

from pathlib import Path

from attnviz import AttnvizError
from attnviz.core import writes

HEADS = "heads.parquet"
EXAMPLES = "examples.parquet"
RUN = "run.json"


def guard(out: Path, inputs: dict[str, str | None], extra: tuple[str, ...] = ()) -> None:
    """Refuse (before anything is written) a results folder where a result would replace an input — e.g.
    ``--texts d/heads.parquet --out d``; an ``--images`` folder stands for its image files."""
    from attnviz.runtime.raster import IMAGE_SUFFIXES

    def files(what: str, p: str | None):
        if what == "the --images folder" and p and Path(p).is_dir():
            return sorted(str(f) for f in Path(p).iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
        return p

    writes.guard(
        {w: files(w, p) for w, p in inputs.items()}, {"--out": [out / n for n in (HEADS, EXAMPLES, RUN, *extra)]}
    )


# the command that wrote a results folder, told by a key only its run.json holds (corpus, compare and ablate all
# write heads.parquet and run.json; older folders carry no command name)
_OWNER_KEYS = (("models", "compare"), ("not_ablated", "ablate"), ("example_ranking", "corpus"), ("top_k", "corpus"))


def refuse_foreign(out: Path, command: str) -> None:
    """Refuse an ``--out`` folder that holds another command's results: ``ablate --out`` a corpus run's folder
    replaced its heads.parquet and run.json without a word (hours of corpus statistics lost), leaving a mix that
    ``attnviz open`` could not read.  The same command's results are its own to replace (a rerun, a resume)."""
    from attnviz.core.untrusted import read_json

    run = out / RUN
    if not run.is_file():
        return
    try:
        kept = read_json(run, "run.json", limit=64 * 2**20)
    except AttnvizError:  # not a run.json attnviz can read: nobody's results to keep
        return
    owner = next((cmd for key, cmd in _OWNER_KEYS if isinstance(kept, dict) and key in kept), None)
    if owner is not None and owner != command:
        raise AttnvizError(
            f"--out {out} holds the results of 'attnviz {owner}' ({HEADS}, {RUN}), which 'attnviz {command}' would "
            "replace; give another --out"
        )


def _model_folders(model: Path) -> set[Path]:
    """The folders ``attnviz open`` reads a model from: a file's own folder (and a Hub repository's, above its
    ``onnx/``), a folder given as the model (and its ``onnx/``)."""
    p = model.resolve()
    if p.is_dir():
        return {p, p / "onnx"}
    return {p.parent, p.parent.parent} if p.parent.name == "onnx" else {p.parent}


def refuse_model_folder(out: Path, models: dict[str, str | None]) -> None:
    """Refuse an ``--out`` that is the folder a model is read from: its heads.parquet and run.json there made
    ``attnviz open FOLDER`` open the results instead of the model (a results folder is told by those two files),
    and mixed them into the export's files.  A folder inside the model's is fine: nothing reads it as the model."""
    target = out.resolve()
    for what, model in models.items():
        if model and target in _model_folders(Path(model)):
            raise AttnvizError(
                f"--out {out} is the folder {what} is read from: {HEADS} and {RUN} there would make 'attnviz open' "
                "of that folder show these results instead of the model; give another --out (a folder inside it is "
                "fine)"
            )
