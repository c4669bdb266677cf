"""Issue 24 item 8: hostile corpus results folders opened in the window through a real open (``open_path``).

Each folder is first written by the corpus's own writer (corpus/output.py), then damaged the way a hand edit, a
truncated copy or a stranger's folder would.  Every case is exactly one message in the window, no exception
reaches ``sys.excepthook`` and no Qt warning is printed (strict.py), nothing in or beside the folder changes, and
the window opens a good results folder afterwards.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

import pyarrow as pa
import pyarrow.parquet as pq
from PySide6.QtWidgets import QApplication
from strict import strict

from attnviz.core.stats import ROW_STATS
from attnviz.corpus import output
from attnviz.corpus.results_check import MAX_HEADS, MAX_INDEX


def _heads(layers: int = 2, heads: int = 2) -> list[dict]:
    stats = {s: 0.5 for s in ROW_STATS} | {"induction": 0.0}
    return [
        dict(stack="encoder", kind="self", layer=L, head=h, items=3, tokens=12, **stats, role="mixed", role_score=0.1)
        for L in range(layers)
        for h in range(heads)
    ]


def _examples(heads: list[dict]) -> list[dict]:
    return [
        dict(
            {k: h[k] for k in ("stack", "kind", "layer", "head")},
            score=s,
            rank=0,
            item=0,
            value=1.0,
            row=1,
            col=2,
            text="the cat sat",
            pair=None,
            image=None,
            generated=None,
            generate=None,
        )
        for h in heads
        for s in ROW_STATS
    ]


def results(folder: Path, heads: list[dict] | None = None, run: dict | None = None) -> Path:
    folder.mkdir(parents=True)
    heads = _heads() if heads is None else heads
    output.write(
        folder, heads, _examples(heads), {"model": "m.onnx", "model_kind": "encoder", "items": 3, **(run or {})}
    )
    return folder


def _replace_heads(folder: Path, edit) -> None:
    rows = pq.read_table(folder / output.HEADS).to_pylist()
    edit(rows)
    pq.write_table(pa.Table.from_pylist(rows), folder / output.HEADS)


def _replace_examples(folder: Path, edit) -> None:
    t = pq.read_table(folder / output.EXAMPLES)
    rows = t.to_pylist()
    edit(rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=t.schema), folder / output.EXAMPLES)


def _outside_link(folder: Path) -> None:
    secret = folder.parent / "secret.parquet"  # a valid results file, but outside the folder
    secret.write_bytes((folder / output.HEADS).read_bytes())
    (folder / output.HEADS).unlink()
    (folder / output.HEADS).symlink_to(secret)


def _huge(folder: Path) -> None:
    n = MAX_HEADS + 1
    cols = {"stack": ["encoder"] * n, "kind": ["self"] * n, "layer": [i // 64 for i in range(n)]}
    cols |= {"head": [i % 64 for i in range(n)], "role": ["mixed"] * n, "role_score": [0.0] * n}
    pq.write_table(pa.table(cols), folder / output.HEADS)


# name -> (damage done to a good folder, words the one message must hold)
CASES = {
    # pyarrow's words ("Parquet magic bytes not found in footer", "Couldn't deserialize thrift") said in plain ones
    "truncated heads": (
        lambda f: (f / output.HEADS).write_bytes((f / output.HEADS).read_bytes()[:300]),
        "not readable Parquet (it is not a Parquet file, or a partial copy cut short)",
    ),
    "garbage examples": (
        lambda f: (f / output.EXAMPLES).write_bytes(bytes(range(256)) * 20),
        "not readable Parquet (it is not a Parquet file, or a partial copy cut short)",
    ),
    "damaged heads footer": (
        lambda f: (f / output.HEADS).write_bytes(
            (f / output.HEADS).read_bytes()[:-40] + b"\xff" * 32 + (f / output.HEADS).read_bytes()[-8:]
        ),
        "not readable Parquet (it is damaged: parts of it cannot be read)",
    ),
    "run.json a list": (lambda f: (f / output.RUN).write_text("[]"), "not the object"),
    "run.json deeply nested": (lambda f: (f / output.RUN).write_text("[" * 100000 + "]" * 100000), "nested deeper"),
    "run.json wrong types": (lambda f: (f / output.RUN).write_text(json.dumps({"model": 5})), "'model' is int"),
    "run.json gold without best head": (
        lambda f: (f / output.RUN).write_text(json.dumps({"gold": {"pairs": 3, "convention": "a", "sure_links": 1}})),
        "best head",
    ),
    "missing run.json": (lambda f: (f / output.RUN).unlink(), "missing run.json"),
    "missing examples": (lambda f: (f / output.EXAMPLES).unlink(), "missing examples.parquet"),
    "zero heads": (lambda f: _replace_heads(f, lambda rows: rows.clear()), "no columns"),
    "zero rows with columns": (
        lambda f: pq.write_table(pq.read_table(f / output.HEADS).slice(0, 0), f / output.HEADS),
        "no heads",
    ),
    "no role column": (lambda f: _replace_heads(f, lambda rows: [r.pop("role") for r in rows]), "no column 'role'"),
    "layer 10^12": (lambda f: _replace_heads(f, lambda rows: rows[0].update(layer=10**12)), f"0 to {MAX_INDEX:,}"),
    "negative head": (lambda f: _replace_heads(f, lambda rows: rows[0].update(head=-1)), "outside"),
    "text layers": (
        lambda f: _replace_heads(f, lambda rows: [r.update(layer=str(r["layer"])) for r in rows]),
        "not whole numbers",
    ),
    "text statistic": (
        lambda f: _replace_heads(f, lambda rows: [r.update(entropy="high") for r in rows]),
        "'entropy' holds string",
    ),
    "a name of a million characters": (
        lambda f: _replace_heads(f, lambda rows: rows[0].update(role="r" * 1_000_000)),
        "1,000,000-character name",
    ),
    "empty stack": (lambda f: _replace_heads(f, lambda rows: rows[0].update(stack=None)), "empty value"),
    "unknown kind": (lambda f: _replace_heads(f, lambda rows: rows[0].update(kind="sideways")), "not one of"),
    "a head twice": (lambda f: _replace_heads(f, lambda rows: rows.append(dict(rows[0]))), "twice"),
    "huge row count": (_huge, "more than the window shows"),
    "an example generating 10^12 words": (
        lambda f: _replace_examples(f, lambda rows: rows[0].update(generate=10**12)),
        "'generate' holds 1,000,000,000,000",
    ),
    "symlink out of the folder": (_outside_link, "outside"),
    "examples of the wrong types": (
        lambda f: pq.write_table(pa.table({"stack": [1], "rank": ["a"]}), f / output.EXAMPLES),
        "no columns",
    ),
}


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_results_folder_is_one_message(real_window, qtbot, tmp_path, name):
    win = real_window
    damage, words = CASES[name]
    folder = results(tmp_path / "data" / "res")
    damage(folder)
    before = _snapshot(tmp_path / "data")
    messages: list[str] = []
    win.error_shown.connect(messages.append)
    with strict():
        with qtbot.waitSignal(win.error_shown, timeout=10000):
            win.open_path(folder)
        QApplication.processEvents()  # queued slots run inside the strict hooks (a refusal has no result)
    assert len(messages) == 1, messages
    assert "\n" not in messages[0] and "Traceback" not in messages[0]
    assert words.lower() in messages[0].lower(), messages[0]
    assert getattr(win, "corpus_view", None) is None
    assert _snapshot(tmp_path / "data") == before  # nothing written, nothing changed
    good = results(tmp_path / "good")  # the window still opens results
    with qtbot.waitSignal(win.corpus_shown, timeout=10000) as shown:
        win.open_path(good)
    shown.args[0].close()


def test_nan_and_infinite_statistics_are_shown_not_raised(real_window, qtbot, tmp_path):
    """NaN and ±inf statistics are results a run can write (a head that never fired): the view shows them as
    they are (– for NaN), colours only finite cells, and every score and head can be picked."""
    heads = _heads()
    for h in heads:
        h.update(entropy=math.nan, prev=math.inf, role_score=-math.inf)
    folder = results(tmp_path / "res", heads)
    with strict():
        with qtbot.waitSignal(real_window.corpus_shown, timeout=10000) as shown:
            real_window.open_path(folder)
        v = shown.args[0]
        for score in [v.score.itemText(i) for i in range(v.score.count())]:
            v.score.setCurrentText(score)
            for r in range(v.grid.rowCount()):
                v._on_grid_click(r, 0)
        col = [v.table.horizontalHeaderItem(c).text() for c in range(v.table.columnCount())].index("entropy")
        assert v.table.item(0, col).text() == "–"
        v.score.setCurrentText("entropy")
        assert v.grid_label.text().endswith("(no values)")
        v.close()


def test_an_example_text_of_megabytes_is_cut_in_its_cell(real_window, qtbot, tmp_path):
    """An example is a whole corpus item, and a long-context document is megabytes: its cell shows the start
    (laying out the whole text in the table froze the window for minutes)."""
    from attnviz.gui.views.corpus import CELL_CHARS

    folder = tmp_path / "res"
    folder.mkdir()
    heads = _heads(1, 1)
    examples = _examples(heads)
    for e in examples:
        e["text"] = "word " * 400_000
    output.write(folder, heads, examples, {"model": "m.onnx", "items": 1})
    with strict():
        with qtbot.waitSignal(real_window.corpus_shown, timeout=20000) as shown:
            real_window.open_path(folder)
        v = shown.args[0]
        v.show_head(v.heads[0])
        v.grab()  # painted, not only built
    cell = v.examples.item(0, 5)
    assert len(cell.text()) == CELL_CHARS and cell.text().startswith("word word") and cell.toolTip()
    v.close()
