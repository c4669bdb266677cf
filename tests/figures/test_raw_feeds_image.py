"""`attnviz figure --view image` on maps saved from a vision–language model run on raw feeds (`extract --inputs`):
the feeds hold the pixel values the model took, not a picture, so the saved result has the attention over the
patches but nothing to draw it on.  The command says so in one line and names the command that draws it -- and that
command, as printed (PATH and PROMPT filled in), writes the figure."""

from __future__ import annotations

import shlex

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")
pytest.importorskip("transformers")

PROMPT = "<s> <image> a photo of the cat"


def test_raw_feeds_maps_say_why_and_the_printed_command_draws_it(llava_repo, tmp_path, capsys):
    import vlm_models as vm
    from PIL import Image

    from attnviz.cli import main
    from attnviz.runtime import builders as bd
    from attnviz.runtime import open_model
    from attnviz.runtime.request import AnalyzeRequest

    picture = tmp_path / "cat.png"
    Image.fromarray((np.random.default_rng(4).random((32, 32, 3)) * 255).astype(np.uint8)).save(picture)
    # the raw feeds a researcher would bring: the pixel values and ids the model takes for this image and prompt
    m = open_model(llava_repo, provider="cpu")
    prep = bd.prepare(m, AnalyzeRequest(text=PROMPT, image=str(picture)))
    ids = np.asarray(prep.prompts, np.int64)
    assert int((ids == vm.IMAGE_TOKEN).sum()) == vm.N_IMAGE
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, pixel_values=prep.feeds["pixel_values"], input_ids=ids, attention_mask=np.ones_like(ids))
    maps = tmp_path / "maps.npz"
    assert main(["extract", str(llava_repo), "--inputs", str(feeds), "--out", str(maps)]) == 0
    capsys.readouterr()

    out = tmp_path / "fig.png"
    assert main(["figure", "--maps", str(maps), "--view", "image", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and not out.exists()
    assert "raw feeds" in err and "this result has none" not in err  # why, not just "none"
    command = err.split("image file, ", 1)[1]
    argv = [PROMPT if a == "PROMPT" else str(picture) if a == "PATH" else a for a in shlex.split(command)]
    assert argv[:2] == ["attnviz", "figure"] and argv[2] == str(llava_repo)
    assert main([*argv[1:], "--out", str(out), "--dpi", "40"]) == 0
    assert out.stat().st_size > 0
