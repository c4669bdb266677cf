"""From the command line's (or a recipe's) words to the view model's selection: block, layer, head/aggregate, rows.

:func:`resolve` turns a :class:`~attnviz.figures.spec.FigureSpec` into the one
:class:`~attnviz.core.view.Selection` the window holds too; :func:`declared_defaults` fills in what the command left
unset as the window opens the result.  Numpy only (no matplotlib), so the GUI can use the same checks and messages.
Every range problem is an :class:`AttnvizError` that names the valid range.
"""

from __future__ import annotations

import re

import numpy as np

from attnviz import AttnvizError
from attnviz.core import audio_view, view
from attnviz.core.attention import AttentionResult, Block
from attnviz.figures.spec import FigureSpec

# a block given by index: ASCII digits (str.isdigit() passes "٣", which int() reads as 3)
_INDEX = re.compile(r"-?[0-9]+")


def block_label(block: Block) -> str:
    """Short name used on the command line and in recipes: ``"encoder self"`` (``"encoder self stage 2"``, a dual
    encoder's ``"encoder self text"``: without the tower a name would pick whichever tower came first)."""
    return (
        f"{block.stack} {block.kind}"
        + (f" stage {block.stage}" if block.stage else "")
        + (f" {block.tower}" if block.tower else "")
    )


def _norm(name: str) -> str:
    return " ".join(name.lower().replace("-attention", "").replace("_", " ").replace("-", " ").split())


def resolve_block(result: AttentionResult, block: int | str | None, default: int = 0) -> tuple[int, Block]:
    """Return ``(index, Block)`` for an index, a name (``"decoder cross"``, ``"cross"``) or None (``default``)."""
    blocks = result.blocks()
    if not blocks:
        raise AttnvizError("this result holds no attention maps; nothing to draw", param="model")
    names = [block_label(b) for b in blocks]
    valid = ", ".join(f"{i} ({n})" for i, n in enumerate(names))
    if block is None:
        return default, blocks[default]
    if isinstance(block, (int, np.integer)) or (isinstance(block, str) and _INDEX.fullmatch(block.strip())):
        i = int(block)
        if not 0 <= i < len(blocks):
            raise AttnvizError(f"block {i} is out of range; this model has blocks {valid}", param="block")
        return i, blocks[i]
    want = _norm(str(block))
    # the window's name is taken too: a vision–language model's "vision self" is its "encoder self"
    both = [(n, _norm(b.name)) for n, b in zip(names, blocks)]
    exact = [i for i, ns in enumerate(both) if want in ns]
    partial = exact or [i for i, ns in enumerate(both) if any(want in n.split() or n.startswith(want) for n in ns)]
    if len(partial) == 1 or (partial and exact):
        return partial[0], blocks[partial[0]]
    if partial:
        raise AttnvizError(f"block {block!r} is ambiguous; use one of {valid}", param="block")
    raise AttnvizError(f"no block {block!r}; this model has blocks {valid}", param="block")


def check_layer(block: Block, layer: int | None) -> int:
    n = block.n_layers
    if layer is None:
        return n - 1
    layer = int(layer)
    if not 0 <= layer < n:
        raise AttnvizError(f"layer {layer} is out of range; {block.name} has layers 0..{n - 1}", param="layer")
    return layer


def check_head(block: Block, layer: int, head: int) -> int:
    n = block.heads_in(layer)
    head = int(head)
    if not 0 <= head < n:
        raise AttnvizError(
            f"head {head} is out of range; {block.name} layer {layer} has heads 0..{n - 1}", param="head"
        )
    return head


def check_query(block: Block, query: int, what: str = "query") -> int:
    n = len(block.query_axis)
    query = int(query)
    if not 0 <= query < n:
        raise AttnvizError(
            f"{what} {query} is out of range; {block.name} has query positions 0..{n - 1}", param="query"
        )
    return query


def check_layer_from(block: Block, layer: int, layer_from: int | None) -> int | None:
    if layer_from is None:
        return None
    layer_from = int(layer_from)
    if not 0 <= layer_from <= layer:
        raise AttnvizError(
            f"layer range {layer_from}-{layer} is invalid; {block.name} has layers 0..{block.n_layers - 1} "
            f"and the range must run low to high",
            param="layers",
        )
    return layer_from


