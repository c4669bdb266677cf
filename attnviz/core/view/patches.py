"""Image regions, the keys: which of a block's keys are the image's patches and which queries look at them.

The patch grid of a block (a Swin stage's own, a VLM's image run, a ViT's), the block that attends to the image,
the query choices (caption words, CLS, a clicked patch) and their labels.  No drawing here: :mod:`.overlay` turns
one query's row into the picture, :mod:`.heat` draws it over the image.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from attnviz.core import windows
from attnviz.core.attention import AttentionResult, Block, PatchGrid
from attnviz.core.view.image_from import DEFAULT_IMAGE_FROM, IMAGE_FROM, ImageFrom, image_from_entry
from attnviz.core.view.labels import clean_label
from attnviz.core.view.selection import Selection, ViewError, blk_len, real_rows
from attnviz.core.view.steps import NEXT_WORD, generation_rows, n_steps, producing_row, row_outputs

POOLING_QUERY = "pooling query"  # an attention-pooling head's learned query, wherever it is named
GLOBAL_PANEL = "global image"  # a tiled image's global image (Idefics3 / SmolVLM), wherever it is named


def picture_count(result: AttentionResult) -> int:
    """How many images one prompt of this result holds (1 for a single image or none)."""
    return max(1, len(result.image_grids()))


def pictured(result: AttentionResult, picture: int, batch: int = 0) -> AttentionResult:
    """``result`` seen through image ``picture`` (0-based) of its prompt's several (refused in one line when it
    holds no such image): what Image regions draws, on screen and in the figure.  ``batch``: the row drawn (a dual
    encoder's several images: each row's own image)."""
    n = picture_count(result)
    if not 0 <= picture < n:
        raise ViewError(
            f"image {picture + 1} is not in this result; its prompt holds"
            + (" one image (leave out --picture, or give --picture 1)" if n == 1 else f" images 1–{n}")
            + (" (choose one of them with --picture N)" if n > 1 else ""),
            param="picture",
        )
    seen = result.picture(picture)
    own = result.image_of(batch)
    return seen if own is result.image else replace(seen, image=own)


def picture_label(result: AttentionResult, picture: int) -> str:
    """The drawn image's name beside a title ("image 2 of 2"); empty for a result with one image."""
    n = picture_count(result)
    return f"image {picture + 1} of {n}" if n > 1 else ""


def is_vision(result: AttentionResult) -> bool:
    """The result's axes hold an image: a patch grid, an image input shown, a vision–language model's image tokens
    or its vision tower run alone.  Only such a result's key count may be read as a patch grid: a text of 10 or 101
    tokens, a clip of 100 frames, are no 3×3 + 1 or 10×10 image."""
    return (
        result.patch_grid is not None
        or result.image is not None
        or bool(result.images)
        or bool(result.vision_grids())
        or result.vision_tower
    )


def patch_grid_for(result: AttentionResult, n_keys: int, batch: int = 0) -> PatchGrid | None:
    """The grid of a block's ``n_keys`` keys: the result's own (a padded batch's row: its own frames, Idefics3's
    tiles), else guessed from the count (:meth:`PatchGrid.infer`) where the result is a vision one
    (:func:`is_vision`); None for a text or a sound."""
    g = result.patch_grid_of(batch)
    if g is not None and g.offset + g.n <= n_keys:
        return g
    return PatchGrid.infer(n_keys) if is_vision(result) else None


def block_grid(result: AttentionResult, blk: Block) -> PatchGrid | None:
    """The patch grid a block's keys lie on.  A stage of a hierarchical (Swin) encoder has its own, the result's
    grid (the first stage's: the image's patches) halved per stage; every other block shares the result's."""
    if blk.tower == "text":  # a dual encoder's text tower: tokens, whatever their count (4 read as 2 x 2 patches)
        return None
    n_keys = blk_len(blk, 1)
    g = result.token_grid_of(blk.batch)  # a padded batch's rows hold their image tokens at keys of their own
    if g is not None and blk.stack == "decoder" and blk.kind == "self":  # a VLM: the image's run of its own keys
        return g if g.end <= n_keys else None
    if blk.stage and result.patch_grid is not None:
        g = windows.stage_grid(result.patch_grid, blk.stage)
        return g if g.n == n_keys else None
    g = patch_grid_for(result, n_keys, blk.batch)
    if g is not None and g.lead_images and blk.stack == "encoder":  # a tiled image's tower: every tile's patches
        return tower_tiles(result, g, blk.batch) or g
    return g


