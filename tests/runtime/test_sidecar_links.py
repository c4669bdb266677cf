"""A sidecar that is a link: read where a Hugging Face cache snapshot keeps its files (``REPO/snapshots/REV/x ->
../../blobs/SHA``), refused in one line before any byte of its target is read anywhere else (attnviz.core.links).

The proof that nothing is read is an audit hook on ``open``: it records the real location of every path opened
(a link is opened by its own name, so the hook resolves it) and the tests assert the secret's is never among them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx_builders import split_export, tiny_text_model

from attnviz import AttnvizError
from attnviz.cli import main
from attnviz.core.links import hub_blobs, readable_beside
from attnviz.runtime import ModelSet, open_model

MODELS = Path(__file__).resolve().parents[2] / "models"
TEXT = "the dog sat"

_OPENED: list[str] | None = None  # the real locations opened while a test records (None: not recording)


def _hook(event: str, args: tuple) -> None:
    if _OPENED is not None and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED.append(os.path.realpath(os.fsdecode(args[0])))


sys.addaudithook(_hook)  # hooks cannot be removed: this one records only inside `recording`


@pytest.fixture
def opened():
    global _OPENED
    _OPENED = []
    try:
        yield _OPENED
    finally:
        _OPENED = None


def _tokenizer_json(vocab: dict) -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tk = Tokenizer(models.WordLevel(vocab, unk_token="[PAD]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    return tk.to_str()


TOKENIZER = _tokenizer_json({"[PAD]": 0, "the": 3, "dog": 9})  # reads "sat" as [PAD]: the folder's tokenizer
CONFIG = json.dumps({"eos_token_id": 7, "bos_token_id": 1, "pad_token_id": 0})


def _blob(repo: Path, data: bytes) -> str:
    """``data`` stored as the cache stores it: REPO/blobs/SHA256; returns the blob's name."""
    name = hashlib.sha256(data).hexdigest()
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    (repo / "blobs" / name).write_bytes(data)
    return name


def hub_cache(root: Path, model: Path, sub: str = "onnx") -> Path:
    """A Hugging Face cache repository as huggingface_hub lays it out: every file of snapshot REV a relative link
    into REPO/blobs/, the ONNX file in ``sub`` (REPO/snapshots/REV/onnx/model.onnx), tokenizer and config in the
    snapshot's root.  Returns the snapshot folder (what a researcher opens)."""
    repo = root / "hub" / "models--org--tiny"
    snap = repo / "snapshots" / "0123abcd"
    (snap / sub).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    up = "../" * (2 + len(Path(sub).parts))
    (snap / sub / "model.onnx").symlink_to(up + "blobs/" + _blob(repo, model.read_bytes()))
    for name, text in (("tokenizer.json", TOKENIZER), ("config.json", CONFIG)):
        (snap / name).symlink_to("../../blobs/" + _blob(repo, text.encode()))
    return snap


