"""Issue 24 item 2: no read above the model's folder.  A tokenizer_config.json, tokenizer.json or config.json
planted in the folder ABOVE a model's folder changes nothing (position limit, tokens, special tokens); the same
files in a Hugging Face repo above ``REPO/onnx/model.onnx`` (the one sanctioned step up) are used."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from onnx_builders import split_export, tiny_text_model

from attnviz.runtime import ModelSet, open_model
from attnviz.runtime.limits import InputTooLong, PositionLimit
from attnviz.runtime.sidecar import sidecar, sidecar_dirs

TEXT = "the cat sat on the mat"
MODELS = Path(__file__).resolve().parents[2] / "models"


def _plant(folder, max_len: int = 3, eos: int = 7) -> None:
    """The files a planted folder holds: a short position limit, a tokenizer that reads every word as [PAD]
    except 'dog', and a config naming other special tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": max_len}))
    tk = Tokenizer(models.WordLevel({"[PAD]": 0, "dog": 9}, unk_token="[PAD]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.save(str(folder / "tokenizer.json"))
    (folder / "config.json").write_text(json.dumps({"eos_token_id": eos, "bos_token_id": 1, "pad_token_id": 0}))


@pytest.fixture
def layouts(tmp_path):
    """The same model in a clean folder, in a folder whose parent holds planted files, and in REPO/onnx/ with
    the files in REPO/ (for each: a text model with vocabulary metadata, a causal one without metadata)."""
    out = {}
    for name, folder in (
        ("clean", tmp_path / "clean"),
        ("planted", tmp_path / "planted" / "model"),
        ("hub", tmp_path / "repo" / "onnx"),
    ):
        folder.mkdir(parents=True)
        tiny_text_model(folder / "model.onnx")
        tiny_text_model(folder / "lm.onnx", metadata=False, causal=True, classifier=False)
        out[name] = folder
    _plant(tmp_path / "planted")
    _plant(tmp_path / "repo")
    return out


def test_sidecar_dirs_are_the_folder_or_a_hub_repo_above_onnx(tmp_path):
    assert sidecar_dirs(tmp_path / "a" / "model.onnx") == [tmp_path / "a"]
    assert sidecar_dirs(tmp_path / "repo" / "onnx" / "model.onnx") == [tmp_path / "repo" / "onnx", tmp_path / "repo"]
    assert sidecar_dirs(tmp_path / "repo" / "onnx2" / "model.onnx") == [tmp_path / "repo" / "onnx2"]  # exactly onnx
    (tmp_path / "repo" / "onnx").mkdir(parents=True)
    (tmp_path / "repo" / "config.json").write_text("{}")
    assert sidecar(tmp_path / "repo" / "onnx" / "m.onnx", "config.json") == tmp_path / "repo" / "config.json"
    (tmp_path / "repo" / "onnx" / "config.json").write_text("{}")  # the model's own folder first
    assert sidecar(tmp_path / "repo" / "onnx" / "m.onnx", "config.json") == tmp_path / "repo" / "onnx" / "config.json"


def test_files_above_the_folder_change_nothing(layouts):
    clean = open_model(layouts["clean"] / "model.onnx", provider="cpu")
    planted = open_model(layouts["planted"] / "model.onnx", provider="cpu")
    assert clean.position_limit is None and planted.position_limit is None  # the planted 3 is not read
    a, b = clean.analyze(text=TEXT), planted.analyze(text=TEXT)  # 6 words: over the planted limit, still runs
    assert b.tokens.labels == a.tokens.labels == ["[CLS]", *TEXT.split(), "[SEP]"]  # the metadata vocabulary's
    lm_clean = open_model(layouts["clean"] / "lm.onnx", provider="cpu")
    lm_planted = open_model(layouts["planted"] / "lm.onnx", provider="cpu")
    assert lm_planted.tokenizers == lm_clean.tokenizers == (None, None)  # the planted tokenizer.json is not read
    assert "special" not in lm_planted.meta and "special" not in lm_clean.meta  # nor the planted config.json


def test_files_in_a_hub_repo_above_onnx_are_used(layouts):
    m = open_model(layouts["hub"] / "model.onnx", provider="cpu")
    assert m.position_limit == PositionLimit(3, "tokenizer_config.json model_max_length")
    with pytest.raises(InputTooLong, match="6 tokens; this model's positions stop at 3"):
        m.analyze(text=TEXT)
    assert m.analyze(text="the dog").tokens.labels == ["[PAD]", "dog"]  # REPO/tokenizer.json, before the vocabulary
    lm = open_model(layouts["hub"] / "lm.onnx", provider="cpu")
    assert lm.meta["special"] == {"eos": 7, "bos": 1, "pad": 0}  # REPO/config.json


def test_an_export_folder_reads_its_own_folder_not_the_one_above(tmp_path):
    """A folder model (ModelSet) read tokenizer_config.json from the folder ABOVE it; now its encoder file's
    sidecars are read, in its own folder (and in a Hub repo above onnx/)."""
    export = split_export(MODELS / "translation.onnx", tmp_path / "export")
    base = open_model(export, provider="cpu")
    assert isinstance(base, ModelSet) and base.position_limit is None  # no metadata, no learned position table
    assert base.tokenizers == (None, None) and base.meta == {"special": {}}
    _plant(tmp_path)  # beside the export folder, in the folder above it
    planted = open_model(export, provider="cpu")
    assert planted.position_limit is None and planted.tokenizers == (None, None) and planted.meta == base.meta
    hub = tmp_path / "repo" / "onnx"
    shutil.copytree(export, hub)
    _plant(tmp_path / "repo", max_len=4)
    ms = open_model(hub, provider="cpu")
    assert ms.position_limit == PositionLimit(4, "tokenizer_config.json model_max_length")
    assert ms.meta["special"] == {"eos": 7, "bos": 1, "pad": 0} and ms.tokenizers[0] is not None


# a sidecar joined to a folder by hand ("folder / 'config.json'") bypasses the one guard; training reads a Hugging
# Face model folder it was given (export-hf), not files beside an ONNX model
JOIN = re.compile(r'/\s*"(?:tokenizer|tokenizer_config|config|preprocessor_config|generation_config)\.json"')


def test_every_sidecar_read_goes_through_the_guard():
    assert JOIN.search('p = model_path.parent.parent / "tokenizer_config.json"')  # the check can fail
    assert not JOIN.search('f = sidecar(model_file, "tokenizer_config.json")')
    root = Path(__file__).resolve().parents[2] / "attnviz"
    found = [
        f"{p.relative_to(root)}: {line.strip()}"
        for p in sorted(root.rglob("*.py"))
        if "training" not in p.relative_to(root).parts and p.name != "sidecar.py"
        for line in p.read_text(encoding="utf-8").splitlines()
        if JOIN.search(line)
    ]
    assert found == [], "find sidecar files with attnviz.runtime.sidecar.sidecar():\n" + "\n".join(found)
