"""What a freshly opened result shows, the same in the window and in ``attnviz figure``.

The default selection (the declared alignment head, else the mean over the last layer's heads), the default image
base and (from :mod:`attnviz.core.steps_default`) the default number of generation steps.  Kept apart from :mod:`.selection`: these are policies about a
model, read once when a result arrives, not rules every draw applies.
"""

from __future__ import annotations

from attnviz.core.attention import AttentionResult, Block
from attnviz.core.view.selection import Selection


def default_selection(result: AttentionResult, blocks: list[Block] | None = None) -> Selection:
    """What a freshly opened result shows, in the window and in ``attnviz figure`` without selection flags.

    The model's declared alignment head (``attnviz.alignment``) when it names one: that head was trained or
    chosen to point, and any other would show what the model was never asked to do.  Otherwise the mean over
    the heads of the last layer of the first block: the last layer is what the output reads, and no head is
    privileged by its index (head 0 is as arbitrary as head 7), so the first look does not single one out; the
    title says "mean over heads", so it is never taken for one head, and one click shows single heads."""
    blocks = result.blocks() if blocks is None else blocks
    if not blocks:
        return Selection()
    declared = declared_alignment(result)
    cross = next((i for i, b in enumerate(blocks) if b.kind == "cross"), None)
    base = default_image_base(result, blocks)
    if declared is not None and cross is not None:
        (layer, head), rows = declared
        blk = blocks[cross]
        if layer < blk.n_layers and head < blk.heads_in(layer):
            return Selection(block=cross, layer=layer, head=head, mode="head", rows=rows, image_base=base)
    last = blocks[0].n_layers - 1
    rows = declared[1] if declared is not None else "predict"
    return Selection(layer=last, mode="mean", layer_lo=last, layer_hi=last, rows=rows, image_base=base)


def default_image_base(result: AttentionResult, blocks: list[Block] | None = None) -> str:
    """What lies under the heat by default: the image in colour under a captioner's words (they name what the
    image shows, colours included: "the blue triangle" over a greyed image hides what the word is about), a
    greyed image elsewhere (where the image's colours could be mistaken for heat)."""
    blocks = result.blocks() if blocks is None else blocks
    captions = result.patch_grid is not None and any(b.kind == "cross" for b in blocks)
    return "colour" if captions else "grey"


def declared_alignment(result: AttentionResult | None) -> tuple[tuple[int, int], str] | None:
    """The model's declared alignment head (its first) and row convention, as its run recorded them
    (``attnviz.alignment`` in the model's metadata, kept in ``result.info`` and so in an .npz)."""
    from attnviz.core import metadata as md

    declared = md.alignment_heads({"alignment": (result.info or {}).get("alignment")}) if result is not None else None
    return (declared[0][0], declared[1]) if declared else None
