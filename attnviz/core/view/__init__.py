"""The one view model: what a view shows, computed once for the screen and for the figure.

A :class:`Selection` says what the user looks at (block, layers, head or aggregate, generation
step, batch row, special tokens, kept mass, log scale, query).  The functions below turn it plus
an :class:`~attnviz.core.AttentionResult` into plain numbers and strings -- :class:`MapView`
(heatmap, alignment), :func:`thumbnails` (overview), :class:`LinksView` (token links),
:class:`OverlayView` (image regions) -- and hold the palette, colour maps and the label rules.
The GUI draws these with pyqtgraph, :mod:`attnviz.figures` with matplotlib; neither decides
anything about *what* is shown, so what is on screen is what is exported.

Numpy only: no Qt, no matplotlib, no onnxruntime.

The modules, each importing only those above it (no cycles):

- :mod:`.palette` -- colours, colour maps, the colour scales (constants only); :mod:`.link_cut` -- what token
  links are measured against (each row's strongest, or the map's top)
- :mod:`.selection` -- :class:`Selection`, :class:`ViewError`, the blocks and the matrix a selection picks
- :mod:`.defaults` -- what a freshly opened result shows; :mod:`.opening` -- the view it opens on, per kind of model;
  :mod:`.labels` -- token labels and ticks
- :mod:`.colourbar` -- colour-bar ticks, range and words; :mod:`.steps` -- generation steps and decoder rows
- :mod:`.pooling` -- max-pooling a map in runs of positions, band by band of rows (screen, thumbnails, figure)
- :mod:`.overview` -- thumbnails and their cache, and the top of the "shared" colour scale
- :mod:`.zoom` -- a long map's region drawn at a zoomed view's pixels (:func:`plan_region`, :func:`pool_region`)
- :mod:`.maps` -- :class:`MapView` and :func:`compute_map` (heatmap); :mod:`.alignment` -- words x source tokens
- :mod:`.strip` -- one panel per generated word
- :mod:`.image_from`, :mod:`.patches`, :mod:`.heat`, :mod:`.heat_scale`, :mod:`.overlay`, :mod:`.image_heads` -- image
  regions: whose attention (the words' or the vision tower's), the keys, the drawing, its colour scale, the view,
  several heads side by side
- :mod:`.frame_map` -- the Head map: a tower's frames one frame at a time (:func:`head_map`), else compute_map
- :mod:`.links` -- token links (a tower's frames: the Head map's frame), cut as the selection's ``link_cut`` says
- :mod:`.compare` -- two models compared: B's map of A's selection, and A − B
- :mod:`.span` -- a window of positions cut out of a map (figures' ``--span``); :mod:`.find` -- a token by text or position
- :mod:`.clip` -- a speech clip's frames among the encoder's window: every map's frame axes end with the clip

Callers import from the package (``from attnviz.core import view as vm``); a test that patches a module-level
setting patches the submodule that reads it (``attnviz.core.view.overview.POOL_THREADS_FROM``).
"""

from __future__ import annotations