def _lm(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return tiny_text_model(path, metadata=False, causal=True, classifier=False)


def test_a_hub_cache_snapshot_opens_with_its_linked_tokenizer_and_config(tmp_path, opened):
    src = _lm(tmp_path / "src" / "model.onnx")
    snap = hub_cache(tmp_path, src)
    m = open_model(snap, provider="cpu")
    r = m.analyze(text=TEXT)
    assert r.tokens.labels == ["the", "dog", "[PAD]"]  # the linked tokenizer.json's words, not a vocabulary
    assert m.meta["special"] == {"eos": 7, "bos": 1, "pad": 0}  # the linked config.json
    blobs = snap.parents[1] / "blobs"
    assert any(Path(p).parent == blobs.resolve() for p in opened)  # the reads went through the links
    # the same files copied into a plain folder give the same maps (the links change nothing)
    plain = tmp_path / "plain"
    (plain / "onnx").mkdir(parents=True)
    shutil.copy(src, plain / "onnx" / "model.onnx")
    (plain / "tokenizer.json").write_text(TOKENIZER)
    (plain / "config.json").write_text(CONFIG)
    want = open_model(plain, provider="cpu").analyze(text=TEXT)
    assert want.tokens.labels == r.tokens.labels
    np.testing.assert_array_equal(r.maps[0].array(), want.maps[0].array())


def test_an_optimum_export_in_the_cache_opens_as_one_model(tmp_path):
    """An encoder–decoder export (encoder_model.onnx, decoder_model.onnx) whose files are all links into blobs."""
    export = split_export(MODELS / "translation.onnx", tmp_path / "export")
    repo = tmp_path / "hub" / "models--org--t5"
    snap = repo / "snapshots" / "feed"
    snap.mkdir(parents=True)
    for f in sorted(export.iterdir()):
        (snap / f.name).symlink_to("../../blobs/" + _blob(repo, f.read_bytes()))
    (snap / "config.json").symlink_to("../../blobs/" + _blob(repo, CONFIG.encode()))
    m = open_model(snap, provider="cpu")
    assert isinstance(m, ModelSet) and m.meta["special"] == {"eos": 7, "bos": 1, "pad": 0}


def test_the_policy_on_paths(tmp_path):
    snap = hub_cache(tmp_path, _lm(tmp_path / "src.onnx"))
    repo = snap.parents[1]
    assert hub_blobs(snap) == repo.resolve() / "blobs" and hub_blobs(snap / "onnx") == repo.resolve() / "blobs"
    assert hub_blobs(repo / "snapshots") is None and hub_blobs(tmp_path) is None  # no revision folder: no repo
    assert readable_beside(snap / "tokenizer.json", snap) == snap / "tokenizer.json"
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "tokenizer.json").symlink_to(repo / "blobs" / os.readlink(snap / "tokenizer.json").split("/")[-1])
    with pytest.raises(AttnvizError, match="outside the model's folder"):  # blobs count for a snapshot only
        readable_beside(plain / "tokenizer.json", plain)
    other = tmp_path / "hub" / "models--org--other" / "snapshots" / "r"
    other.mkdir(parents=True)
    (other / "tokenizer.json").symlink_to(snap / "tokenizer.json")  # another repository's blob
    with pytest.raises(AttnvizError, match="outside the model's folder"):
        readable_beside(other / "tokenizer.json", other)
    named = tmp_path / "repo-like" / "snapshots" / "r"  # the layout, but not a cache repository's name
    named.mkdir(parents=True)
    (named.parents[1] / "blobs").mkdir()
    (named.parents[1] / "blobs" / "x").write_text("{}")
    (named / "config.json").symlink_to("../../blobs/x")
    with pytest.raises(AttnvizError, match="outside the model's folder"):
        readable_beside(named / "config.json", named)


def _secret(tmp_path: Path) -> Path:
    """A file outside the model's folder that WOULD change the result if read: a valid tokenizer / config."""
    s = tmp_path / "secret" / "secret.json"
    s.parent.mkdir()
    s.write_text(_tokenizer_json({"[PAD]": 0, "secret": 1}))
    return s


def _hostile_links(tmp_path: Path, secret: Path) -> dict:
    """name -> (folder to open, the link's path): each a sidecar linking out of the model's folder."""
    out = {}
    plain = tmp_path / "plain"
    plain.mkdir()
    _lm(plain / "model.onnx")
    (plain / "tokenizer.json").symlink_to(secret)  # absolute, as tokenizer.json -> /etc/passwd
    out["absolute"] = (plain, plain / "tokenizer.json")
    rel = tmp_path / "a" / "b"
    rel.mkdir(parents=True)
    _lm(rel / "model.onnx")
    (rel / "config.json").symlink_to("../../secret/secret.json")  # ../../secret
    out["relative"] = (rel, rel / "config.json")
    own = tmp_path / "own"
    own.mkdir()
    _lm(own / "model.onnx")
    (own / "model.tokenizer.json").symlink_to(secret)  # MODEL.tokenizer.json, the file's own tokenizer
    out["model.tokenizer.json"] = (own, own / "model.tokenizer.json")
    snap = hub_cache(tmp_path / "c1", _lm(tmp_path / "c1.onnx"))
    (snap / "tokenizer_config.json").symlink_to(secret)  # in a snapshot, but not into its blobs
    out["snapshot, out of blobs"] = (snap, snap / "tokenizer_config.json")
    snap2 = hub_cache(tmp_path / "c2", _lm(tmp_path / "c2.onnx"))
    repo2 = snap2.parents[1]
    (repo2 / "blobs" / "planted").symlink_to(secret)  # a link inside blobs that leaves the repository
    (snap2 / "generation_config.json").symlink_to("../../blobs/planted")
    out["snapshot, blob links out"] = (snap2, snap2 / "generation_config.json")
    return out


CASES = ["absolute", "relative", "model.tokenizer.json", "snapshot, out of blobs", "snapshot, blob links out"]


@pytest.mark.parametrize("case", CASES)
def test_a_link_out_of_the_folder_is_refused_before_its_target_is_read(tmp_path, opened, case):
    secret = _secret(tmp_path)
    folder, link = _hostile_links(tmp_path, secret)[case]
    opened.clear()  # (the secret was written just now)
    with pytest.raises(AttnvizError) as e:
        open_model(folder, provider="cpu").analyze(text=TEXT)
    msg = str(e.value)
    assert (
        "\n" not in msg
        and str(link) in msg
        and str(secret.resolve()) in msg
        and "copy the file itself into the folder" in msg
    )
    assert str(secret.resolve()) not in opened  # not one byte of it: the audit hook saw no open of the target


