import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from planted import corpus_lines, planted_model


@pytest.fixture(scope="session")
def planted(tmp_path_factory):
    """(model path, corpus .txt path) of the planted-roles encoder."""
    d = tmp_path_factory.mktemp("planted")
    texts = d / "corpus.txt"
    texts.write_text("\n".join(corpus_lines(40)) + "\n")
    return planted_model(d / "planted.onnx"), texts


@pytest.fixture(scope="session")
def bible(tmp_path_factory):
    """12 held-out Greek -> English verses (the shipped translation demo's own data), as .jsonl."""
    import json

    from attnviz.training import data_translation as dt

    pairs = [p for p in dt.split_pairs(dt.load_bible()).test if len(p.src) <= 14][:12]
    f = tmp_path_factory.mktemp("bible") / "verses.jsonl"
    f.write_text(
        "".join(json.dumps({"text": " ".join(p.src), "en": p.tgt_text or " ".join(p.tgt)}) + "\n" for p in pairs)
    )
    return f