from attnviz.core.steps_default import DECODER_TEXT, DEFAULT_GENERATE, default_generate
from attnviz.core.view.alignment import (
    alignment_map,
    cross_block,
    row_story,
)
from attnviz.core.view.clip import ClipCut, clip_cut, clip_frame_count, clip_note, pads_clip
from attnviz.core.view.colourbar import (
    CBAR_TICKS,
    HIDDEN_NOTE,
    check_scale,
    colour_range,
    log_ticks,
    nice_ticks,
    notes_label,
    overview_label,
    overview_scale,
    overview_top,
    scale_ticks,
    weight_label,
)
from attnviz.core.view.compare import (
    DIFF_CMAP,
    DIFF_COLOURS,
    DIFF_FLOOR,
    DIFF_TITLE,
    DIVERGENCE_COLOURS,
    FramesKey,
    compute_diff_map,
    compute_other_map,
    divergence_colour,
    map_label,
    matching_selection,
)
from attnviz.core.view.dark import dark_note
from attnviz.core.view.defaults import (
    declared_alignment,
    default_image_base,
    default_selection,
)
from attnviz.core.view.find import Found, find_token
from attnviz.core.view.frame_map import (
    check_frame,
    frame_names,
    head_map,
    shown_frame,
    tower_frames,
)
from attnviz.core.view.heat import (
    IMAGE_BASES,
    SMOOTH_SIGMA,
    base_rgb,
    check_image_base,
    composite,
    grey_base,
    overlay_alpha,
    upsample,
)
from attnviz.core.view.heat_scale import HeatScale, heat_scale
from attnviz.core.view.image_from import (
    DEFAULT_IMAGE_FROM,
    IMAGE_FROM,
    ImageFrom,
    image_from_entry,
)
from attnviz.core.view.image_heads import HeadsOverlay, heads_overlay, image_heads
from attnviz.core.view.labels import (
    MAX_LABEL_CHARS,
    TITLE_SEP,
    clean_label,
    clean_labels,
    frame_step,
    tick_indices,
    time_tick_indices,
    title_lines,
)
from attnviz.core.view.link_cut import DEFAULT_LINK_CUT, LINK_CUTS, RECIPE_LINK_CUT, LinkCut, check_link_cut
from attnviz.core.view.link_span import span_links
from attnviz.core.view.links import (
    LINK_MIN,
    LINKS_PER_PAGE,
    LINKS_PER_ROW,
    LinksView,
    keep_strongest,
    link_alpha,
    link_heads,
    links_key,
    links_view,
    page_links,
    strongest_links,
)
from attnviz.core.view.maps import (
    MapView,
    compute_map,
    drawn_cells,
    map_notes,
    row_stretched,
    series_dots,
)
from attnviz.core.view.opening import OPENING_VIEWS, OpeningView, opening_view, result_kind
from attnviz.core.view.overlay import (
    GLOBAL_PANEL,
    QUERY_OUTLINE,
    TILES_PANEL,
    OverlayPanel,
    OverlayView,
    default_image_query,
    is_patch_label,
    overlay_view,
)
from attnviz.core.view.overview import (
    POOL_THREADS_FROM,
    THUMB,
    THUMB_CACHE_ENTRIES,
    block_top,
    downsample,
    focus_heads,
    layer_labels,
    layer_windows,
    scale_top,
    thumbnails,
    thumbnails_kept,
    windows_note,
)
from attnviz.core.view.overview_scale import (
    OVERVIEW_SCALES,
    SPEECH_PERCENTILE,
    OverviewScale,
    block_tops,
    has_kind_scale,
    overview_colours,
)
from attnviz.core.view.palette import (
    DEFAULT_SCALE,
    HEAD_COLOURS,
    IMAGE_DEFAULT_SCALE,
    LOG_DECADES,
    MAP_CMAP,
    OFF_CROSS,
    OFF_NOTE,
    OFF_VEIL,
    OVERLAY_CMAP,
    SCALES,
    SPAN_SCALES,
)
from attnviz.core.view.patches import (
    block_grid,
    block_image_from,
    caption_rows,
    follow_block,
    global_grid,
    grid_note,
    image_attentions,
    image_queries,
    image_source,
    patch_grid_for,
    patch_label,
    patch_query,
    picture_count,
    picture_label,
    pictured,
    query_names,
    query_place,
    query_tip,
    step_query,
    words_query,
)
from attnviz.core.view.pooling import pool_by, pool_note, pool_to
from attnviz.core.view.selection import (
    MODE_TITLES,
    MODES,
    VMAX_MIN,
    VMAX_MIN_TEXT,
    Selection,
    ViewError,
    blk_len,
    check_not_empty,
    check_vmax,
    clamp,
    head_matrix,
    head_what,
    hide_mask,
    layer_range,
    map_inputs,
    result_blocks,
)
from attnviz.core.view.span import drawn_span, span_map, span_top, stretches
from attnviz.core.view.steps import (
    NEXT_WORD,
    generation_rows,
    n_steps,
    producing_row,
    row_outputs,
    step_rows,
    target_rows,
    word_special,
)
from attnviz.core.view.strip import (
    IMAGE_STRIP_LABEL,
    StripPanel,
    StripView,
    image_strip_label,
    over_image,
    panel_selection,
    strip_block,
    strip_view,
)
from attnviz.core.view.zoom import MapRegion, plan_region, pool_region

