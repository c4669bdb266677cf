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
