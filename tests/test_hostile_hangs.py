"""Issue 24, item 4: files that used to hang a command are refused in one line, in bounded time.

Each command runs as a subprocess under a timeout (a hang fails the test instead of blocking the suite): a FIFO
where a user-folder file is read (the corpus checkpoint, align's sentences, corpus results, a model folder's
config.json) goes through the regular-file guard (core/untrusted.py); a 90-byte Swin ``config.json`` asking for
10¹² blocks is refused by the window layout's bounds (core/windows.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import BOUND_S, run_cli
from onnx_builders import tiny_text_model

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")

REPO = Path(__file__).resolve().parents[1]


def attnviz(*argv, cwd=None) -> tuple[int, str]:
    rc, err = run_cli(*argv, cwd=cwd)
    return rc, err.strip()


def one_line(rc: int, err: str, *words: str) -> None:
    assert rc == 2, err
    assert err.startswith("attnviz: error:") and "\n" not in err and "Traceback" not in err, err
    for w in words:
        assert w.lower() in err.lower(), (w, err)


def test_a_fifo_named_checkpoint_in_the_results_folder(tmp_path):
    model = tiny_text_model(tmp_path / "model.onnx")
    texts = tmp_path / "t.txt"
    texts.write_text("the cat\nthe dog\n")
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "checkpoint.npz")
    rc, err = attnviz("corpus", model, "--texts", texts, "--out", out, "--no-progress", "--workers", "1")
    one_line(rc, err, "checkpoint", "not a regular file")
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.npz"]  # nothing written beside it


def test_a_fifo_as_align_sentences(tmp_path):
    model = tiny_text_model(tmp_path / "model.onnx")
    src, tgt = tmp_path / "a.src", tmp_path / "a.tgt"
    os.mkfifo(src)
    tgt.write_text("the cat\n")
    rc, err = attnviz("align", model, "--src", src, "--tgt", tgt, "--out", tmp_path / "a.out")
    one_line(rc, err, "--src", "not a regular file")
    assert not (tmp_path / "a.out").exists()


def test_a_fifo_named_run_json_in_corpus_results(tmp_path):
    """The window and `corpus` read results folders back; a run.json FIFO is refused (not a results file), not
    waited on."""
    res = tmp_path / "res"
    res.mkdir()
    code = (
        "from attnviz.corpus import output\n"
        "from pathlib import Path\n"
        f"out = Path({str(res)!r})\n"
        "output.write(out, [{'layer': 0, 'head': 0}], [], {'items': 1})\n"
    )
    subprocess.run(
        [sys.executable, "-c", code], check=True, timeout=BOUND_S, env=dict(os.environ, PYTHONPATH=str(REPO))
    )
    (res / "run.json").unlink()
    os.mkfifo(res / "run.json")
    code = (
        "import sys\nfrom attnviz import AttnvizError\nfrom attnviz.corpus import output\n"
        f"try:\n    output.read({str(res)!r})\nexcept AttnvizError as e:\n    sys.exit(str(e))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=BOUND_S,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert done.returncode == 1 and "run.json" in done.stderr, done.stderr  # refused: a results folder without one


@pytest.fixture()
def vit_beside(tmp_path):
    """The demo ViT in a folder of its own, with a 32x32 image to feed it."""
    from PIL import Image

    folder = tmp_path / "m"
    folder.mkdir()
    model = Path(shutil.copy(REPO / "models" / "vit-classification.onnx", folder))
    img = tmp_path / "img.png"
    Image.new("RGB", (32, 32), (200, 10, 10)).save(img)
    return model, img


def test_a_swin_config_asking_for_a_trillion_blocks(vit_beside, tmp_path):
    model, img = vit_beside
    cfg = {"model_type": "swin", "depths": [10**12], "patch_size": 4, "window_size": 7}
    (model.parent / "config.json").write_text(json.dumps(cfg))
    assert len((model.parent / "config.json").read_bytes()) < 100  # the 90-byte file
    rc, err = attnviz("extract", model, "--image", img, "--out", tmp_path / "m.npz")
    one_line(rc, err, "depths", "out of range", "config.json")
    assert not (tmp_path / "m.npz").exists()


def test_a_fifo_named_config_json_beside_a_model(vit_beside, tmp_path):
    """A config.json that is a FIFO is skipped as unreadable (as a missing one is): the ViT runs as itself."""
    model, img = vit_beside
    os.mkfifo(model.parent / "config.json")
    rc, err = attnviz("extract", model, "--image", img, "--out", tmp_path / "m.npz")
    assert rc == 0, err
    assert (tmp_path / "m.npz").is_file()


def test_a_200000_node_graph_is_refused_at_once_not_labelled_for_80_s(tmp_path):
    """Loading, checking and labelling walk every node in Python (80 s at 200,000): past ATTNVIZ_MAX_NODES the
    graph is refused right after parsing, in one line naming the variable."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", [f"t{i - 1}" if i else "x"], [f"t{i}"]) for i in range(200_000)]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4]) for n in ("x", "t199999")]
    g = helper.make_graph(nodes, "long", [io[0]], [io[1]])
    model = tmp_path / "long.onnx"
    model.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    rc, err = attnviz("inspect", model, cwd=tmp_path)
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("attnviz: error:") and "200,000 nodes" in err and "ATTNVIZ_MAX_NODES=200000" in err, err
