"""Image regions, whose attention is drawn over the picture (:data:`IMAGE_FROM`, the selection's ``image_from``).

A vision–language model (and a captioner) holds two attentions over one image: the words' (a decoder word, or a
caption word through cross-attention, looking at the image's tokens: "Show, Attend and Tell") and the vision
tower's own (patch to patch inside the image encoder, before any word).  Each entry is the blocks that answer it,
in order of preference; :func:`attnviz.core.view.image_source` takes the first whose keys lie on the image's grid.
The screen's chooser and the exported figure read the same selection, so they draw the same attention.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from attnviz.core.attention import AttentionResult, Block
from attnviz.core.view.selection import ViewError

# one tier of blocks: does this block (of this result) answer the question?
Tier = Callable[[AttentionResult, Block], bool]


def _cross(_result: AttentionResult, blk: Block) -> bool:
    return blk.kind == "cross"  # a captioner's words over the encoder's patches


def _vlm_words(result: AttentionResult, blk: Block) -> bool:
    # a vision–language decoder's words over the image's tokens among its own keys
    return result.token_grid is not None and (blk.stack, blk.kind) == ("decoder", "self")


def _tower(_result: AttentionResult, blk: Block) -> bool:
    return (blk.stack, blk.kind) == ("encoder", "self")  # the image encoder: a VLM's vision tower, a ViT


def _pooling(_result: AttentionResult, blk: Block) -> bool:
    # an attention-pooling head (SigLIP's "MAP" head): one learned probe query over the tower's patches
    return (blk.stack, blk.kind) == ("encoder", "pooling")


@dataclass(frozen=True)
class ImageFrom:
    """One answer to "whose attention lies over the picture": the chooser's words and the blocks that draw it."""

    name: str
    text: str  # the chooser's entry
    tip: str  # what it shows, in a sentence (the chooser's tooltip)
    tiers: tuple[Tier, ...]  # the blocks that answer, in order of preference

    def answers(self, result: AttentionResult, blk: Block) -> bool:
        return any(tier(result, blk) for tier in self.tiers)


IMAGE_FROM: dict[str, ImageFrom] = {
    f.name: f
    for f in (
        # the image encoder comes last: a ViT has no words, and its own attention is all there is to draw
        ImageFrom(
            "words",
            "words → image",
            "where each word looks in the image: the decoder's attention from a word to the image's tokens",
            (_cross, _vlm_words, _tower),
        ),
        ImageFrom(
            "tower",
            "vision tower",
            "the image encoder's own attention, patch to patch: a patch's row (click one), the [CLS] row, or the "
            "mean of all patches' rows (the attention each patch receives)",
            (_tower,),
        ),
        ImageFrom(
            "pooling",
            "pooling head",
            "the tower's attention-pooling head (SigLIP's): its one learned query's attention over the patches, "
            "the weights that pool them into the image's embedding",
            (_pooling,),
        ),
    )
}
DEFAULT_IMAGE_FROM = "words"


def image_from_entry(name: str) -> ImageFrom:
    """The registry's entry, or one line naming the choices."""
    found = IMAGE_FROM.get(name)
    if found is None:
        raise ViewError(
            f"unknown image attention {name!r}; use one of {', '.join(IMAGE_FROM)}",
            param="image_from",
        )
    return found