@pytest.mark.parametrize("command", ["inspect", "extract", "corpus"])
def test_the_cli_on_a_hub_snapshot_and_on_a_link_out(tmp_path, capsys, opened, command):
    snap = hub_cache(tmp_path, _lm(tmp_path / "src.onnx"))
    texts = tmp_path / "texts.txt"
    texts.write_text("the dog\nthe cat sat\n")
    extra = {
        "inspect": [],
        "extract": ["--text", TEXT, "--out", str(tmp_path / "o.npz")],
        "corpus": ["--texts", str(texts), "--out", str(tmp_path / "corpus"), "--no-progress"],
    }[command]
    assert main([command, str(snap), *extra]) == 0, capsys.readouterr().err
    capsys.readouterr()
    secret = _secret(tmp_path)
    folder, link = _hostile_links(tmp_path, secret)["relative" if command == "inspect" else "absolute"]
    extra = [a.replace("o.npz", "o2.npz").replace(str(tmp_path / "corpus"), str(tmp_path / "c2")) for a in extra]
    opened.clear()
    assert main([command, str(folder), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnviz: error:") and "\n" not in err, err
    assert str(link) in err and str(secret.resolve()) in err and "copy the file itself into the folder" in err
    assert str(secret.resolve()) not in opened


def test_the_model_file_itself_may_be_a_link_anywhere(tmp_path):
    """The user named it: a model file linked from elsewhere opens, with the sidecars of the folder it is named in."""
    src = _lm(tmp_path / "elsewhere" / "real.onnx")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "model.onnx").symlink_to(src)
    (mine / "tokenizer.json").write_text(TOKENIZER)
    assert open_model(mine / "model.onnx", provider="cpu").analyze(text=TEXT).tokens.labels == ["the", "dog", "[PAD]"]


def test_a_folders_model_file_linking_out_is_refused(tmp_path, opened):
    """A folder was named, not the files in it: an export file linking out of the folder is refused unread."""
    export = split_export(MODELS / "translation.onnx", tmp_path / "export")
    outside = tmp_path / "outside.onnx"
    (export / "decoder_model.onnx").rename(outside)
    (export / "decoder_model.onnx").symlink_to(outside)
    with pytest.raises(AttnvizError, match="copy the file itself into the folder"):
        open_model(export, provider="cpu")
    assert str(outside.resolve()) not in opened


def test_export_hf_refuses_a_source_folder_linking_out_unread(tmp_path, capsys, opened):
    """export-hf's input folder: transformers would read every file in it; a link out is refused before any is."""
    secret = _secret(tmp_path)
    src = tmp_path / "hf"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (src / "model.safetensors").write_bytes(b"\0" * 16)
    (src / "tokenizer.json").symlink_to(secret)
    opened.clear()
    assert main(["export-hf", str(src), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(src / "tokenizer.json") in err and "copy the file itself into the folder" in err
    assert str(secret.resolve()) not in opened and not (tmp_path / "out").exists()


def test_a_hub_cache_model_with_external_data_says_to_copy_the_snapshot(tmp_path, capsys):
    """model.onnx and model.onnx_data both links into blobs: onnxruntime (1.32) refuses external data whose real
    path leaves the model's folder, so the one line says to copy the snapshot; the copy opens as the plain folder."""
    import onnx

    plain = tmp_path / "plain"
    plain.mkdir()
    src = tiny_text_model(plain / "model.onnx", d=128, metadata=False, causal=True, classifier=False)
    onnx.save(onnx.load(str(src)), str(src), save_as_external_data=True, location="model.onnx_data", size_threshold=0)
    repo = tmp_path / "hub" / "models--org--ext"
    snap = repo / "snapshots" / "r1"
    (snap / "onnx").mkdir(parents=True)
    for name in ("model.onnx", "model.onnx_data"):
        (snap / "onnx" / name).symlink_to("../../../blobs/" + _blob(repo, (plain / name).read_bytes()))
    assert main(["inspect", str(snap)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'model.onnx_data'" in err and "cp -rL" in err, err
    copy = tmp_path / "copy"
    shutil.copytree(snap, copy, symlinks=False)  # what cp -rL does
    got = open_model(copy, provider="cpu").run({"input_ids": np.array([[3, 9, 4]])}, mode="dense")
    want = open_model(src, provider="cpu").run({"input_ids": np.array([[3, 9, 4]])}, mode="dense")
    np.testing.assert_array_equal(got.maps[0].array(), want.maps[0].array())
