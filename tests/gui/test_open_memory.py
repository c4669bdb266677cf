"""``attnviz open --memory ondemand`` (and dense / auto), as ``extract`` and ``figure`` take it: the window had no
way to keep a long input's maps per head, and ``open`` refused the flag the README's *Long inputs* names.  The run
keeps its maps per head (the sidebar says so) and every head it shows equals the maps of a dense run of the same
request, read straight from the runtime."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from gui_helpers import open_and_wait

from attnviz.cli import build_parser

pytest.importorskip("onnxruntime")


@pytest.mark.parametrize(
    ("memory", "kept"), [("ondemand", "per head, recomputed when shown"), ("dense", "all in memory")]
)
def test_open_memory_keeps_the_maps_as_asked(qtbot, real_window, onnx_dir, memory, kept):
    from attnviz.app.jobs import analyze

    path = onnx_dir["gpt"]
    args = build_parser().parse_args(["open", str(path), "--memory", memory])
    real_window.memory = args.memory  # what `attnviz open` does with the flag
    open_and_wait(qtbot, real_window, path)
    assert real_window.sidebar.values("Run")["maps kept"] == kept
    assert real_window.last_request.mode == memory
    shown = real_window.session.result
    dense = analyze(real_window.session.model, dataclasses.replace(real_window.last_request, mode="dense"))
    assert dense.info["mode"] == "dense"
    for blk, ref in zip(shown.blocks(), dense.blocks()):
        for layer in range(blk.n_layers):
            np.testing.assert_allclose(np.asarray(blk.layer(layer)), np.asarray(ref.layer(layer)), atol=1e-6)


def test_open_refuses_an_unknown_memory_mode(capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["open", "--memory", "lots"])
    assert e.value.code == 2 and "--memory: invalid choice: 'lots'" in capsys.readouterr().err
