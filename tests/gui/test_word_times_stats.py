"""Head stats ranks a speech run's cross heads against reference word times (File ▸ Load word times…), in the real
window on the tiny random-init Whisper export: each head's share of boundaries within 50 ms and mean error are the
numbers `attnviz align-audio --gold` writes for the same recording and reference."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
sf = pytest.importorskip("soundfile")
pq = pytest.importorskip("pyarrow.parquet")

from gui_helpers import open_and_wait  # noqa: E402

from attnviz.cli import main  # noqa: E402

pytestmark = pytest.mark.slow
RATE = 16000
WORDS = [("w3", 0.10, 0.55), ("w17", 0.55, 1.00), ("w5", 1.10, 1.60), ("w8", 1.60, 2.30)]


@pytest.fixture
def recording(tmp_path):
    t = np.arange(int(2.5 * RATE)) / RATE
    sound = tmp_path / "clip.wav"
    sf.write(sound, (0.5 * np.sin(2 * np.pi * (100 * t + 780 * t**2))).astype(np.float32), RATE, subtype="FLOAT")
    ref = tmp_path / "clip.tsv"
    ref.write_text("".join(f"{w}\t{s}\t{e}\n" for w, s, e in WORDS))
    return sound, ref


def test_head_stats_ranks_cross_heads_by_word_boundaries(qtbot, real_window, optimum_export, recording, tmp_path):
    whisper = optimum_export("whisper") / "onnx"
    sound, ref = recording
    w = real_window
    w.load_word_times(ref)  # nothing run yet: one message, no columns
    assert "score a speech run" in w.last_error and w.stats.word_times is None
    open_and_wait(qtbot, w, whisper, timeout=120000, audio=str(sound), text_pair=" ".join(x for x, _, _ in WORDS))
    w.load_word_times(ref)
    st = w.stats
    qtbot.waitUntil(lambda: "within_50ms" in st.columns and st.table.rowCount() == 8, timeout=60000)
    assert w.tabs.currentWidget() is st and w.session.block.kind == "cross" and w.session.block.stack == "decoder"
    within = st.column_values("within_50ms")
    assert within == sorted(within, reverse=True)  # best aligner first
    assert "ranked by word boundaries within 50 ms" in st.info.text() and "4 of 4 reference words" in st.info.text()

    # the same numbers from the command line on the same recording and reference
    out = tmp_path / "words.tsv"
    assert main(["align-audio", str(whisper), "--audio", str(sound), "--gold", str(ref), "--out", str(out)]) == 0
    cli = {(r["layer"], r["head"]): r for r in pq.read_table(tmp_path / "heads.parquet").to_pylist()}
    error = st.column_values("boundary_error_ms")
    for r in range(st.table.rowCount()):
        layer, head = int(st.table.item(r, 0).value), int(st.table.item(r, 1).value)
        assert within[r] == cli[(layer, head)]["within_50ms"]
        assert error[r] == pytest.approx(cli[(layer, head)]["mean_abs_error_s"] * 1000, abs=1e-9)

    # a hostile reference: one message naming it, the columns already shown stay
    bad = tmp_path / "nul.tsv"
    bad.write_bytes(b"a\x00\t0\t1\n")
    with qtbot.waitSignal(w.error_shown, timeout=30000) as shown:
        w.load_word_times(bad)
    assert "nul.tsv" in shown.args[0] and "NUL" in shown.args[0]
    # another block: the columns are the decoder cross block's only
    w.session.select(block=w.session.block_index("encoder", "self"))
    qtbot.waitUntil(lambda: st.table.rowCount() > 0 and "within_50ms" not in st.columns, timeout=30000)
    assert "Word-time columns" in st.info.text()
