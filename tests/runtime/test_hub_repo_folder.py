"""A Hub repository opens as its folder: ``REPO/`` with the export in ``REPO/onnx/`` (and config, tokenizer,
preprocessor in ``REPO/``) opens what ``REPO/onnx`` holds, reading the files in ``REPO/`` as the one sanctioned step
up; a folder with no ``onnx/`` (or another name) is still refused in one line."""

from __future__ import annotations

import json

import pytest
from onnx_builders import tiny_text_model

from attnviz import AttnvizError
from attnviz.cli import main
from attnviz.runtime import AttentionModel, open_model


def _tokenizer(folder) -> None:
    """A word-level tokenizer that knows 'dog' and 'cat' (ids 9 and 4), everything else [PAD]."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tk = Tokenizer(models.WordLevel({"[PAD]": 0, "cat": 4, "dog": 9}, unk_token="[PAD]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.save(str(folder / "tokenizer.json"))
    (folder / "config.json").write_text(json.dumps({"eos_token_id": 7, "bos_token_id": 1, "pad_token_id": 0}))


def test_repo_folder_opens_its_onnx_export_with_the_repos_tokenizer(tmp_path):
    repo = tmp_path / "tiny-lm"
    (repo / "onnx").mkdir(parents=True)
    tiny_text_model(repo / "onnx" / "model.onnx", metadata=False, causal=True, classifier=False)
    _tokenizer(repo)
    m = open_model(repo, provider="cpu")
    assert isinstance(m, AttentionModel) and m.path == repo / "onnx" / "model.onnx"
    r = m.analyze(text="dog cat")
    assert r.tokens.labels == ["dog", "cat"]  # REPO/tokenizer.json, read because the model sits in REPO/onnx/
    assert m.meta["special"]["eos"] == 7  # REPO/config.json
    direct = open_model(repo / "onnx" / "model.onnx", provider="cpu").analyze(text="dog cat")
    assert (r.maps[0].array() == direct.maps[0].array()).all()


def test_only_a_folder_named_onnx_is_looked_into(tmp_path, capsys):
    repo = tmp_path / "repo"
    (repo / "export").mkdir(parents=True)
    tiny_text_model(repo / "export" / "model.onnx")
    with pytest.raises(AttnvizError, match="no .onnx file in this folder"):
        open_model(repo)
    (repo / "onnx").mkdir()  # an empty onnx/ is no export either
    with pytest.raises(AttnvizError, match="no .onnx file in this folder"):
        open_model(repo)
    tiny_text_model(repo / "onnx" / "a.onnx")
    tiny_text_model(repo / "onnx" / "b.onnx")
    assert main(["inspect", str(repo)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{repo / 'onnx'}: holds 2 models (a.onnx, b.onnx)" in err
