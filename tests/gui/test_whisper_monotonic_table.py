"""A Whisper run's Head stats table shows "monotonic" of the rows that chose the transcript's words (polish24: from
the <|notimestamps|> row, which chose the first word, as Audio regions names each word at the row that chose it;
the forced prompt's three rows before it left out), each cell the hand computation over the run's own cross maps,
and the column's tooltip says so.  The tiny random-init Whisper of tests/runtime/test_optimum_whisper.py,
generating."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.slow
RATE = 16000


def _by_hand(rows: np.ndarray) -> float:
    top = [int(np.argmax(r)) for r in rows]
    steps = [b >= a for a, b in zip(top, top[1:])]
    return sum(steps) / len(steps)


def test_the_tables_monotonic_counts_the_transcripts_rows(qtbot, window, optimum_export):
    from attnviz.runtime import open_model

    t = np.arange(int(2.5 * RATE)) / RATE
    clip = (0.5 * np.sin(2 * np.pi * (100 * t + 3900 / 5.0 * t**2))).astype(np.float32)
    r = open_model(optimum_export("whisper") / "onnx", provider="cpu").analyze(audio=clip, generate=12)
    cross = [i for i, s in enumerate(r.sites) if s.kind == "cross"]
    w = window
    w._show_result(r)
    w.select_view("stats")
    block = next(i for i, b in enumerate(w.session.blocks) if b.kind == "cross")
    w.session.select(block=block)
    v, table = w.stats, w.stats.table
    n = sum(r.sites[i].heads for i in cross)
    qtbot.waitUntil(lambda: table.rowCount() == n and not v.busy and "monotonic" in v.columns, timeout=20000)
    c = v.columns.index("monotonic")
    assert "<|notimestamps|>" in table.horizontalHeaderItem(c).toolTip()
    assert not any(w.startswith("<|") for w in r.generated)  # every generated token is a word (no end of text)
    chose = [3 + k for k in range(len(r.generated))]  # generated word k at position 4 + k, chosen by the row before
    # the table is of the clip's frames, as the maps (core.view.clip): a Whisper frame is two 160-sample hops at
    # 16 kHz, 125 for the 2.5-s chirp; the "show padding after the clip" box gives the whole window
    frames = -(-len(clip) // 320)
    assert f"the clip: frames 0–{frames - 1} of" in v.info.text()
    for padding in (False, True):
        if padding:
            w.session.select(padding=True)
            qtbot.waitUntil(lambda: not v.busy and table.rowCount() == n and "padding cut" not in v.info.text())
        moved = 0
        for row in range(table.rowCount()):
            layer, head = (int(v.cell(row, v.columns.index(k)).value) for k in ("layer", "head"))
            maps = r.maps[cross[layer]].array()[0, head]  # [rows, frames]: 4 forced rows, then the transcript's
            maps = maps if padding else maps[:, :frames]
            assert float(v.cell(row, c).value) == pytest.approx(_by_hand(maps[chose]), abs=1e-12), (layer, head)
            moved += _by_hand(maps[chose]) != _by_hand(maps)
        assert moved  # the prompt's rows would have changed what the table says
    assert w.sidebar.values("Run")["forced prompt (tokens)"] == "4"  # the sidebar names the fact the run keeps
