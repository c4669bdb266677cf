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


def test_a_corpus_results_folder_is_named_and_sent_to_open(tmp_path, capsys):
    """`attnviz corpus --out DIR` writes heads.parquet and run.json, no model: the folder is results for the window."""
    from attnviz.corpus import output

    results = tmp_path / "corpus out"
    results.mkdir()
    for name in (output.HEADS, output.EXAMPLES, output.RUN):
        (results / name).write_bytes(b"")
    assert main(["inspect", str(results)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"attnviz: error: {results}: an attnviz corpus results folder (heads.parquet, run.json), not a model; "
        f"attnviz open '{results}' shows it"
    ]
    (results / output.HEADS).unlink()  # half a results folder is just a folder without a model
    with pytest.raises(AttnvizError, match="no .onnx file in this folder"):
        open_model(results)


def test_the_corpus_files_are_the_ones_the_corpus_writes():
    from attnviz.corpus import output
    from attnviz.runtime.folder import CORPUS_FILES

    assert CORPUS_FILES == (output.HEADS, output.RUN)  # the files a results folder is known by
