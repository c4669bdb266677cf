"""Which view reads which flag: the one table ``attnviz figure`` and ``attnviz open`` check a command line against.

A view-specific flag on a view that does not read it passed without a word (``figure --view heatmap --image-base
grey``, ``--link-cut`` on a heatmap, ``--scale`` on links): the figure came out as if it had not been typed, and
the user may believe it had its effect.  Such a flag now gets one ``attnviz: note:`` line naming it and the views
that read it; the figure is drawn all the same (exit 0).  ``open``'s flags set the window's state, which its other
tabs read: the note names the opening tab that does not show them.

Every flag of ``figure`` and ``open`` is either in :data:`VIEW_FLAGS` or in :data:`GENERAL` (tests/core/
test_view_flags.py walks both parsers), so a new view flag cannot be left out of the note.  What each view reads
was measured, not guessed: drawing a view with a flag it is listed here as not reading gives the same bytes as
drawing it without (the same test, on the bundled models).

Some flags mean nothing for the model itself, whatever the view: ``--picture`` of a text classifier, which has no
picture at all.  A note there ("the heatmap view does not read --picture") says the wrong thing (no view would),
so such a flag is refused (:func:`check_model_reads`, one line, exit 2); the note stays for a model that has the
thing the flag chooses but a view that does not show it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnviz.core.view_names import BY_KEY, FIGURE_VIEWS

if TYPE_CHECKING:
    from attnviz.core.attention import AttentionResult


@dataclass(frozen=True)
class ViewFlag:
    """A flag that only some views read."""

    flag: str  # as typed (a --no-X form is the same flag)
    dest: str  # its argparse dest in `figure` and `open` (and FigureSpec's field)
    views: tuple[str, ...]  # the views (core.view_names keys) whose drawing it changes
    # the window's tabs no figure draws that read it too (the Head stats table): `open`'s note names them
    tabs: tuple[str, ...] = ()

    @property
    def window_views(self) -> tuple[str, ...]:
        """The views and tabs that read it in the window."""
        return self.views + self.tabs

    def __post_init__(self):
        unknown = [v for v in self.window_views if v not in BY_KEY]
        if unknown:
            raise ValueError(f"{self.flag}: unknown views {unknown}")


# the views that draw weights on a colour scale (Token links draws them as line widths and opacity, its own key;
# Audio regions' heat band is each query's own 0..max)
COLOUR_SCALE = ("heatmap", "overview", "alignment", "image", "strip")
# the views that draw the token maps' rows (the image and audio views draw one query's row over the input, whole)
TOKEN_ROWS = ("heatmap", "overview", "links", "alignment", "strip")

VIEW_FLAGS = (
    ViewFlag("--query", "query", ("heatmap", "links", "image", "audio")),
    ViewFlag("--rows", "rows", ("alignment", "strip")),  # the strip's panels over text are Alignment's rows
    ViewFlag("--hide-special", "hide_special", TOKEN_ROWS),
    ViewFlag("--keep", "keep", TOKEN_ROWS),
    ViewFlag("--log", "log", COLOUR_SCALE),
    ViewFlag("--scale", "scale", COLOUR_SCALE),
    ViewFlag("--vmax", "vmax", COLOUR_SCALE),
    ViewFlag("--cmap", "cmap", ("heatmap", "overview", "alignment", "image", "audio", "strip")),
    ViewFlag("--image-base", "image_base", ("image", "strip")),
    ViewFlag("--image-from", "image_from", ("image",)),
    ViewFlag("--picture", "picture", ("image",)),
    ViewFlag("--frame", "frame", ("heatmap",)),
    ViewFlag("--span", "span", ("heatmap", "alignment", "links")),
    ViewFlag("--key-span", "key_span", ("heatmap", "alignment", "links")),
    ViewFlag("--link-cut", "link_cut", ("links",)),
    # a speech clip's maps: their frame axes end with the clip unless asked for the window's padding too (Audio
    # regions draw the clip alone, whatever it says); Head stats are of the frames the maps show
    ViewFlag("--padding", "padding", TOKEN_ROWS, tabs=("stats",)),
)
BY_DEST = {f.dest: f for f in VIEW_FLAGS}

# the dests of every other flag of `figure` and `open`: read whatever the view (the selection's block, layer, head,
# step and batch row; the inputs; the figure's size and file; the window's size and screenshot)
GENERAL = frozenset(
    {
        "help", "model", "maps", "recipe", "inputs", "text", "text_pair", "text_file", "image", "audio", "tokenizer",
        "max_tokens", "max_seconds", "generate", "beams", "provider", "mode", "memory", "image_size", "image_mean",
        "image_std", "variant", "view", "block", "layer", "layers", "head", "agg", "batch_index", "step", "title",
        "width", "width_in", "dpi", "font_size", "out", "format", "all_heads", "recipe_out", "no_recipe",
        "max_memory", "screenshot", "size",
    }
)  # fmt: skip


def views_reading(dest: str) -> tuple[str, ...]:
    """The views that read the flag whose dest is ``dest``."""
    return BY_DEST[dest].views


def unread(view: str, given: Iterable[str], window: bool = False) -> list[ViewFlag]:
    """The view flags among ``given`` (dests) that ``view`` does not read, in the table's order (``window``: its
    tabs', :attr:`ViewFlag.tabs` too)."""
    asked = set(given)
    return [f for f in VIEW_FLAGS if f.dest in asked and view not in (f.window_views if window else f.views)]