def check_step(result: AttentionResult, step: int | None) -> int | None:
    if step is None:
        return None
    g = len(result.generated or [])
    if g == 0:
        raise AttnvizError("a generation step needs generated words; generate some steps first", param="step")
    step = int(step)
    if not 0 <= step < g:
        raise AttnvizError(f"step {step} is out of range; {g} words were generated (steps 0..{g - 1})", param="step")
    return step


def layer_span(layer: int, agg: str | None, layer_from: int | None) -> tuple[int, int]:
    """Inclusive layer range an aggregate covers: rollout starts at 0, head aggregates at ``layer``."""
    if layer_from is not None:
        return layer_from, layer
    return (0, layer) if agg == "rollout" else (layer, layer)


def declared_defaults(result: AttentionResult, spec: FigureSpec) -> tuple[FigureSpec, str | None]:
    """``spec`` with what the command left unset filled in as the window opens the result
    (:func:`attnviz.core.view.default_selection`): with no block, head, aggregate or layer given, the model's
    declared alignment head; with no rows given, its declared row convention.  Everything else unset already
    means the view model's other default (the last layer, the mean over heads).  Returns (spec, a note saying
    what was chosen, or None when nothing was)."""
    declared = view.declared_alignment(result)
    if declared is None:
        return spec, None
    default = view.default_selection(result)
    rows = declared[1]
    chosen: dict = {}
    if spec.rows is None:
        chosen["rows"] = rows
    unset = (spec.block, spec.head, spec.heads, spec.agg, spec.layer, spec.layer_from)
    if all(v is None for v in unset) and default.mode == "head":
        chosen.update(block=default.block, layer=default.layer, head=default.head)
        if spec.view == "overview":
            # the block the window focuses, every layer of it as the window's overview shows them: a layer given to
            # the overview draws that layer's heads alone (the translation demo's drew "layer 2, all heads")
            chosen.update(layer=None, head=None)
    elif spec.block is None and (block := unnamed_block(result, spec.view)) is not None:
        # a head, layer or aggregate without --block: on the block the window opens on, as without them (the
        # translation demo's --head 0,1,2 drew the encoder's self-attention, --head alone the decoder's cross)
        chosen["block"] = block
    said = {k for k in chosen if k != "rows" or spec.view == "alignment"}  # rows change only the alignment
    if not said:
        return FigureSpec(**dict(spec.to_dict(), **chosen)), None
    if "head" not in chosen and "block" in chosen:
        name = result.blocks()[chosen["block"]].name
        note = f"drawn as the window opens it: {name}, the block of the model's declared alignment head (--block to change)"
        return FigureSpec(**dict(spec.to_dict(), **chosen)), note
    if "head" in chosen and spec.view == "overview":
        name = result.blocks()[default.block].name
        note = f"drawn as the window opens it: {name}, the block of the model's declared alignment head (--block to change)"
        return FigureSpec(**dict(spec.to_dict(), **chosen)), note
    what = [f"alignment head (decoder layer {default.layer} head {default.head})"] if "head" in chosen else []
    what += [f"row convention ({rows})"] if "rows" in said else []
    flags = " and ".join(f for f, k in (("--head/--layer/--aggregate", "head"), ("--rows", "rows")) if k in said)
    note = f"drawn as the window opens it: the model's declared {' and '.join(what)} ({flags} to change)"
    return FigureSpec(**dict(spec.to_dict(), **chosen)), note


def unnamed_block(result: AttentionResult, view_key: str | None) -> int | None:
    """The block drawn when heads, a layer or an aggregate are named without ``--block``: the block the window
    opens on, the model's declared alignment head's (None: no such rule, the command's other default stands;
    views in :data:`VIEW_BLOCKS` pick their own).  ``attnviz figure`` and ``attnviz open`` both ask this, so
    ``--head H`` alone shows the same block in the window as on paper."""
    if view_key in VIEW_BLOCKS or view.declared_alignment(result) is None:
        return None
    default = view.default_selection(result)
    return default.block if default.mode == "head" else None


