"""A corpus run's result files by name, and the refusal of an ``--out`` that would replace an input.

Plain Python (no numpy): ``attnviz corpus`` checks its ``--out`` before it starts its workers, which it does before
it imports numpy and the run's modules (corpus/prestart.py); :mod:`attnviz.corpus.output` writes and reads them."""

from __future__ import annotations

from pathlib import Path

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
