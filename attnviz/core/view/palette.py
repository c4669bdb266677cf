"""The palette, colour maps and colour scales: one choice for screen and print.

Constants only (no imports from the rest of the view model), so every module -- and :class:`Selection`'s default
scale -- can read them without an import cycle.
"""

from __future__ import annotations

# Okabe & Ito (2008) colour-blind-safe qualitative palette, for overlaid heads
HEAD_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")
MAP_CMAP = "viridis"  # token x token maps: perceptually uniform, colour-blind safe
OVERLAY_CMAP = "magma"  # heat over the image: dark = unattended, bright = attended
# a head switched off (right-click ▸ Switch head off): its thumbnail veiled and crossed out, on screen and in print
OFF_VEIL = (255, 255, 255, 150)  # RGBA over the head's map: it no longer reaches the output
OFF_CROSS = "#1e1e1e"  # the cross's colour
OFF_NOTE = "crossed: switched off"
LOG_DECADES = 3  # log scale spans this many decades below the top weight
# colour scales: what the top of a map's colour bar is -> the words the colour bar says it in
SCALES = {
    "fixed": "fixed 0–1",  # weights are probabilities: 1 is the most any can be
    "shared": "shared by the block's heads",  # the largest weight of any head of the block: heads compare
    "map": "stretched to this map",  # to the map's own maximum: most contrast; near-uniform maps look saturated
    # each query row divided by its own largest weight (its top 1): how long causal attention is read, where row i
    # spreads over i + 1 keys and a whole-map top leaves row 1,000's 1/1,000 black (core/view/maps.py: drawn_cells)
    "row": "each row stretched to its maximum",
}
# the words where a window of positions is drawn (figure --span / --key-span, a zoomed-in Head map): the top is that
# window's, not the whole map's -- a causal map's whole top is row 0's 1.0 (its first query sees only itself), which
# left a window at positions 1,000-1,127 (weights near 1/1,000) black on every scale
SPAN_SCALES = {
    "map": "stretched to the drawn span",
    "shared": "shared by the block's heads in the drawn span",
}
# the default cannot mislead: on 0–1 near-uniform attention (0.1 everywhere in a random-init BERT) looks faint, as
# it is; a stretched scale would paint it as bright as a head that puts all its weight on one token
DEFAULT_SCALE = "fixed"
# over an image the default is each map stretched to its own peak, as attention overlays are drawn in the papers
# ("Show, Attend and Tell", vit-explain): a caption word's 0.17 over 64 patches is nearly black on 0–1, so where it
# looks would not show at all; the colour bar states the stretch's numbers, and shared / fixed are one click away
IMAGE_DEFAULT_SCALE = "map"
