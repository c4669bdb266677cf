"""A window of Token links (``attnviz figure --view links --span LO-HI``): the two token columns cut to the window's
positions as :func:`~attnviz.core.view.span.span_map` cuts a map, the lines the links between them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from attnviz.core.view.links import LinksView
from attnviz.core.view.span import window


def span_links(lv: LinksView, rows: tuple[int, int] | None, keys: tuple[int, int] | None = None) -> LinksView:
    """Token links cut to query positions ``rows`` and key positions ``keys`` as :func:`span_map` cuts a map: the
    two columns the window's tokens, the lines the links the whole view draws between them (each token's
    strongest of its whole row, shaded by its share of the whole row: a window never makes a link stronger).
    The links of the window's query tokens to keys outside it are counted (``outside``: the key says so)."""
    if rows is None and keys is None:
        return lv
    q_pos = lv.q_pos if lv.q_pos is not None else np.arange(len(lv.q_labels))
    k_pos = lv.k_pos if lv.k_pos is not None else np.arange(len(lv.k_labels))
    win = window(lv.block, lv.notes, (q_pos, k_pos), lv.x_titles, rows, keys)
    qi, ki = np.nonzero(win.q)[0], np.nonzero(win.k)[0]
    q_new = np.full(len(q_pos), -1)
    q_new[qi] = np.arange(len(qi))
    k_new = np.full(len(k_pos), -1)
    k_new[ki] = np.arange(len(ki))
    links = [(c, int(q_new[i]), int(k_new[j]), w) for c, i, j, w in lv.links if q_new[i] >= 0 and k_new[j] >= 0]
    outside = sum(1 for _, i, j, _ in lv.links if q_new[i] >= 0 and k_new[j] < 0)
    return replace(
        lv,
        q_labels=[lv.q_labels[i] for i in qi],
        k_labels=[lv.k_labels[j] for j in ki],
        q_special=[lv.q_special[i] for i in qi] if lv.q_special else [],
        k_special=[lv.k_special[j] for j in ki] if lv.k_special else [],
        items=[(name, colour, m[np.ix_(qi, ki)]) for name, colour, m in lv.items],
        links=links,
        title=" · ".join([lv.title, *win.said]),
        q_pos=np.asarray(q_pos)[qi],
        k_pos=np.asarray(k_pos)[ki],
        outside=outside,
    )
