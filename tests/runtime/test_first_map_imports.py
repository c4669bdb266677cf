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


# `attnviz CMD` as the console script runs it (main(leave=True): the process's last act), with a witness whose
# __del__ runs only in the interpreter's teardown (the clearing of __main__'s globals)
LEAVING = """
import sys
class Witness:
    def __del__(self):
        sys.__stderr__.write("teardown ran\\n")
witness = Witness()
from attnviz.cli import main
sys.exit(main(sys.argv[2:], leave=sys.argv[1] == "leave"))
"""


def _script(how: str, *argv) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-c", LEAVING, how, *map(str, argv)], env=env, capture_output=True, text=True, timeout=180
    )


def test_extract_and_inspect_end_without_the_teardown_their_output_whole_and_errors_unchanged(tmp_path):
    out = tmp_path / "maps.npz"
    done = _script("leave", "extract", MODEL, "--text", "1 2 3 4 5", "--out", out)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "teardown ran" not in done.stderr  # ended by os._exit once the exit handlers ran
    assert done.stdout.startswith(f"wrote {out}:")  # the piped (block-buffered) stdout was flushed first
    with np.load(out) as z:
        assert any(k.startswith("attn_") for k in z.files) and "info" in z.files

    inspected = _script("leave", "inspect", MODEL, "--json")
    assert inspected.returncode == 0 and "teardown ran" not in inspected.stderr
    assert json.loads(inspected.stdout)["probed"] is True  # the whole JSON, flushed

    # a refused command: the same exit code and message as with the teardown (a library caller's main)
    for argv in (
        ["extract", MODEL, "--text", "1 2", "--out", tmp_path / "maps.txt"],
        ["inspect", tmp_path / "no.onnx"],
    ):
        left, stayed = _script("leave", *argv), _script("stay", *argv)
        assert "teardown ran" in stayed.stderr and "teardown ran" not in left.stderr
        assert left.returncode == stayed.returncode == 2
        assert left.stderr == stayed.stderr.replace("teardown ran\n", "") and left.stderr.count("\n") == 1
