"""``attnviz compare A B ... [--figure OUT.png|pdf|svg [--figure-head 'STACK KIND LAYER:HEAD']]``.

The comparison itself is :mod:`attnviz.corpus.compare` (heads.parquet, run.json, the printed heads); ``--figure``
also draws one head as A | B | A − B, the three maps the window's Head map shows while File ▸ Compare with… holds
the comparison, for the same :class:`~attnviz.core.view.Selection` (the head picked in the Overview: one head,
no filters).  This layer owns the step because it sees both the corpus engine and the figures (which do not see
each other).  The head drawn is ``--figure-head``, else the one whose JS divergence is largest.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from attnviz import AttnvizError
from attnviz.corpus import compare as engine

if TYPE_CHECKING:
    from attnviz.core.attention import AttentionResult
    from attnviz.core.view import Selection
    from attnviz.corpus.compare import Comparison

HELP = engine.HELP


def add_arguments(p: argparse.ArgumentParser) -> None:
    engine.add_arguments(p)
    g = p.add_argument_group("figure")
    g.add_argument(
        "--figure",
        metavar="OUT",
        help="also draw one head as A | B | A − B (.png, .pdf or .svg): the window's Head map while comparing",
    )
    g.add_argument(
        "--figure-head",
        metavar="SPEC",
        help="the head drawn, 'STACK KIND LAYER:HEAD' (e.g. 'encoder self 1:2', counted from 0 as the printed "
        "rows; default: the largest JS divergence)",
    )


def figure_selection(result_a: AttentionResult, rows: list[dict], spec: str | None) -> tuple[Selection, dict]:
    """The selection on A of the head ``spec`` names (None: the compared head with the largest JS divergence), as
    the window selects it when that head's Overview cell is clicked, and its comparison row."""
    from attnviz.core.attention import shown_stack
    from attnviz.core.view import Selection
    from attnviz.runtime.ablation import HEAD_RE

    if spec is None:
        row = max(rows, key=lambda r: r["js_divergence"])
    else:
        m = HEAD_RE.match(spec)
        if m is None:
            raise AttnvizError(
                f"--figure-head {spec!r}: write the head as 'STACK KIND LAYER:HEAD', e.g. 'encoder self 1:2'"
            )
        # a vision–language model's encoder: its rows say "vision", and the sites' "encoder" means the same heads
        key = (shown_stack(m.group(1), result_a.vision_tower), m.group(2), int(m.group(3)), int(m.group(4)))
        found = next((r for r in rows if (r["stack"], r["kind"], r["layer"], r["head"]) == key), None)
        if found is None:
            # each compared site with its heads, counted from 0 as the Overview's H0.. and the printed 3:1 count:
            # a head counted from 1 (the site's last + 1) read "no such head" with no hint of the range
            n: dict[str, int] = {}
            for r in rows:
                site = f"{r['stack']} {r['kind']} {r['layer']}"
                n[site] = max(n.get(site, 0), int(r["head"]) + 1)
            site = f"{key[0]} {key[1]} {key[2]}"
            if site in n:
                raise AttnvizError(
                    f"--figure-head {spec!r}: {site} has {n[site]} heads, counted from 0 (0 to {n[site] - 1})"
                )
            sites = ", ".join(f"{k} (heads 0 to {v - 1})" for k, v in sorted(n.items()))
            raise AttnvizError(f"--figure-head {spec!r}: no such compared head; the compared sites: {sites}")
        row = found
    for bi, blk in enumerate(result_a.blocks(0)):
        for li, i in enumerate(blk.sites):
            s = result_a.sites[i]
            if (engine.row_stack(s, result_a.vision_tower), s.kind, int(s.layer)) == (
                row["stack"],
                row["kind"],
                row["layer"],
            ):
                return Selection(block=bi, layer=li, head=int(row["head"]), mode="head"), row
    raise AttnvizError(f"--figure-head: {row['stack']} {row['kind']} {row['layer']} is not a block of A")  # not reached


def _draw(path: str, spec: str | None, result_a: AttentionResult, result_b: AttentionResult, comp: Comparison) -> str:
    from attnviz.figures import render_compare_figure, save_figure

    sel, row = figure_selection(result_a, comp.heads, spec)
    out = save_figure(render_compare_figure(result_a, result_b, sel), path, flag="--figure")
    return (
        f"wrote {out}: A | B | A − B of {row['stack']} {row['kind']} {row['layer']}:{row['head']} "
        f"(JS {row['js_divergence']:.4g} bits, largest |Δ| {row['max_abs_diff']:.4g})"
    )


def run(args) -> int:
    if args.figure_head is not None and args.figure is None:
        raise AttnvizError("--figure-head names the head --figure draws; give --figure OUT.png too")
    if args.figure is None:
        return engine.run(args)
    from attnviz.figures import figure_format

    figure_format(args.figure)  # a suffix it cannot write: one line before both models run
    return engine.run(args, figure=lambda ra, rb, comp: _draw(args.figure, args.figure_head, ra, rb, comp))
