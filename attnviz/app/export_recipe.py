"""File ▸ Export view's recipe: the figure the window drew, with the ``F.ext.recipe.json`` that ``attnviz figure
--recipe`` turns into the same bytes (as ``attnviz figure --out F.ext`` writes one).

The sources part says what the window ran: the model file and the inputs of the run shown (or the maps file it
opened).  Where the command line cannot repeat that run (a model opened by a stand-in, inputs with no file) there is no recipe and :class:`WindowExport` says why; the view part is
:mod:`attnviz.figures.from_selection`'s, kept only when it draws the same bytes.  Qt-free: it runs in a worker.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from attnviz import AttnvizError

if TYPE_CHECKING:
    from attnviz.runtime.request import AnalyzeRequest


@dataclass(frozen=True)
class RunSources:
    """What the shown result was made from, as the window knows it; :meth:`recipe_keywords` words it for
    :func:`attnviz.figures.recipe.make_recipe`."""

    model: str | None = None  # the model file (or export folder) the window opened
    maps: str | None = None  # or an `attnviz extract` maps file it opened
    request: AnalyzeRequest | None = None  # the AnalyzeRequest the result was run on (None: loaded maps)
    provider: str = "auto"
    tokenizer: str | None = None
    variant: str | None = None
    why_not: str | None = None  # set by the window: a run the command line cannot repeat

    def recipe_keywords(self, batch_index: int | None) -> dict:
        """make_recipe's keywords; AttnvizError (one line) where the command line cannot repeat the run."""
        if self.why_not:
            raise AttnvizError(self.why_not)
        if self.maps is not None and self.model is None:
            return {"maps": self.maps, "batch_index": batch_index}
        req = self.request
        if self.model is None or req is None:
            raise AttnvizError("the result shown was not run from a model file")
        files = {}
        for key in ("image", "audio", "feeds"):
            value = getattr(req, key)
            several = value if isinstance(value, (list, tuple)) else [value]
            if value is not None and not all(isinstance(v, (str, os.PathLike)) for v in several):
                raise AttnvizError(f"the run's {key} is not a file")
            if value is not None and key != "image" and len(several) > 1:
                raise AttnvizError(f"a recipe holds one {key} file, and this run had several")
            files[key] = None if value is None else [str(v) for v in several] if len(several) > 1 else str(several[0])
        if req.use_cache is not True:
            raise AttnvizError("the run did not use the model's cache, which the command line always does")
        out = dict(
            model=self.model,
            text=list(req.texts) if req.texts else req.text,  # a dual encoder's candidate texts, as --text each
            text_pair=req.text_pair,
            **files,
            tokenizer=self.tokenizer,
            generate=int(req.generate or 0),
            provider=self.provider or "auto",
            mode=req.mode,
            image_size=list(req.image_size) if req.image_size else None,
            image_mean=list(req.image_mean) if req.image_mean else None,
            image_std=list(req.image_std) if req.image_std else None,
            max_tokens=req.max_tokens,
            batch_index=batch_index,
        )
        # recorded only when set, as `figure` records them only when given (figures.command._RECORDED_WHEN_GIVEN)
        given = {"max_seconds": req.max_seconds, "variant": self.variant, "beams": req.beams if req.beams > 1 else None}
        return out | {k: v for k, v in given.items() if v is not None}


@dataclass(frozen=True)
class WindowExport:
    """What an export wrote: the figure, its recipe (None: none, ``why_not`` says why)."""

    path: Path
    recipe: Path | None = None
    why_not: str | None = None
    glyphs: str | None = None  # the characters no installed font has (printed as boxes), as `figure`'s note says

    def status(self) -> str:
        if self.recipe is not None:
            said = f"Exported {self.path} and its recipe {self.recipe.name} (attnviz figure --recipe draws it again)"
        else:
            said = f"Exported {self.path}; no recipe: {self.why_not}"
        return f"{said}. Note: {self.glyphs}" if self.glyphs else said


def without_recipe(path, why: str, glyphs: str | None = None) -> WindowExport:
    """A figure written with no recipe (a comparison's): an earlier export's recipe beside it goes, since it would
    draw that figure, not this one."""
    from attnviz.figures.recipe import recipe_path_for

    recipe_path_for(path).unlink(missing_ok=True)
    return WindowExport(Path(path), None, why, glyphs)


def save_with_recipe(result, view: str, selection, path, figure_style, sources: RunSources) -> WindowExport:
    """Draw the window's figure, write it, and beside it the recipe that draws the same bytes where there is one
    (the two written together, as `figure` writes them)."""
    from attnviz.core.rows import pick_row
    from attnviz.core.writes import atomic_write_bytes, atomic_write_files
    from attnviz.figures import encoded_figure, figure_format, glyph_note, render_figure  # (lazily: with matplotlib)
    from attnviz.figures.from_selection import batch_row, recipe_figure
    from attnviz.figures.recipe import RECIPE_FLAG, make_recipe, recipe_bytes, recipe_path_for

    path = Path(path)
    rpath = recipe_path_for(path)
    fig = render_figure(result, view, selection, figure_style)
    glyphs = glyph_note(fig)
    data = encoded_figure(fig, path, flag="")
    try:
        keywords = sources.recipe_keywords(batch_row(result, selection))
        check = recipe_figure(result, view, selection, figure_style, figure_format(path), data)
        if check.spec is None:
            raise AttnvizError(check.why_not or "the command line cannot draw this figure")
    except AttnvizError as e:
        atomic_write_bytes(path, data, "")
        return without_recipe(path, str(e), glyphs)
    recipe = make_recipe(check.spec, output=path, **keywords)
    info = (pick_row(result, selection.batch) if result.batch_size > 1 else result).info or {}
    recipe["run"] = {"provider_used": info.get("provider")}  # as `figure` records it
    if info.get("image_preprocessing"):
        recipe["run"]["image_preprocessing"] = info["image_preprocessing"]
    if info.get("fidelity"):
        recipe["run"]["fidelity"] = list(info["fidelity"])
    atomic_write_files([(path, data, ""), (rpath, recipe_bytes(recipe, rpath), RECIPE_FLAG)])
    return WindowExport(path, rpath, glyphs=glyphs)
