"""The GUI's name for the one view model, :mod:`attnviz.core.view` (kept so view modules and
branches that import ``attnviz.gui.selection`` keep working; it holds no logic of its own)."""

from attnviz.core.view import (  # noqa: F401 -- re-exports
    MODE_TITLES,
    MODES,
    MapView,
    Selection,
    alignment_map,
    clamp,
    clean_label,
    compute_map,
    downsample,
    generation_rows,
    head_map,
    layer_range,
    n_steps,
    producing_row,
    step_rows,
    thumbnails,
)


def alignment_rows(result, blk):
    """``(rows, words)`` of :func:`attnviz.core.view.generation_rows` as arrays (older call sites)."""
    import numpy as np

    pairs = generation_rows(result, blk)
    return np.asarray([r for r, _ in pairs], dtype=int), [clean_label(w) for _, w in pairs]