def _why_not_alignment(result: AttentionResult) -> str | None:
    if first_block(result, kind="cross") is None:
        return (
            f"the alignment view needs cross-attention (an encoder-decoder model); this result has blocks "
            f"{blocks_text(result)}; use the heatmap view"
        )
    return None


def _why_not_image(result: AttentionResult) -> str | None:
    if result.image is None and (result.patch_grid is not None or result.token_grid is not None):
        # the maps over the image's patches are here, the picture is not: raw feeds give the model pixel values
        # (normalised, resized, a VLM's maybe tiled or flattened into patches), which are not a picture to draw
        import shlex

        model = shlex.quote(str((result.info or {}).get("model_path") or "MODEL"))
        prompt = " --text PROMPT" if result.token_grid is not None else ""  # a vision–language model's words
        return (
            "the image view needs the picture the model saw, and this result has only its attention over the "
            "patches (a run on raw feeds, --inputs, keeps pixel values, not the image): run it on the image "
            f"file, attnviz figure {model} --image PATH{prompt} --view image"
        )
    if result.image is None:
        return "the image view needs the input image; this result has none (run the model on an image)"
    if result.patch_grid is None and result.token_grid is None:
        return "the image view needs the image patch grid; this result has none (not an image model?)"
    if patch_block(result) is None:
        g = result.patch_grid or result.token_grid
        assert g is not None
        return f"no attention block has {g.offset + g.n} keys matching the {g.rows}x{g.cols} patch grid"
    return None


def _image_strip_ok(result: AttentionResult) -> bool:
    return _why_not_image(result) is None and any(
        b.kind == "cross" and keys_are_patches(result, b) for b in result.blocks()
    )


def _why_not_strip(result: AttentionResult) -> str | None:
    typed_caption = (result.prompt_len or 0) > 1 and _image_strip_ok(result)  # teacher-forced caption words
    if not result.generated and not typed_caption:
        return "the strip view needs generated words; generate some words first (a captioning, translation or decoder model)"
    if _image_strip_ok(result):
        return None
    if not any(b.stack == "decoder" for b in result.blocks()):
        return "the strip view needs a decoder: attention from the generated words"
    return None


def _why_not_audio(result: AttentionResult) -> str | None:
    if result.audio is None:
        return (
            "the audio view needs the sound a speech model heard; run a speech model (Whisper, wav2vec2) with "
            "--audio FILE"
        )
    if audio_view.audio_blocks(result, result.blocks()) is None:
        return "the audio view needs attention over the sound's frames (a speech encoder); this result has none"
    return None


# view -> why_not(result): None when the view can be drawn for the result, else the reason (one line)
WHY_NOT = {
    "heatmap": lambda r: None,
    "overview": lambda r: None,
    "links": lambda r: None,
    "alignment": _why_not_alignment,
    "image": _why_not_image,
    "audio": _why_not_audio,
    "strip": _why_not_strip,
}


def blocks_text(result: AttentionResult) -> str:
    return ", ".join(f"{i} ({block_label(b)})" for i, b in enumerate(result.blocks())) or "none"


def _alignment_block(result: AttentionResult, block: int | str | None) -> int:
    if block is None:
        why = _why_not_alignment(result)
        if why:
            raise AttnvizError(why, param="view")
        return int(first_block(result, kind="cross") or 0)
    bi, blk = resolve_block(result, block)
    if blk.kind != "cross":
        raise AttnvizError(
            f"the alignment view needs a cross-attention block; block {block_label(blk)!r} is "
            f"self-attention (blocks: {blocks_text(result)})",
            param="block",
        )
    return bi


