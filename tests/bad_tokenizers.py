"""Crafted tokenizer.json files that do not load, and the plain words attnviz's one line must hold for each
(tests/runtime/test_tokenizer_file_errors.py, tests/gui/test_tokenizer_dialog_errors.py)."""

from __future__ import annotations

import json
from pathlib import Path

# serde's and Python json's own words: none of them may reach the user
RAW = (
    "untagged enum",
    "invalid type",
    "expected `",
    "expected value",
    "expecting value",
    "missing field",
    " at line 1 column",
)


def real_tokenizer() -> str:
    """A BPE tokenizer trained here, as ``tokenizer.save`` writes it (pretty-printed, several kB)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    t = Tokenizer(models.BPE(unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    words = ["the cat sat on the mat", "a dog ran far away from the big house"] * 50
    t.train_from_iterator(words, trainers.BpeTrainer(vocab_size=120, special_tokens=["[UNK]", "[PAD]"]))
    return t.to_str(pretty=True)


def edited(edit) -> str:
    cfg = json.loads(real_tokenizer())
    edit(cfg)
    return json.dumps(cfg)


# name -> (the file's text or bytes, words its line must hold)
CASES = {
    "empty": ("", "the file is empty"),
    "not_json": ("tokenizer = BPE(vocab)\n", "not json, malformed at line 1, column 1"),
    "list": ("[1, 2, 3]", "json holding a list"),
    "wrong_shape": ('{"name": "x", "items": [1, 2]}', "no 'model' section"),
    "config_json": ('{"architectures": ["BertModel"], "model_type": "bert"}', "a model's config.json"),
    "tokenizer_config": ('{"tokenizer_class": "BertTokenizer", "model_max_length": 512}', "tokenizer_config.json"),
    "truncated": (lambda: real_tokenizer()[:1500], "cut short"),
    "vocab_txt": ("[PAD]\n[UNK]\n[CLS]\nthe\ncat\n##s\n", "a vocab.txt"),
    "binary": (b"\x0a\x8f\xff\x00\x10sentencepiece", "binary, not text"),
    "unknown_model": (lambda: edited(lambda c: c["model"].update(type="Bogus")), "unknown model type 'bogus'"),
    "no_merges": (lambda: edited(lambda c: c["model"].pop("merges")), "bpe model has no 'merges'"),
    "unknown_pre_tokenizer": (
        lambda: edited(lambda c: c.update(pre_tokenizer={"type": "Fancy"})),
        "unknown pre_tokenizer type 'fancy'",
    ),
    "version": (lambda: edited(lambda c: c.update(version="9.0")), "its version '9.0'"),
}


def write_case(folder: Path, name: str, filename: str = "tok.json") -> tuple[Path, str]:
    content, words = CASES[name]
    content = content() if callable(content) else content
    p = folder / filename
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    return p, words


def one_plain_line(err: str, path: Path, words: str) -> None:
    err = err.strip()
    assert err.startswith("attnviz: error:") and "\n" not in err and "Traceback" not in err, err
    assert str(path) in err and words in err.lower(), (words, err)
    assert not any(r in err.lower() for r in RAW), err