def _readers(flags: list[ViewFlag], window: bool) -> str:
    """``--log, --scale: heatmap, overview; --link-cut: links``: the flags grouped by the views that read them."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for f in flags:
        if window:
            where = tuple(str(BY_KEY[v].tab) for v in f.window_views if BY_KEY[v].tab)
        else:
            where = tuple(v for v in f.views if v in FIGURE_VIEWS)
        groups.setdefault(where, []).append(f.flag)
    return "; ".join(f"{', '.join(names)}: {', '.join(where)}" for where, names in groups.items())


def unread_note(view: str, given: Iterable[str], *, window: bool = False) -> str | None:
    """The one note line for the view flags ``view`` does not read (None: it reads every one given).  ``window``:
    ``open``'s words (the flags are set, and the tabs that read them show them)."""
    flags = unread(view, given, window)
    if not flags:
        return None
    names = ", ".join(f.flag for f in flags)
    them = "them" if len(flags) > 1 else "it"
    if window:
        tab = BY_KEY[view].tab or view
        return f"the {tab} tab does not show {names}; set for the tabs that read {them} ({_readers(flags, True)})"
    return f"the {view} view does not read {names}; drawn without {them} (read by {_readers(flags, False)})"


@dataclass(frozen=True)
class ModelNeed:
    """What a model's result must hold for a flag to mean anything in any view."""

    has: Callable[[AttentionResult], bool]
    lacks: str  # what the model lacks, after its name ("takes no image")


def _has_image(result: AttentionResult) -> bool:
    from attnviz.core.view.patches import is_vision

    return is_vision(result)


def _has_cross(result: AttentionResult) -> bool:
    # --rows picks which decoder row reads a word of an alignment: the alignment view and the strip over text
    # read it of a cross-attention block only
    return any(b.kind == "cross" for b in result.blocks())


_IMAGE = ModelNeed(_has_image, "takes no image")
# dest -> what the model must hold; a flag not here means something for every model (a query, a colour scale)
MODEL_NEEDS = {
    "picture": _IMAGE,
    "image_base": _IMAGE,
    "image_from": _IMAGE,
    "frame": _IMAGE,  # a vision tower's frames (tiles, images)
    "rows": ModelNeed(_has_cross, "has no cross-attention (an encoder-decoder's)"),
    "padding": ModelNeed(lambda r: r.audio is not None, "hears no sound (a speech model's frames after its clip)"),
}


def meaningless(result: AttentionResult, given: Iterable[str]) -> list[ViewFlag]:
    """The view flags among ``given`` (dests) that mean nothing for ``result``'s model, in the table's order."""
    asked = set(given)
    return [f for f in VIEW_FLAGS if f.dest in asked and f.dest in MODEL_NEEDS and not MODEL_NEEDS[f.dest].has(result)]


def check_model_reads(result: AttentionResult, given: Iterable[str]) -> None:
    """ViewError naming the view flags among ``given`` (dests) that mean nothing for ``result``'s model (no view
    of it would read them), grouped by what it lacks, and the fix: drop them."""
    from pathlib import Path

    from attnviz.core.view.selection import ViewError

    flags = meaningless(result, given)
    if not flags:
        return
    path = (result.info or {}).get("model_path")
    model = Path(str(path)).name if path else "this model"
    groups: dict[str, list[str]] = {}
    for f in flags:
        groups.setdefault(MODEL_NEEDS[f.dest].lacks, []).append(f.flag)
    why = "; ".join(f"{', '.join(names)}: {model} {lacks}" for lacks, names in groups.items())
    names = ", ".join(f.flag for f in flags)
    raise ViewError(f"{why}, so no view reads {'them' if len(flags) > 1 else 'it'}; drop {names}", param=flags[0].dest)