def _image_block(result: AttentionResult, block: int | str | None) -> int:
    why = _why_not_image(result)
    if why:
        raise AttnvizError(why, param="image")
    if block is None:  # words over the image (captioning) first, as the screen opens it
        idx = next(
            (
                i
                for i, b in enumerate(result.blocks())
                if (b.kind == "cross" or _vlm_words(result, b)) and keys_are_patches(result, b)
            ),
            None,
        )
        return idx if idx is not None else patch_block(result) or 0  # _why_not_image found a patch block
    bi, b = resolve_block(result, block)
    g = result.patch_grid
    if g is None or not keys_are_patches(result, b):
        raise AttnvizError(
            f"block {block_label(b)!r} does not attend to image patches; "
            f"use a block over the {g.rows if g else '?'}x{g.cols if g else '?'} patches "
            f"(blocks: {blocks_text(result)})"
        )
    return bi


def image_from_block(result: AttentionResult, spec: FigureSpec) -> int | None:
    """The block that draws ``--image-from``'s attention over the image (the view model's choice, as the window's
    chooser selects it), so that --layer and --head are checked against it; None: the view's default."""
    if spec.view != "image" or _why_not_image(result):
        return None
    src = view.image_source(result, result.blocks(), None, str(spec.image_from))
    return src[0] if src is not None else None


def _strip_block(result: AttentionResult, block: int | str | None) -> int:
    why = _why_not_strip(result)
    if why:
        raise AttnvizError(why, param="generate")
    blocks = result.blocks()
    if block is None:
        found = view.strip_block(result, blocks, view.Selection(block=-1))
        return int(found or 0)
    bi, blk = resolve_block(result, block)
    if blk.stack != "decoder" and not keys_are_patches(result, blk):
        raise AttnvizError(f"the strip view needs a decoder block; {blk.name} is not (blocks: {blocks_text(result)})")
    return bi


def _audio_block(result: AttentionResult, block: int | str | None) -> int:
    why = _why_not_audio(result)
    if why:
        raise AttnvizError(why, param="audio")
    found = audio_view.audio_blocks(result, result.blocks())
    assert found is not None  # _why_not_audio found them
    if block is None:  # the words' cross-attention, as the window opens it (an encoder alone: its frames)
        first = found[0] if found[0] is not None else found[1]
        assert first is not None  # audio_blocks gives None rather than neither
        return first
    bi, blk = resolve_block(result, block)
    if bi not in found:
        raise AttnvizError(
            f"the audio view draws the cross-attention over the sound (a word as the query) or the encoder's "
            f"self-attention (--query FRAME); block {block_label(blk)!r} is neither (blocks: {blocks_text(result)})",
            param="block",
        )
    return bi


# view -> the block it draws for a command line's --block (None: the view's own default)
VIEW_BLOCKS = {
    "alignment": _alignment_block,
    "image": _image_block,
    "strip": _strip_block,
    "audio": _audio_block,
}


