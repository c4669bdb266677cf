"""The corpus and compare summaries count in English: "1 item in 1 batch", not "1 items in 1 batches" (audit25,
a small text file through the demo classifier).  The counts against the file: its non-blank lines, and batches of
--batch-size."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnviz.cli import main

pytest.importorskip("onnxruntime")

DEMO = Path(__file__).resolve().parents[2] / "models" / "sequence-classification.onnx"


@pytest.fixture
def demo():
    if not DEMO.exists():
        pytest.skip("the sequence-classification demo is not in this checkout")
    return DEMO


@pytest.mark.parametrize(
    ("lines", "batch", "said"),
    [
        (["1 2 3"], 32, "1 item in 1 batch,"),
        (["1 2 3", "", "4 5"], 32, "2 items in 1 batch,"),
        (["1", "2 3"], 1, "2 items in 2 batches,"),
    ],
)
def test_corpus_counts_items_and_batches_in_words(demo, tmp_path, capsys, lines, batch, said):
    texts = tmp_path / "t.txt"
    texts.write_text("\n".join(lines) + "\n")
    flags = ["--workers", "1", "--batch-size", str(batch), "--out", str(tmp_path / "o")]
    assert main(["corpus", str(demo), "--texts", str(texts), *flags]) == 0
    out = capsys.readouterr().out
    assert f"run.json: {said}" in out, out


def test_compare_over_one_item_says_one_item_in_one_batch(demo, tmp_path, capsys):
    texts = tmp_path / "t.txt"
    texts.write_text("1 2 3\n")
    flags = ["--texts", str(texts), "--workers", "1", "--out", str(tmp_path / "c")]
    assert main(["compare", str(demo), str(demo), *flags]) == 0
    out = capsys.readouterr().out
    assert " over 1 item (1 batch)" in out, out
