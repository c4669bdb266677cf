"""The first map's parent process imports only what a text model's run needs: generation, speech, audio and image
patch naming are imported where a request needs them (runtime/analyze.py, builders.py, folder.py, model.py,
model_loop.py), so ``attnviz extract`` on a text model loads none of them (~5 ms of a ~0.25 s parent,
bench/RESULTS.md "first22b").  Run in a fresh interpreter: what the command imported is the point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "sequence-classification.onnx"

# never on a text model's extract path: each is imported by the request that needs it
NOT_FOR_TEXT = (
    "attnviz.runtime.generate",  # --generate, --beams
    "attnviz.runtime.speech",  # a speech decoder's forced prompt
    "attnviz.runtime.audio",  # --audio, an audio encoder's frames
    "attnviz.runtime.audio_specs",
    "attnviz.runtime.waveform",
    "attnviz.runtime.adapters",  # an image's patches as key names
    "attnviz.core.patch_names",
)

RUN = """
import json, sys
from attnviz.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(m for m in sys.modules if m.startswith("attnviz"))}))
"""


def _extract(*argv) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-c", RUN, "extract", str(MODEL), *map(str, argv)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_text_models_extract_imports_no_generation_speech_audio_or_patch_module(tmp_path):
    feeds = tmp_path / "feeds.npz"
    graph = onnx.load(str(MODEL), load_external_data=False).graph
    ids = np.array([[5, 6, 7, 8, 9]], dtype=np.int64)
    np.savez(feeds, **{i.name: (ids if "ids" in i.name else np.ones_like(ids)) for i in graph.input})
    for given in (["--inputs", feeds], ["--text", "1 2 3 4 5 6 7"]):
        seen = _extract(*given, "--out", tmp_path / "maps.npz")
        assert seen["code"] == 0
        mods = set(seen["modules"])
        # the run went through the engine and the input builders (else the absence below would say nothing)
        assert {"attnviz.runtime.analyze", "attnviz.runtime.builders", "attnviz.runtime.model"} <= mods, given
        assert not mods & set(NOT_FOR_TEXT), (given, sorted(mods & set(NOT_FOR_TEXT)))
        assert len(np.load(tmp_path / "maps.npz").files) > 1
