"""How many tokens a run saw, as the Run sidebar says it: a model that reads an image and writes words counts
them apart.

A captioner's first axis is its encoder's image patches and a vision–language decoder's its vision tower's
(every tile's patches); counting either as "tokens" hid the words.  Such a result gets two rows: the decoder's text
tokens (for a VLM, its sequence less the image tokens in it) and the image tokens (where they are and how they
lie on the image); any other result keeps one "tokens" row.  Padding is not counted, and a padded batch's rows,
whose counts differ, are counted one by one (``row 0: 17 · row 1: 12``).
"""

from __future__ import annotations

from attnviz.core.attention import AttentionResult, PatchGrid, TokenAxis
from attnviz.core.rows import pick_row, row_noun, scored_rows
from attnviz.core.text_scores import TextScores

MAX_ROWS = 8  # rows counted one by one; a larger batch says so after them


def _n(axis: TokenAxis) -> int:
    return len(axis.real)  # the row's own tokens: padding is not what the run saw


def _grid_words(g: PatchGrid) -> str:
    extra = f" + {g.offset} other" if g.offset and g.columns is None and not g.lead_images else ""
    return f"{g.rows}×{g.cols}{extra}"


def _vlm(result: AttentionResult, g: PatchGrid) -> list[tuple[str, str]]:
    dec = result.key_tokens
    glob = g.global_grid
    n_image = g.n + (glob.n if glob is not None else 0)
    # the grid only: a decoder grid's offset is where its image begins among the words, not tokens of the image
    # (a captioner's "+ 1 other" is its CLS token; here "+ 1 other" was the word before the image)
    where = (
        f"tiles {g.rows}×{g.cols} + global image {glob.rows}×{glob.cols}" if glob is not None else f"{g.rows}×{g.cols}"
    )
    several = result.image_grids()
    if len(several) > 1:  # one prompt's several images: every image's tokens
        n_image = sum(s.n for s in several)
        where = f"{len(several)} images: " + ", ".join(f"{s.rows}×{s.cols}" for s in several)
    rows = [("text tokens", f"{_n(dec) - n_image} in the decoder")] if dec is not None else []
    image = f"{n_image} in the decoder ({where})"
    if result.tokens is not None:  # the vision tower's own sequence: every tile's patches, and a CLS where it has one
        image += f" · {len(result.tokens)} tokens in the vision tower"
    return [*rows, ("image tokens", image)]


def _captioner(g: PatchGrid | None, patches: int, words: int) -> list[tuple[str, str]]:
    where = f" ({_grid_words(g)} patches)" if g is not None and g.offset + g.n <= patches else ""
    return [("text tokens", f"{words} in the decoder"), ("image tokens", f"{patches} from the encoder{where}")]


def token_lines(result: AttentionResult) -> list[tuple[str, list[str]]]:
    """``(name, lines)``: :func:`token_rows`' values as lines, one per batch row when the rows count differently
    (``["row 0: 17", "row 1: 12"]``), so the sidebar can show each row on a line of its own."""
    if result.batch_size <= 1:
        return [(name, [value]) for name, value in _one_row(result)]
    if scored_rows(result):
        return _dual_lines(result)
    per = [_one_row(pick_row(result, b)) for b in range(min(result.batch_size, MAX_ROWS))]
    # a beam search's rows and a dual encoder's candidate texts, as the row box names them
    noun = {"beam": "beam", "text": "text", "image": "image", "pair": "pair"}.get(row_noun(result), "row")
    more = [f"… ({result.batch_size} {noun}s)"] if result.batch_size > MAX_ROWS else []
    rows = []
    for i, (name, value) in enumerate(per[0]):
        values = [r[i][1] if i < len(r) else "" for r in per]
        same = all(v == value for v in values)
        rows.append((name, [value] if same else [f"{noun} {b}: {v}" for b, v in enumerate(values)] + more))
    return rows


def _dual_lines(result: AttentionResult) -> list[tuple[str, list[str]]]:
    """A dual encoder's rows are pairs of an image and a text: its text tokens are counted once a text (``text 1:
    11 in the text tower``) and its image tokens once an image, not once a row (3 images x 3 texts listed each
    text's count three times as "pair 0..7", the ninth cut off)."""
    scores = TextScores.from_info(result.info)
    assert scores is not None  # scored_rows
    # each line's rows: the first row of each distinct text (image); one image's texts have no per-row images
    names = {"text tokens": ("text", scores.texts), "image tokens": ("image", scores.images or [""])}
    out = []
    for i, (name, value) in enumerate(_one_row(pick_row(result, 0))):
        noun, per_row = names.get(name, ("row", [str(b) for b in range(result.batch_size)]))
        rows = [per_row.index(v) for v in dict.fromkeys(per_row)]
        values = [value if b == 0 else _value(pick_row(result, b), i) for b in rows[:MAX_ROWS]]
        more = [f"… ({len(rows)} {noun}s)"] if len(rows) > MAX_ROWS else []
        same = all(v == value for v in values) and not more
        out.append((name, [value] if same else [f"{noun} {k}: {v}" for k, v in enumerate(values)] + more))
    return out


def _value(result: AttentionResult, i: int) -> str:
    row = _one_row(result)
    return row[i][1] if i < len(row) else ""


def token_rows(result: AttentionResult) -> list[tuple[str, str]]:
    """``(name, value)`` rows: ``text tokens`` and ``image tokens`` for a VLM and a captioner; else ``tokens``.
    A batch whose rows count differently gives each row's count in one value (``row 0: 17 · row 1: 12``)."""
    return [(name, " · ".join(lines)) for name, lines in token_lines(result)]


def _one_row(result: AttentionResult) -> list[tuple[str, str]]:
    if result.token_grid is not None:  # a vision–language decoder: its image tokens among its words
        return _vlm(result, result.token_grid)
    if result.audio is not None and result.tokens is not None and all(s.stack == "encoder" for s in result.sites):
        # a speech encoder alone (wav2vec2): its positions are the sound's frames, not tokens
        return [("frames", f"{_n(result.tokens)} of {result.audio.frame_seconds * 1000:g} ms")]
    if result.key_tokens is not None and result.tokens is not None and any(s.tower == "text" for s in result.sites):
        # a dual encoder (CLIP, SigLIP): its first axis is the image tower's patches, the text tower's its second;
        # "tokens" counted the patches alone and hid the text
        g = result.patch_grid
        where = f" ({_grid_words(g)} patches)" if g is not None else ""
        return [
            ("text tokens", f"{_n(result.key_tokens)} in the text tower"),
            ("image tokens", f"{_n(result.tokens)} in the image tower{where}"),
        ]
    captioner = result.patch_grid is not None and any(s.stack == "decoder" and s.kind == "cross" for s in result.sites)
    if captioner and result.tokens is not None and result.key_tokens is not None:
        return _captioner(result.patch_grid, _n(result.tokens), _n(result.key_tokens))
    return [("tokens", str(_n(result.tokens)))] if result.tokens is not None else []