__all__ = [
    "CBAR_TICKS",
    "DECODER_TEXT",
    "DEFAULT_IMAGE_FROM",
    "DEFAULT_GENERATE",
    "DEFAULT_SCALE",
    "IMAGE_DEFAULT_SCALE",
    "DIFF_CMAP",
    "DIFF_COLOURS",
    "DIFF_FLOOR",
    "DIFF_TITLE",
    "DIVERGENCE_COLOURS",
    "FramesKey",
    "Found",
    "GLOBAL_PANEL",
    "HEAD_COLOURS",
    "HeatScale",
    "HeadsOverlay",
    "HIDDEN_NOTE",
    "IMAGE_BASES",
    "IMAGE_FROM",
    "LINKS_PER_PAGE",
    "LINKS_PER_ROW",
    "LINK_MIN",
    "LOG_DECADES",
    "ImageFrom",
    "LinksView",
    "LinkCut",
    "LINK_CUTS",
    "DEFAULT_LINK_CUT",
    "RECIPE_LINK_CUT",
    "check_link_cut",
    "MAP_CMAP",
    "MAX_LABEL_CHARS",
    "MODES",
    "MODE_TITLES",
    "MapView",
    "OFF_CROSS",
    "OFF_NOTE",
    "OFF_VEIL",
    "OVERLAY_CMAP",
    "OverlayPanel",
    "OverlayView",
    "POOL_THREADS_FROM",
    "QUERY_OUTLINE",
    "SCALES",
    "dark_note",
    "SPAN_SCALES",
    "SMOOTH_SIGMA",
    "Selection",
    "StripPanel",
    "StripView",
    "THUMB",
    "THUMB_CACHE_ENTRIES",
    "TILES_PANEL",
    "ViewError",
    "alignment_map",
    "base_rgb",
    "blk_len",
    "block_grid",
    "block_top",
    "caption_rows",
    "check_image_base",
    "check_not_empty",
    "check_scale",
    "check_vmax",
    "VMAX_MIN",
    "VMAX_MIN_TEXT",
    "clamp",
    "clean_label",
    "clean_labels",
    "colour_range",
    "composite",
    "compute_diff_map",
    "compute_map",
    "check_frame",
    "series_dots",
    "shown_frame",
    "find_token",
    "frame_names",
    "head_map",
    "heat_scale",
    "heads_overlay",
    "image_heads",
    "tower_frames",
    "map_notes",
    "compute_other_map",
    "cross_block",
    "declared_alignment",
    "default_generate",
    "default_image_base",
    "default_selection",
    "OPENING_VIEWS",
    "OpeningView",
    "opening_view",
    "result_kind",
    "divergence_colour",
    "downsample",
    "pool_by",
    "pool_note",
    "pool_to",
    "generation_rows",
    "NEXT_WORD",
    "row_outputs",
    "global_grid",
    "grey_base",
    "grid_note",
    "head_matrix",
    "head_what",
    "hide_mask",
    "block_image_from",
    "follow_block",
    "image_attentions",
    "image_from_entry",
    "image_queries",
    "image_source",
    "is_patch_label",
    "layer_labels",
    "layer_range",
    "layer_windows",
    "picture_count",
    "picture_label",
    "pictured",
    "keep_strongest",
    "link_alpha",
    "link_heads",
    "links_key",
    "links_view",
    "page_links",
    "span_links",
    "log_ticks",
    "map_inputs",
    "map_label",
    "matching_selection",
    "n_steps",
    "nice_ticks",
    "notes_label",
    "image_strip_label",
    "over_image",
    "panel_selection",
    "overlay_alpha",
    "overlay_view",
    "default_image_query",
    "focus_heads",
    "overview_colours",
    "block_tops",
    "has_kind_scale",
    "TITLE_SEP",
    "title_lines",
    "OVERVIEW_SCALES",
    "OverviewScale",
    "SPEECH_PERCENTILE",
    "overview_label",
    "overview_scale",
    "overview_top",
    "patch_grid_for",
    "patch_label",
    "patch_query",
    "producing_row",
    "result_blocks",
    "row_story",
    "scale_ticks",
    "scale_top",
    "query_names",
    "query_place",
    "query_tip",
    "span_map",
    "drawn_cells",
    "row_stretched",
    "span_top",
    "stretches",
    "drawn_span",
    "ClipCut",
    "clip_cut",
    "clip_frame_count",
    "clip_note",
    "pads_clip",
    "step_query",
    "words_query",
    "step_rows",
    "strip_block",
    "strip_view",
    "IMAGE_STRIP_LABEL",
    "strongest_links",
    "target_rows",
    "thumbnails",
    "thumbnails_kept",
    "tick_indices",
    "time_tick_indices",
    "frame_step",
    "upsample",
    "weight_label",
    "windows_note",
    "MapRegion",
    "plan_region",
    "pool_region",
    "word_special",
]
