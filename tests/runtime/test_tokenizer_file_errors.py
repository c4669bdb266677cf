"""A tokenizer.json that does not load is one plain line (what the file is instead, and the fix), exit 2, in every
path that loads one a user gives: ``extract``, ``corpus``, ``compare``, ``open`` (and the window, in
tests/gui/test_tokenizer_dialog_errors.py), and the tokenizer.json found beside a model.  Never the Rust library's
serde words ("data did not match any variant of untagged enum ModelWrapper", "expected value at line 1 column 1").

Each file is crafted here; the Rust library itself refuses each (checked first), so every case is a real refusal."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bad_tokenizers import CASES, RAW, edited, one_plain_line, real_tokenizer, write_case
from onnx_builders import tiny_text_model

from attnviz import AttnvizError
from attnviz.cli import main
from attnviz.runtime import inputs as ip

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return tiny_text_model(tmp_path_factory.mktemp("m") / "model.onnx")


def test_the_real_tokenizer_loads_and_each_crafted_one_is_refused_by_tokenizers_itself(tmp_path):
    from tokenizers import Tokenizer

    (tmp_path / "real.json").write_text(real_tokenizer())
    assert ip.HFTokenizer.from_file(tmp_path / "real.json").encode("the cat").tokens  # the control loads
    for name in CASES:
        p, _ = write_case(tmp_path, name, f"{name}.json")
        with pytest.raises(Exception):  # tokenizers raises a bare Exception
            Tokenizer.from_file(str(p))


@pytest.mark.parametrize("name", sorted(CASES))
def test_extract_says_what_the_file_is(model, tmp_path, capsys, name):
    tok, words = write_case(tmp_path, name)
    rc = main(["extract", str(model), "--text", "the cat", "--tokenizer", str(tok), "--out", str(tmp_path / "o.npz")])
    err = capsys.readouterr().err
    assert rc == 2
    one_plain_line(err, tok, words)
    assert "save_pretrained" in err and err.strip().endswith("(see --tokenizer)")
    assert not (tmp_path / "o.npz").exists()


@pytest.mark.parametrize("command", ["corpus", "compare"])
def test_corpus_and_compare_say_it_too(model, tmp_path, capsys, command):
    tok, words = write_case(tmp_path, "unknown_model")
    texts = tmp_path / "texts.txt"
    texts.write_text("the cat\nthe dog\n")
    models = [str(model)] if command == "corpus" else [str(model), str(model)]
    args = [command, *models, "--texts", str(texts), "--tokenizer", str(tok), "--out", str(tmp_path / "out")]
    rc = main([*args, "--no-progress"])
    assert rc == 2
    one_plain_line(capsys.readouterr().err, tok, words)


def test_open_says_it_in_one_line(model, tmp_path):
    """``attnviz open MODEL --tokenizer F --screenshot``: the window's message, as the CLI's one line and exit 2."""
    tok, words = write_case(tmp_path, "truncated")
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    r = subprocess.run(
        [sys.executable, "-m", "attnviz", "open", str(model), "--text", "the cat", "--tokenizer", str(tok)]
        + ["--screenshot", str(tmp_path / "s.png")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert r.returncode == 2
    one_plain_line(r.stderr, tok, words)


def test_a_folder_or_an_unreadable_file(model, tmp_path, capsys, monkeypatch):
    folder = tmp_path / "tokenizer.json"
    folder.mkdir()
    rc = main(
        ["extract", str(model), "--text", "the cat", "--tokenizer", str(folder), "--out", str(tmp_path / "o.npz")]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "is a folder" in err and "(see --tokenizer)" in err
    one_plain_line(err, folder, "give a file")

    locked, _ = write_case(tmp_path, "no_merges", "locked.json")
    locked.chmod(0)
    if os.geteuid() == 0:  # root reads a 000 file: the kernel's refusal, as it answers anyone else
        real_open = os.open

        def refuse(path, *a, **k):
            if Path(path) == locked:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
            return real_open(path, *a, **k)

        monkeypatch.setattr(os, "open", refuse)
    rc = main(
        ["extract", str(model), "--text", "the cat", "--tokenizer", str(locked), "--out", str(tmp_path / "o.npz")]
    )
    err = capsys.readouterr().err
    assert rc == 2
    one_plain_line(err, locked, "cannot read it (permission denied)")
    assert "(see --tokenizer)" in err


@pytest.mark.parametrize("name", ["truncated", "unknown_model"])
def test_the_tokenizer_beside_the_model(tmp_path, capsys, name):
    """A model folder's own tokenizer.json: the fix is to replace it (or to give another)."""
    model = tiny_text_model(tmp_path / "model.onnx")
    tok, words = write_case(tmp_path, name, "tokenizer.json")
    rc = main(["extract", str(model), "--text", "the cat", "--out", str(tmp_path / "o.npz")])
    err = capsys.readouterr().err
    assert rc == 2
    one_plain_line(err, tok, words)
    assert "replace it with the tokenizer.json" in err and "(see --tokenizer)" in err


def test_a_tokenizer_in_the_metadata(tmp_path):
    """An embedded tokenizer (attnviz.tokenizer metadata) that tokenizers cannot read: the fix is to re-export."""
    bad = edited(lambda c: c["model"].update(type="Bogus"))
    with pytest.raises(AttnvizError) as raised:
        ip.find_tokenizers(tmp_path / "m.onnx", {"tokenizer": bad})
    msg = str(raised.value)
    assert "m.onnx metadata" in msg and "unknown model type 'Bogus'" in msg and "re-export the model" in msg
    assert raised.value.param == "tokenizer" and not any(r in msg.lower() for r in RAW)


def test_the_undefined_template_token_is_still_named(tmp_path):
    """The one check of attnviz's own (a template naming a special token it does not define): the token is named."""
    cfg = json.loads(real_tokenizer())
    cfg["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "[X]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [],
        "special_tokens": {},
    }
    (tmp_path / "t.json").write_text(json.dumps(cfg))
    with pytest.raises(AttnvizError, match=r"special token '\[X\]' that it does not define"):
        ip.HFTokenizer.from_file(tmp_path / "t.json")
