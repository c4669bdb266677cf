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
    assert run["maps kept"] == "all in memory"  # what `--memory dense` means, with no flag the window lacks
    assert run["session set-up (all maps)"].endswith(" ms")
    assert run["image preprocessing"].startswith("0.5 (mean 0.5/0.5/0.5")
    assert not [k for k in run if "_" in k or k in ("mode", "session dense")], list(run)


def test_run_facts_outside_the_window():
    assert run_fact("loop_cache", "numpy") == ("generation cache", "host memory")
    assert run_fact("loop_cache", "cuda") == ("generation cache", "GPU memory")
    assert run_fact("mode", "ondemand") == ("maps kept", "per head, recomputed when shown")
    assert run_fact("generation", "full re-run") == ("generation", "full re-run")  # already plain words: kept
    assert run_fact("some_new_fact", 3) == ("some new fact", 3)  # not named here: the key, readable


def test_a_long_run_note_is_shown_whole(qtbot, window):
    """A note ends in its fix ("…; choose ImageNet or CLIP"): it was cut at 120 characters, the fix with it."""
    import numpy as np

    from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis

    note = (
        "image normalised with the 0.5 preset (mean/std 0.5/0.5): the model's metadata has no image statistics; "
        "choose ImageNet or CLIP under normalise if the model was trained with them"
    )
    assert len(note) > 120
    m = np.full((1, 2, 3, 3), 1 / 3, np.float32)
    result = AttentionResult(
        [DenseMap(m)],
        [SiteInfo("encoder", "self", 0, 2, "/l0/Softmax", "softmax")],
        tokens=TokenAxis(["a", "b", "c"], [False] * 3),
        info={"provider": "synthetic", "notes": [note]},
    )
    window._show_result(result)
    assert window.sidebar.values("Run")["notes"] == note