def tower_tiles(result: AttentionResult, glob: PatchGrid, batch: int = 0) -> PatchGrid | None:
    """A tiled image's vision tower (Idefics3 / SmolVLM: each tile and then the global image a tower run of its
    own, ``glob.lead_images`` tiles of ``glob``'s patches each, in reading order, before the global image's) laid
    out as the words' view lays the image's tokens out: the tiles side by side on the picture, each patch's key in
    its cell, and the global image on its own grid beside them.  The tiles' arrangement is :func:`tile_layout`'s
    (the tower's grid's, else batch row ``batch``'s decoder token grid's); None without one that agrees (the
    global image alone is drawn, and :func:`grid_note` says why)."""
    layout = tile_layout(glob, result.token_grid_of(batch))
    return tiles_in_place(glob, layout) if layout is not None else None


def tile_layout(glob: PatchGrid, words: PatchGrid | None) -> tuple[int, int] | None:
    """``(rows, columns)`` of a tiled image's tiles: what its tower grid ``glob`` names (``tile_layout``: the
    processor's split where the tower ran alone, the prompt's ``<row_r_col_c>`` markers in the whole model), else
    what the decoder's token grid of the same image (``words``: its tiled grid over its global image's) shows (a
    result saved before the tower's grid named it); None without either."""
    return glob.tile_layout or _decoder_tiles(words)


