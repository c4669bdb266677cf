"""A dual encoder's towers fed apart: each image once and each text once, every image against every text after.

CLIP's and SigLIP's image and text towers never meet inside the graph: an image's maps depend on the image alone,
a text's on the text alone, and the pair logits are the scaled cosine of the two pooled embeddings (plus SigLIP's
bias), which the graph makes for every image against every text (``logits_per_image`` ``[images, texts]``).  So N
images against M texts are fed as N images and M texts, the graph's two batch axes each its own: the image tower
runs N times and the text tower M times, not N·M times each.  The result's rows are then made as a run of the
pairs would have them (:class:`~attnviz.core.text_scores.PairLayout`: row ``r`` is image ``r // M`` and text
``r % M``): each row's maps its image's and its text's row of the one array held (``DenseMap.rows``: a view a row,
no copy), the pair logits laid out as the rows' ``[rows, rows]``, so the scores, the views, the figures and a
saved file read them as before.

A graph that will not take the two batches apart (an export for a fixed batch, a tower whose maps do not follow
its own batch) runs the pairs as rows, each image repeated once per text (:func:`as_rows`), as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from attnviz import AttnvizError
from attnviz.core.attention import AttentionResult, DenseMap, MapSource
from attnviz.core.rows import RowsOf
from attnviz.core.text_scores import PairLayout

if TYPE_CHECKING:
    from attnviz.runtime.protocol import AttnModel

# the inputs whose batch axis is the text tower's (the image's is the image's)
TEXT_ROLES = frozenset(("tokens", "mask", "token_types", "positions"))
# a dual encoder's outputs whose axes are the towers' batches, each axis by tower (any other output kept as run)
OUTPUT_TOWERS: dict[str, tuple[str, ...]] = {
    "logits_per_image": ("image", "text"),
    "logits_per_text": ("text", "image"),
    "image_embeds": ("image",),
    "text_embeds": ("text",),
}


def fed_apart(model: AttnModel) -> bool:
    """Whether the towers' inputs may each be fed its own batch: none fixes its batch axis (a graph exported for
    a fixed batch takes the pairs as rows)."""
    roles = model.roles
    towers = [i for i in model.inputs if roles.get(i.name) in TEXT_ROLES | {"image"} and i.rank >= 1]
    return bool(towers) and not any(isinstance(i.shape[0], int) for i in towers)


def as_rows(model: AttnModel, feeds: dict[str, np.ndarray], layout: PairLayout) -> dict[str, np.ndarray]:
    """The towers' feeds (each image once, each text once) as the pairs' rows: row ``r`` image
    ``layout.row_image[r]`` and text ``layout.row_text[r]`` (the image repeated once per text)."""
    roles = model.roles
    out = dict(feeds)
    for name, v in feeds.items():
        role = roles.get(name)
        if role == "image":
            out[name] = v[layout.row_image]
        elif role in TEXT_ROLES and np.ndim(v) >= 1:
            out[name] = v[layout.row_text]
    return out


def follows(result: AttentionResult, layout: PairLayout) -> bool:
    """Whether each site's map holds its own tower's rows (the images', the texts'): a graph whose maps do not
    (one reshaping a tower's map by the other's batch) is run again as rows."""
    want = {"image": len(set(layout.row_image)), "text": len(set(layout.row_text))}
    return all(s.tower in want and m.shape[0] == want[s.tower] for s, m in zip(result.sites, result.maps))


def spread(result: AttentionResult, layout: PairLayout) -> AttentionResult:
    """The towers' run as the pairs' rows, in place: each site's map a view a row of its tower's rows, and each
    tower-batched output (:data:`OUTPUT_TOWERS`) laid out as a run of the rows makes it."""
    rows = {"image": list(layout.row_image), "text": list(layout.row_text)}
    result.maps = [_rows_of(m, rows[s.tower or "image"]) for s, m in zip(result.sites, result.maps)]
    for name, towers in OUTPUT_TOWERS.items():
        v = result.outputs.get(name)
        if v is not None and np.ndim(v) >= len(towers):
            result.outputs[name] = np.asarray(v)[np.ix_(*(rows[t] for t in towers))]
    return result


def _rows_of(m: MapSource, rows: list[int]) -> MapSource:
    """Batch row ``b`` is row ``rows[b]`` of ``m``, held once (an on-demand map: asked for that row's heads)."""
    if isinstance(m, DenseMap):
        return DenseMap(m.held, [m.rows[r] for r in rows] if m.rows is not None else rows)
    return RowsOf(m, rows)


def refuse_unpaired(label: str, result: AttentionResult) -> None:
    """Raw feeds pair image i with text i (no texts typed, no pairs made): a text batch unlike the image batch
    (one image and several texts fed, the zero-shot way) is refused in one line saying what to give."""
    images = sorted({m.shape[0] for s, m in zip(result.sites, result.maps) if s.tower == "image"})
    texts = sorted({m.shape[0] for s, m in zip(result.sites, result.maps) if s.tower == "text"})
    if images and texts and images != texts:
        raise AttnvizError(
            f"{label}: a dual encoder's rows pair image i with text i, and {_count(images[-1], 'image')} and "
            f"{_count(texts[-1], 'text')} were fed; give as many images as texts (row i's maps are image i's and text "
            "i's), or one image against several texts with --image once and --text once per text (every image is "
            "scored against every text for you)"
        )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
