"""How many tokens a run saw, as the Run sidebar says it: a model that reads an image and writes words counts
them apart.

A captioner's first axis is its encoder's image patches and a vision–language decoder's its vision tower's
(every tile's patches); counting either as "tokens" hid the words.  Such a result gets two rows: the decoder's text
tokens (for a VLM, its sequence less the image tokens in it) and the image tokens (where they are and how they
lie on the image); any other result keeps one "tokens" row.
"""

from __future__ import annotations

from attnviz.core.attention import AttentionResult, PatchGrid


def _grid_words(g: PatchGrid) -> str:
    extra = f" + {g.offset} other" if g.offset and g.columns is None and not g.lead_images else ""
    return f"{g.rows}×{g.cols}{extra}"


def _vlm(result: AttentionResult, g: PatchGrid) -> list[tuple[str, str]]:
    dec = result.key_tokens
    glob = g.global_grid
    n_image = g.n + (glob.n if glob is not None else 0)
    where = f"tiles {g.rows}×{g.cols} + global image {glob.rows}×{glob.cols}" if glob is not None else _grid_words(g)
    rows = [("text tokens", f"{len(dec) - n_image} in the decoder")] if dec is not None else []
    image = f"{n_image} in the decoder ({where})"
    if result.tokens is not None:  # the vision tower's own sequence: every tile's patches
        image += f" · {len(result.tokens)} patches in the vision tower"
    return [*rows, ("image tokens", image)]


def _captioner(g: PatchGrid | None, patches: int, words: int) -> list[tuple[str, str]]:
    where = f" ({_grid_words(g)} patches)" if g is not None and g.offset + g.n <= patches else ""
    return [("text tokens", f"{words} in the decoder"), ("image tokens", f"{patches} from the encoder{where}")]


def token_rows(result: AttentionResult) -> list[tuple[str, str]]:
    """``(name, value)`` rows: ``text tokens`` and ``image tokens`` for a VLM and a captioner; else ``tokens``."""
    if result.token_grid is not None:  # a vision–language decoder: its image tokens among its words
        return _vlm(result, result.token_grid)
    captioner = result.patch_grid is not None and any(s.stack == "decoder" and s.kind == "cross" for s in result.sites)
    if captioner and result.tokens is not None and result.key_tokens is not None:
        return _captioner(result.patch_grid, len(result.tokens), len(result.key_tokens))
    return [("tokens", str(len(result.tokens)))] if result.tokens is not None else []