def tiles_in_place(glob: PatchGrid, layout: tuple[int, int]) -> PatchGrid | None:
    """:func:`tower_tiles` once the tiles' arrangement ``layout`` (rows, columns of tiles) is known: the grid over
    the tiled picture (its ``global_grid`` the global image's); None where ``glob``'s tiles do not fill it."""
    down, across = layout
    if across * down != glob.lead_images or glob.offset < glob.lead_images * glob.n:
        return None
    first = glob.offset - glob.lead_images * glob.n  # this image's first tile (a prompt's several: after the others)
    columns = tuple(
        first + ((r // glob.rows) * across + c // glob.cols) * glob.n + (r % glob.rows) * glob.cols + c % glob.cols
        for r in range(down * glob.rows)
        for c in range(across * glob.cols)
    )
    return PatchGrid(down * glob.rows, across * glob.cols, first, columns, glob.end, global_grid=glob)


def _decoder_tiles(words: PatchGrid | None) -> tuple[int, int] | None:
    """``(rows, columns)`` of tiles in a decoder token grid (its tiled grid over its global image's), or None
    without one."""
    whole = words.global_grid if words is not None else None
    if whole is None or words is None or words.rows % whole.rows or words.cols % whole.cols:
        return None
    return words.rows // whole.rows, words.cols // whole.cols


def image_source(
    result: AttentionResult, blocks: list[Block], prefer: int | None = None, attention: str = DEFAULT_IMAGE_FROM
) -> tuple[int, PatchGrid, str] | None:
    """``(block index, grid, kind)`` of the attention over image patches, or None.

    ``attention`` (:data:`IMAGE_FROM`) says whose: the words' (cross-attention, where each caption word looks, else
    a vision–language decoder's self-attention to its image tokens, the same question, else a ViT's encoder) or the
    vision tower's own.  The selected block (``prefer``) first, unless it draws the other one; a result without the
    attention asked for draws the words' (a captioner without an encoder over the patches).
    """
    if result.image is None and result.patch_grid is None:
        return None
    for entry in (image_from_entry(attention), IMAGE_FROM[DEFAULT_IMAGE_FROM]):
        order = (
            [prefer]
            if prefer is not None and 0 <= prefer < len(blocks) and _may_prefer(result, blocks[prefer], entry)
            else []
        )
        order += [i for tier in entry.tiers for i, b in enumerate(blocks) if tier(result, b)]
        for i in order:
            g = block_grid(result, blocks[i])
            if g is not None:
                return i, g, blocks[i].kind
    return None


def _may_prefer(result: AttentionResult, blk: Block, entry: ImageFrom) -> bool:
    """The selected block goes first unless it is another attention's (the decoder's words when the tower's own
    is asked for); a block none answers (a pooling head) is the user's choice."""
    return entry.answers(result, blk) or not any(f.answers(result, blk) for f in IMAGE_FROM.values())


def image_attentions(result: AttentionResult, blocks: list[Block]) -> list[ImageFrom]:
    """The :data:`IMAGE_FROM` entries this result can draw, each over a block of its own: a chooser's entries.  Two
    entries drawing one block are one, named by the entry that block answers most directly (a ViT's words and
    tower are its one encoder: its tower, no choice; SigLIP's encoder is its tower beside its pooling head)."""
    found: dict[int, list[ImageFrom]] = {}
    for entry in IMAGE_FROM.values():
        src = image_source(result, blocks, None, entry.name)
        if src is not None and entry.answers(result, blocks[src[0]]):
            found.setdefault(src[0], []).append(entry)
    return [min(entries, key=lambda e: _tier(result, blocks[bi], e)) for bi, entries in found.items()]


def _tier(result: AttentionResult, blk: Block, entry: ImageFrom) -> int:
    """How directly ``entry`` answers ``blk``: the index of its first tier that does (an entry's own blocks first)."""
    return next(k for k, tier in enumerate(entry.tiers) if tier(result, blk))


def block_image_from(result: AttentionResult, blocks: list[Block], block: int, current: str) -> str:
    """The :data:`IMAGE_FROM` entry that ``block`` draws, so that the block selected and the attention over the image
    are one choice (the sidebar's block box, the chooser, ``--block``): among the entries the chooser offers, the one
    that ``block`` answers by its most direct tier (a VLM's tower is the words' last resort, a ViT's, but the
    tower's own), else ``current`` (a block over no image: the view keeps drawing what it drew)."""
    if not 0 <= block < len(blocks) or (result.image is None and result.patch_grid is None):
        return current
    blk = blocks[block]
    ranked = [
        (_tier(result, blk, e), e.name != current, e.name)
        for e in image_attentions(result, blocks)
        if e.answers(result, blk)
    ]
    return min(ranked)[2] if ranked else current


def follow_block(result: AttentionResult, blocks: list[Block], sel: Selection) -> Selection:
    """``sel`` with the attention over the image that its block draws (:func:`block_image_from`), over the image
    it has chosen of its prompt's several: a block picked is the chooser's entry too, in one selection."""
    picture = min(max(sel.picture, 0), picture_count(result) - 1)
    return sel.with_(image_from=block_image_from(pictured(result, picture), blocks, sel.block, sel.image_from))


def caption_rows(result: AttentionResult, blk: Block) -> list[tuple[int, str]]:
    """``(query row, word)`` for the caption words that were given (typed), not generated.

    The same rule as for generated words: a word is shown at the row that chose it, and a given word at
    decoder position ``p`` was chosen (forced) at row ``p - 1``.  Empty without a known prompt of more than
    the start token.
    """
    n = min(int(result.prompt_len or 0), blk_len(blk, 0) + 1, len(blk.query_axis))
    if blk.stack != "decoder" or n <= 1:
        return []
    words = {p for p, _ in real_rows(blk, [(p, "") for p in range(1, n)])}  # a padded row's pads are no word
    return real_rows(blk, [(p - 1, str(blk.query_axis.labels[p])) for p in range(1, n) if p in words])


def image_queries(result: AttentionResult, blk: Block, grid: PatchGrid) -> list[tuple[str, int]]:
    """``(label, query row)`` choices: the given and generated caption words (cross), else CLS and the mean of
    patch queries (-1)."""
    if blk.kind == "cross":
        given = caption_rows(result, blk)
        if given and not n_steps(result, blk.batch):  # teacher-forced: the typed caption is all there is
            return [(clean_label(w), r) for r, w in given]
        return [(clean_label(w), r) for r, w in given + generation_rows(result, blk)]
    if blk.kind == "pooling":  # an attention-pooling head: its learned query (SigLIP's one), no input's
        return [
            (POOLING_QUERY if len(blk.query_axis) == 1 else f"{POOLING_QUERY} {q + 1}", q)
            for q in range(len(blk.query_axis))
        ]
    g = result.token_grid_of(blk.batch)
    if g is not None and blk.stack == "decoder" and blk.kind == "self" and len(blk.query_axis) > g.end:
        # a vision–language decoder: each text row after the image, named as a captioner's words are, by the word
        # it produced (its output: the next prompt token, or the word generated there; :func:`row_outputs`), so
        # generation step k highlights a button reading word k, not the token before it
        # (a padded batch's row: its pads are no word to ask about)
        # one prompt's several images: another image's tokens are no word either
        others = [range(o.offset, o.end) for o in result.image_grids() if o.offset != g.offset]
        after = [r for r in range(g.end, len(blk.query_axis)) if not any(r in span for span in others)]
        rows = real_rows(blk, [(r, "") for r in after])
        return [(clean_label(w), r) for r, w in row_outputs(result, blk, [r for r, _ in rows])]
    # one prompt's several images in a vision tower: this image's keys begin after the earlier images'
    start = max((g.end for g in result.vision_grids() if g.end <= grid.offset), default=0)
    first = clean_label(blk.query_axis.labels[start]) if len(blk.query_axis) > start else "CLS"
    # the leading keys are a CLS token, or (a VLM's tiles before its global image) patches of other images
    out = [(first, start)] if grid.offset > start and not grid.lead_images else []
    return out + [("all patches (mean)", -1)]


def patch_query(
    grid: PatchGrid, x: float, y: float, width: int, height: int, on_global: bool = False
) -> tuple[str, int] | None:
    """``(label, query row)`` of the patch under pixel ``(x, y)`` of an image ``width`` × ``height`` (None outside
    it): "where does this patch look?".  Patch ``(r, c)`` covers the image's ``r``-th of ``rows`` bands, as
    :meth:`PatchGrid.to_image` lays a row of keys out and :func:`upsample` stretches it.  ``on_global``: the pixel
    is on the tiled image's global image, drawn beside the tiles (``grid.global_grid``)."""
    cells = grid.global_grid if on_global else grid
    if cells is None or not (0 <= x < width and 0 <= y < height):
        return None
    r = min(int(y * cells.rows / height), cells.rows - 1)
    c = min(int(x * cells.cols / width), cells.cols - 1)
    row = cells.key(r, c)
    return patch_label(grid, row), row


def patch_label(grid: PatchGrid, row: int) -> str:
    """A patch query's name, "patch (r, c)", wherever it is shown (the view's button, its info line, a figure).
    On a tiled image's grid (tiles side by side, each the size of its global image's grid) a patch is named by its
    tile and its cell in that tile, "tile 3 patch (1, 4)", as its key is (the tower's ``t3(1,4)``, the decoder's
    ``t3[1,4]``: tiles counted from 0 in reading order), not by its cell in the whole tiled picture; a patch of its
    global image (beside the tiles, or drawn alone where the tiles' layout is unknown) "global image patch (r, c)"."""
    tile = grid.global_grid  # a tiled grid's global image: the size of one tile
    on_global = tile.cell(row) if tile is not None else None
    if on_global is not None:
        return f"{GLOBAL_PANEL} patch ({on_global[0]}, {on_global[1]})"
    r, c = grid.cell(row) or divmod(row - grid.offset, grid.cols)
    if grid.lead_images:  # a tiled image's tower drawn over its global image alone (:func:`grid_note` says why)
        return f"{GLOBAL_PANEL} patch ({r}, {c})"
    if tile is not None and tile.n and grid.rows % tile.rows == 0 and grid.cols % tile.cols == 0:
        k = (r // tile.rows) * (grid.cols // tile.cols) + c // tile.cols
        return f"tile {k} patch ({r % tile.rows}, {c % tile.cols})"
    return f"patch ({r}, {c})"


def grid_note(result: AttentionResult, blk: Block, grid: PatchGrid) -> str:
    """What the info line says in brackets after the grid's size: where the image's keys lie among the block's
    (a VLM's tower: its keys of the tower; tiles laid out in place; a decoder's image tokens among its words), that
    a tiled image's tiles are not drawn and why, or how many keys lead the patches (a ViT's [CLS] and registers,
    "+1 non-patch"); empty where nothing leads them (SigLIP, a tower without a [CLS] token)."""
    if grid.lead_images and blk.stack == "encoder":  # Idefics3's tower, its tiles not laid out (tower_tiles)
        first = grid.offset - grid.lead_images * grid.n
        why = (
            "no decoder image tokens to lay them out"
            if result.token_grid_of(blk.batch) is None
            else "the decoder's image tokens do not lay them out"
        )
        return (
            f"{GLOBAL_PANEL} only: its {grid.lead_images} tiles at keys {first}–{grid.offset - 1} of the tower "
            f"not drawn, {why}"
        )
    # a VLM's vision tower (also opened alone, its tiles laid out by the processor's split): this image's keys
    if blk.stack == "encoder" and (result.token_grid is not None or grid.global_grid is not None):
        keys = grid.columns or range(grid.offset, grid.offset + grid.n)
        note = f"patches at keys {min(keys)}–{max(keys)} of the tower"
        # a tiled image: each tile a tower run of its own, laid out in place
        return f"tiles in place, {note}" if grid.global_grid is not None else note
    if grid.columns:  # a VLM's tiles
        return "tiles in place"
    if (blk.stack, blk.kind) == ("decoder", "self"):  # a VLM's image tokens sit among the words, not before patches
        return f"image tokens at keys {grid.offset}–{grid.offset + grid.n - 1}"
    return f"+{grid.offset} non-patch" if grid.offset else ""  # CLS / registers


def words_query(result: AttentionResult, blk: Block) -> bool:
    """Whether ``blk``'s queries over the image are words, a generation step naming one of them: a captioner's
    cross-attention, a vision–language decoder's self-attention to its image tokens (each text token after the
    image), an attention-pooling head's learned queries; not a tower's patches over patches."""
    if blk.kind != "self":
        return True
    return blk.stack == "decoder" and result.token_grid_of(blk.batch) is not None


def query_place(queries: list[tuple[str, int]], row: int) -> str:
    """``" (word k)"``, the query's place among the choices (1-based, as the query bar's buttons run), where another
    choice bears the same word (a caption's two "a"s): the title and the info line say which one is drawn; empty
    where the word is the only one of its name (or the row no choice's: a patch, the patches' mean)."""
    at = next((k for k, (_, r) in enumerate(queries) if r == row), None)
    if at is None or row < 0 or sum(lab == queries[at][0] for lab, _ in queries) < 2:
        return ""
    return f" (word {at + 1})"


def query_names(queries: list[tuple[str, int]]) -> list[str]:
    """The query choices' names as their buttons read them: a word that another choice bears too followed by its
    place, "a (5)" (1-based, as :func:`query_place` numbers it in the title's “a” (word 5)), so two "a"s differ on
    the button itself; every other name as it is."""
    seen = Counter(label for label, _ in queries)
    return [f"{label} ({k + 1})" if seen[label] > 1 and row >= 0 else label for k, (label, row) in enumerate(queries)]


def query_tip(result: AttentionResult, blk: Block, row: int) -> str:
    """A query button's tooltip: a decoder row is the token it reads and the word it produced (the button's name),
    ``decoder row 21: reads “the”, produced “cat”``; a row whose word was not generated says so; empty for other
    queries (a patch, CLS, the patches' mean)."""
    if blk.stack != "decoder" or not 0 <= row < min(blk_len(blk, 0), len(blk.query_axis)):
        return ""
    own = clean_label(blk.query_axis.labels[row])
    out = row_outputs(result, blk, [row])
    if not out:
        return ""
    word = out[0][1]
    if word == NEXT_WORD:
        return f"decoder row {row}: reads “{own}”; the word it produces was not generated (generate 1 or more words)"
    return f"decoder row {row}: reads “{own}”, produced “{clean_label(word)}”"


def step_query(result: AttentionResult, blk: Block, queries: list[tuple[str, int]], step: int) -> int:
    """Index into ``queries`` of generated word ``step`` (given caption words come first); 0 for no step."""
    g = n_steps(result, blk.batch)
    if step < 0 or not g:
        return 0
    row = producing_row(result, blk_len(blk, 0), min(step, g - 1), blk.batch)
    return next((i for i, (_, r) in enumerate(queries) if r == row), len(queries) - 1)


def global_grid(grid: PatchGrid, n_keys: int) -> PatchGrid | None:
    """A tiled VLM image's global image grid, when its keys are within the block's (a stored file may lie)."""
    g = grid.global_grid
    return g if g is not None and g.offset + g.n <= n_keys else None
