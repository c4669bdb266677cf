"""open_model on folders: what a folder without an optimum encoder/decoder pair opens as, or why not."""

import pytest
from onnx_builders import tiny_text_model

from attnviz import AttnvizError
from attnviz.cli import main
from attnviz.runtime import AttentionModel, open_model


def test_folder_with_one_model_opens_that_file(tmp_path):
    tiny_text_model(tmp_path / "classifier.onnx")
    m = open_model(tmp_path, provider="cpu")
    assert isinstance(m, AttentionModel) and m.path == tmp_path / "classifier.onnx"


def test_folder_errors_name_the_problem_and_the_fix(tmp_path, capsys):
    with pytest.raises(AttnvizError, match="no .onnx file in this folder"):
        open_model(tmp_path)
    tiny_text_model(tmp_path / "a.onnx")
    tiny_text_model(tmp_path / "b.onnx")
    with pytest.raises(AttnvizError, match=r"holds 2 models \(a.onnx, b.onnx\).*give one of the files"):
        open_model(tmp_path)
    assert main(["inspect", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnviz: error:") and err.count("\n") == 1
