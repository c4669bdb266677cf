"""``attnviz extract --max-tokens N`` says on stderr, in one line, what the cut took (which sentence lost how many
tokens), as ``open`` and the window do; it wrote that only into the .npz.  Checked against cuts done by hand on a
word-level vocabulary: every word one token, [CLS] and [SEP] around."""

from __future__ import annotations

import pytest
from onnx_builders import tiny_text_model

from attnviz.cli import main
from attnviz.core.io import load_npz

TEXT = "the cat sat on the mat"  # 6 words: [CLS] + 6 + [SEP] = 8 tokens
PAIR = "a dog ran home"  # 4 words


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_text_model(tmp_path_factory.mktemp("cut") / "model.onnx")


def _extract(model, tmp_path, capsys, *argv):
    out = tmp_path / "o.npz"
    assert main(["extract", str(model), "--text", TEXT, *argv, "--out", str(out)]) == 0
    io = capsys.readouterr()
    return io.out, io.err.strip().splitlines(), load_npz(out)


def test_a_cut_text_says_so_on_stderr(model, tmp_path, capsys):
    out, err, result = _extract(model, tmp_path, capsys, "--max-tokens", "4")
    # by hand: the first 3 of the 8 tokens, the final [SEP] kept last
    assert result.tokens.labels == ["[CLS]", "the", "cat", "[SEP]"]
    assert err == ["attnviz: note: 8 tokens truncated to the first 4 (--max-tokens 4)"]
    assert err[0].removeprefix("attnviz: note: ") in result.info["notes"]  # the note the .npz keeps
    assert out.startswith("wrote ") and "truncated" not in out  # stdout as before


def test_a_cut_pair_names_which_sentence_lost_how_many(model, tmp_path, capsys):
    _, err, result = _extract(model, tmp_path, capsys, "--text-pair", PAIR, "--max-tokens", "6")
    # by hand, longest first: 6 + 4 words into 6 - 2 special tokens = 4, (6,4) -> (4,4) -> (3,3) -> (2,2)
    assert result.tokens.labels == ["[CLS]", "the", "cat", "a", "dog", "[SEP]"]
    assert len(err) == 1 and err[0].startswith("attnviz: note: 12 tokens truncated to 6 (--max-tokens 6): "), err
    assert "sentence A lost 4 of its 6 tokens, sentence B 2 of its 4" in err[0]


def test_no_cut_no_note(model, tmp_path, capsys):
    _, err, result = _extract(model, tmp_path, capsys, "--max-tokens", "8")
    assert err == [] and len(result.tokens.labels) == 8
