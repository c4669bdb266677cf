"""One results folder of per-head rows: ``heads.parquet`` (one row per stack, kind, layer, head, plus the measures
a command adds) and ``run.json``, each written atomically — shared by ``attnviz compare`` and ``attnviz ablate``."""

from __future__ import annotations

from pathlib import Path

HEADS = "heads.parquet"
RUN = "run.json"
HEAD_KEYS = (("stack", "string"), ("kind", "string"), ("layer", "int64"), ("head", "int64"))


def row_keys(site, head: int, vision_tower: bool = False) -> dict:
    """The :data:`HEAD_KEYS` of head ``head`` of ``site`` (a SiteInfo); ``vision_tower``: a vision–language model's vision
    file, whose encoder is named "vision" as its views name it (core.attention.shown_stack)."""
    from attnviz.core.attention import shown_stack

    return {
        "stack": shown_stack(site.stack, vision_tower),
        "kind": site.kind,
        "layer": int(site.layer),
        "head": int(head),
    }


def given_input(args, names: tuple[str, ...]) -> dict:
    """run.json's ``input``: each of ``names`` (the command's input flags, as argparse names them) that was given."""
    return {k: v for k in names if (v := getattr(args, k))}


def write_heads(out: Path, rows: list[dict], measures: tuple[tuple[str, str], ...], run: dict) -> None:
    """``rows`` under the schema ``HEAD_KEYS + measures`` (pyarrow type names: "float64", "bool_", ...) into
    ``out/heads.parquet``, ``run`` into ``out/run.json``; ``out`` is made if missing.  The two go through
    :func:`attnviz.core.writes.atomic_paths` together (inside a command, checked again against its declared
    inputs): never a new table beside an old run.json."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from attnviz.core.writes import atomic_paths, json_bytes, make_folder

    make_folder(out)
    schema = pa.schema([(name, getattr(pa, kind)()) for name, kind in (*HEAD_KEYS, *measures)])
    with atomic_paths([(out / HEADS, "--out"), (out / RUN, "--out")]) as (heads, said):
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), heads)
        said.write_bytes(json_bytes(run, indent=1))