def resolve(result: AttentionResult, spec: FigureSpec) -> view.Selection:
    """Validate ``spec`` against ``result`` and translate it into the view model's
    :class:`~attnviz.core.view.Selection`: the one conversion between the command line (or a recipe) and
    what is drawn.  Unset fields mean the last layer and the mean over heads; every range problem is an
    :class:`AttnvizError` naming the valid range."""
    if not result.blocks():
        raise AttnvizError("this result holds no attention maps; nothing to draw", param="model")
    pick = VIEW_BLOCKS.get(spec.view)
    asked = image_from_block(result, spec) if spec.block is None and spec.image_from else spec.block
    bi, b = resolve_block(result, pick(result, asked) if pick else asked)
    try:
        layer = check_layer(b, spec.layer)
    except AttnvizError as e:
        if spec.layer_from is None and spec.block is None and len(result.blocks()) > 1:
            # the block was not asked for: a VLM's first block is its vision tower (one layer), so a decoder layer
            # given alone was refused naming only the tower, with no word of the block to choose instead
            blocks = ", ".join(
                f"{i} ({block_label(x)}, layers 0..{x.n_layers - 1})" for i, x in enumerate(result.blocks())
            )
            raise AttnvizError(
                f"{e} (block {bi}, drawn when --block is not given); choose the block with --block: {blocks}",
                param="layer",
            ) from None
        if spec.layer_from is None:
            raise
        # with a range, the layer is its top: the setting to fix is the range (--layers LO-HI), not --layer
        raise AttnvizError(str(e), param="layers") from None
    layer_from = check_layer_from(b, layer, spec.layer_from)
    step = check_step(result, spec.step)
    declared = view.declared_alignment(result)
    query = None
    if spec.query is not None:
        query = check_query(b, spec.query) if spec.view in ("heatmap", "links", "image", "audio") else int(spec.query)
    base = view.Selection(
        block=bi,
        keep=float(spec.keep),
        log=bool(spec.log) and (spec.view != "image" or spec.image_scale is not None),
        hide_special=bool(spec.hide_special),
        step=-1 if step is None else step,
        batch=int(spec.batch or 0),
        query=query,
        rows=str(spec.rows or (declared[1] if declared else "predict")),
        image_base=str(spec.image_base or view.default_image_base(result)),
        # unset in a recipe written before scales: the stretched scale it was drawn on (an image's: its own field)
        scale=spec.scale or "map",
        image_scale=spec.image_scale or "map",
        kind_scale=spec.kind_scale is not False,  # (False: a scale chosen by --scale or in the window's box)
        picture=int(spec.picture or 1) - 1,
        image_from=spec.image_from or view.DEFAULT_IMAGE_FROM,
        frame=int(spec.frame or 1) - 1,
        link_cut=spec.link_cut or view.RECIPE_LINK_CUT,  # unset in a recipe written before the choice: the map's top
        vmax=view.check_vmax(spec.vmax),  # the colour scale's top set by hand: the view model holds it
        # unset in a recipe written before the choice: a speech clip's whole window, as it was drawn (other models
        # have no padding to draw: the window's False)
        padding=bool(spec.padding) if spec.padding is not None else result.audio is not None,
    )
    if spec.frame is not None:  # a frame the block does not have (or not a tower's frames): one line naming them
        view.check_frame(result, base)
    if spec.picture is not None:  # an image the result does not hold: one line naming the images it has
        view.pictured(result, base.picture)
    if spec.view == "image" and spec.image_from is None:  # --block alone: the attention that block draws, as on screen
        base = view.follow_block(result, result.blocks(base.batch), base)
    if spec.heads is not None:
        heads = tuple(check_head(b, layer, h) for h in spec.heads)
        return base.with_(mode="head", layer=layer, head=heads[0], heads=heads)
    if spec.head is not None:
        return base.with_(mode="head", layer=layer, head=check_head(b, layer, spec.head))
    agg = spec.agg or "mean"
    lo, hi = layer_span(layer, agg, layer_from)
    return base.with_(mode=agg, layer=layer, layer_lo=lo, layer_hi=hi)


def first_block(result: AttentionResult, kind: str | None = None, stack: str | None = None) -> int | None:
    for i, b in enumerate(result.blocks()):
        if (kind is None or b.kind == kind) and (stack is None or b.stack == stack):
            return i
    return None


def _vlm_words(result: AttentionResult, block: Block) -> bool:
    """A vision–language decoder's self-attention: its words attend to the image tokens among their own keys."""
    return result.token_grid is not None and block.stack == "decoder" and block.kind == "self"


def patch_block(result: AttentionResult) -> int | None:
    """First block whose keys are the image patches (vision encoder self-attention, or cross-attention to it)."""
    return next((i for i, b in enumerate(result.blocks()) if keys_are_patches(result, b)), None)


def keys_are_patches(result: AttentionResult, block: Block) -> bool:
    """The block's keys are exactly the result's patches, or (a stage of a hierarchical encoder) its stage's, or
    (a vision–language decoder's self-attention) hold the run of image tokens."""
    g = result.patch_grid
    if _vlm_words(result, block):  # (a VLM's several images leave its vision tower no one patch grid)
        return view.block_grid(result, block) is not None
    if g is None:
        return False
    if block.stage:
        return view.block_grid(result, block) is not None
    each = result.vision_grids()  # one prompt's several images: the vision tower's keys are all their patches
    if each and block.stack == "encoder":
        return len(block.key_axis) == each[-1].end
    return len(block.key_axis) == g.offset + g.n
