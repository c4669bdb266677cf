"""The Model sidebar's Run section names the engine's run facts in a researcher's words: no "mode dense",
"session dense", "loop_cache numpy" or underscored keys ("image_preproc…" was cut in its column)."""

from __future__ import annotations

from pathlib import Path

from gui_helpers import open_and_wait

from attnviz.app.run_facts import run_fact

MODELS = Path(__file__).resolve().parents[2] / "models"


def test_the_run_section_speaks_the_users_words(qtbot, real_window):
    w = real_window
    open_and_wait(qtbot, w, MODELS / "vit-classification.onnx")
    run = w.sidebar.values("Run")
    assert run["maps kept"] == "all in memory (--memory dense)"  # what `--memory dense` means, by the flag's name
    assert run["session set-up (all maps)"].endswith(" ms")
    assert run["image preprocessing"].startswith("0.5 (mean 0.5/0.5/0.5")
    assert not [k for k in run if "_" in k or k in ("mode", "session dense")], list(run)


def test_run_facts_outside_the_window():
    assert run_fact("loop_cache", "numpy") == ("generation cache", "host memory")
    assert run_fact("loop_cache", "cuda") == ("generation cache", "GPU memory")
    assert run_fact("mode", "ondemand") == ("maps kept", "per head, recomputed when shown (--memory ondemand)")
    assert run_fact("generation", "full re-run") == ("generation", "full re-run")  # already plain words: kept
    assert run_fact("some_new_fact", 3) == ("some new fact", 3)  # not named here: the key, readable
