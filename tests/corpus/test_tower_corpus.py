"""``attnviz corpus VISION_ENCODER.onnx --images DIR`` on Idefics3 / SmolVLM's vision encoder alone: every image
through the family's processor (its tiles and global image, as ``attnviz open`` and ``extract`` make them), each
frame's map reduced by itself, an example's row and key numbered and named as the view numbers and names them.
Checked by hand against ``attnviz extract``'s maps of each image (its block-diagonal map's diagonal blocks, the
frames, through core.stats.row_stats); what cannot be done is one line, exit 2."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import vlm_build as vb

from attnviz.cli import main
from attnviz.core import io
from attnviz.core.stats import ROW_STATS, row_stats
from attnviz.corpus.output import read
from attnviz.corpus.run import CHECKPOINT, CorpusConfig, run_corpus
from attnviz.corpus.tower import images_per_batch
from attnviz.runtime import open_model

TOL = 1e-5
# (h, w): the processor's split 1 x 2, 2 x 2, 2 x 2 (upscaled to its longest edge, 96) and 2 x 1 tiles, each and a
# global image (3, 5, 5, 3 frames: the first batch of two pads a_wide's row with all-zero frames)
SHAPES = {"a_wide": (40, 100), "b_square": (70, 64), "c_small": (30, 20), "d_tall": (90, 30)}
FRAMES = {"a_wide": 3, "b_square": 5, "c_small": 5, "d_tall": 3}
PER = 36  # a frame's 6 x 6 patches


@pytest.fixture(scope="module")
def tower(idefics3_repo):
    return idefics3_repo / "onnx" / "vision_encoder.onnx"


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    d = tmp_path_factory.mktemp("tower_imgs")
    for seed, (name, (h, w)) in enumerate(SHAPES.items()):
        vb.random_image(d / f"{name}.png", h, w, seed)
    return d


@pytest.fixture(scope="module")
def extracted(tower, images, tmp_path_factory):
    """``attnviz extract MODEL --image X`` of each image: its maps, and the key labels the view shows."""
    d = tmp_path_factory.mktemp("tower_npz")
    out = {}
    for name in SHAPES:
        assert (
            main(["extract", str(tower), "--image", str(images / f"{name}.png"), "--out", str(d / f"{name}.npz")]) == 0
        )
        r = io.load_npz(d / f"{name}.npz")
        out[name] = ([m.array()[0] for m in r.maps], list(r.blocks()[0].key_axis.labels))
    return out


@pytest.fixture(scope="module")
def results(tower, images, tmp_path_factory):
    out = tmp_path_factory.mktemp("tower_out") / "o"
    args = ["corpus", str(tower), "--images", str(images), "--out", str(out), "--batch-size", "2", "--workers", "1"]
    assert main([*args, "--provider", "cpu", "--no-progress"]) == 0
    return read(out)


def frames_of(a: np.ndarray) -> np.ndarray:
    """The diagonal blocks of an image's map ``[H, n·P, n·P]`` (each frame's own map), ``[n, H, P, P]``; nothing
    off them (the tower runs each frame alone)."""
    n = a.shape[-1] // PER
    blocks = np.stack([a[:, f * PER : (f + 1) * PER, f * PER : (f + 1) * PER] for f in range(n)])
    off = a.copy()
    for f in range(n):
        off[:, f * PER : (f + 1) * PER, f * PER : (f + 1) * PER] = 0
    assert np.abs(off).max() == 0
    return blocks


def by_hand(extracted, layer: int, head: int) -> dict[str, tuple[float, int, dict[str, float]]]:
    """Per statistic: the sum over every counted row of every image, the row count, and each image's mean."""
    out = {}
    for s in ROW_STATS:
        total, count, each = 0.0, 0, {}
        for name, (maps, _) in extracted.items():
            blocks = frames_of(maps[layer])[:, head : head + 1]
            values, valid = row_stats(blocks, np.full(len(blocks), PER))
            v = values[s][:, 0][valid[s]]
            total, count, each[name] = total + v.sum(), count + v.size, v.mean()
        out[s] = (total, count, each)
    return out


def test_heads_equal_row_stats_of_each_images_extracted_frames(results, extracted):
    assert results.run["items"] == len(SHAPES) and results.run["model_kind"] == "vision"
    assert {n: maps[0].shape[-1] // PER for n, (maps, _) in extracted.items()} == FRAMES
    assert results.run["tokens"] == sum(FRAMES.values()) * PER
    assert len(results.heads) == 2 * 4  # 2 layers x 4 heads
    for row in results.heads:
        hand = by_hand(extracted, row["layer"], row["head"])
        for s in ROW_STATS:
            total, count, _ = hand[s]
            assert row[s] == pytest.approx(total / count, abs=TOL), (row["layer"], row["head"], s)
    # each frame's own keys: a uniform row is 1 whatever the image's split (over the block-diagonal map it is not)
    assert all(0.99 < row["broad"] <= 1.0 for row in results.heads)


def test_examples_name_the_image_and_the_patches_as_the_view_does(results, extracted):
    """Each example's value is its image's mean by hand, its row and key are the view's positions (the key the
    extracted map's row puts the most weight on, for "max"), named as the view's axis names them."""
    assert results.examples
    for e in results.examples:
        name = e["image"].rsplit("/", 1)[-1].removesuffix(".png")
        maps, labels = extracted[name]
        hand = by_hand({name: extracted[name]}, e["layer"], e["head"])
        assert e["value"] == pytest.approx(hand[e["score"]][2][name], abs=TOL)
        assert (e["row_patch"], e["col_patch"]) == (labels[e["row"]], labels[e["col"]])
        assert e["row"] // PER == e["col"] // PER  # a row's key lies in its own frame
        if e["score"] == "max":
            assert e["col"] == int(maps[e["layer"]][e["head"], e["row"]].argmax())
    named = {e["row_patch"] for e in results.examples} | {e["col_patch"] for e in results.examples}
    assert any(n.startswith("tile ") for n in named) and any(n.startswith("(") for n in named)  # tiles and global


def test_examples_name_the_rows_frame_by_its_place_as_the_head_map_does(results, idefics3_repo):
    """An example's ``frame``: its row's frame by its place in transformers' processor's split of its image
    (``return_row_col_info``: 1 x 2, 2 x 2 and 2 x 1 tiles here), the name the whole model's Head map gives that
    frame; ``frames`` counts the tiles and the global image."""
    import idefics3_models as im
    from PIL import Image

    from attnviz.core import view as v

    proc, whole = im.processor(idefics3_repo).image_processor, open_model(idefics3_repo, provider="cpu")
    seen: dict[str, tuple[int, int, list[str]]] = {}
    for e in results.examples:
        if e["image"] not in seen:
            info = proc([[Image.open(e["image"]).convert("RGB")]], return_row_col_info=True)
            r = whole.analyze(text="<s> <image> a photo", image=e["image"])
            seen[e["image"]] = (int(info["rows"][0][0]), int(info["cols"][0][0]), v.tower_frames(r, v.Selection()))
        rows, cols, head_map = seen[e["image"]]
        f = e["row"] // PER
        want = "global image" if f == rows * cols else f"tile {f} (row {f // cols}, col {f % cols})"
        assert e["frames"] == rows * cols + 1 and e["frame"] == want == head_map[f]
        side = math.isqrt(
            PER
        )  # the row's and key's patches name the tile their frame names (one frame: asserted above)
        for pos, label in ((e["row"], e["row_patch"]), (e["col"], e["col_patch"])):
            cell = f"({pos % PER // side},{pos % PER % side})"
            assert label == (cell if f == rows * cols else f"{want.split(' (')[0]}·{cell}"), (label, want)
    # a second tile of a 1 x 2 and of a 2 x 1 image among them: rows told from columns
    assert {(seen[e["image"]][:2], e["row"] // PER) for e in results.examples} >= {((1, 2), 1), ((2, 1), 1)}
    assert any(e["frame"] == "global image" for e in results.examples)


def test_no_preprocessor_config_is_one_line(idefics3_repo, images, tmp_path, capsys):
    (tmp_path / "onnx").mkdir()
    shutil.copy(idefics3_repo / "config.json", tmp_path / "config.json")
    shutil.copy(idefics3_repo / "onnx" / "vision_encoder.onnx", tmp_path / "onnx" / "vision_encoder.onnx")
    code = main(
        ["corpus", str(tmp_path / "onnx" / "vision_encoder.onnx"), "--images", str(images)]
        + ["--out", str(tmp_path / "o"), "--no-progress", "--provider", "cpu"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert (
        "no preprocessor_config.json is beside it" in err[0]
        and "put the repository's preprocessor_config.json" in err[0]
    )
    assert "--inputs" not in err[0] and not (tmp_path / "o").exists()


def test_an_image_that_cannot_be_read_is_one_line(tower, images, tmp_path, capsys):
    d = tmp_path / "imgs"
    shutil.copytree(images, d)
    (d / "broken.png").write_bytes(b"not an image")
    code = main(
        ["corpus", str(tower), "--images", str(d), "--out", str(tmp_path / "o"), "--no-progress", "--provider", "cpu"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "broken.png: cannot open it as an image" in err[0]


def _same_tables(a, b) -> None:
    for name in ("heads.parquet", "examples.parquet"):
        np.testing.assert_equal(pq.read_table(a / name).to_pylist(), pq.read_table(b / name).to_pylist())


def _cfg(tower, images, out, **kw) -> CorpusConfig:
    return CorpusConfig(
        model=str(tower),
        images=str(images),
        out=str(out),
        batch_size=2,
        workers=1,
        provider="cpu",
        progress=False,
        **kw,
    )


def _interrupted_after_two(tower, images, cut) -> None:
    """A run stopped (Ctrl-C) once two batches are done: its checkpoint is left in ``cut``."""

    def stop(done):
        if done >= 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_corpus(_cfg(tower, images, cut), on_batch=stop)


def test_a_resumed_run_gives_the_same_tables(tower, images, results, tmp_path):
    """Interrupted after its first batch and run again: the checkpoint keeps the example images' frames, so the
    patches are named as by the uninterrupted run (the same tables, bit for bit)."""
    cut = tmp_path / "cut"

    _interrupted_after_two(tower, images, cut)
    assert (cut / CHECKPOINT).exists() and not (cut / "heads.parquet").exists()
    s = run_corpus(_cfg(tower, images, cut))
    assert s.resumed_items == 2 and s.items == len(SHAPES)
    _same_tables(results.folder, cut)


def test_a_checkpoint_from_before_the_split_was_kept_resumes(tower, images, results, tmp_path):
    """A checkpoint whose images' frames hold three entries (no split: written before the split was kept) resumes;
    its images' frames are named without their place ("tile 1"), the later batches' with it, as the uninterrupted
    run names them."""
    cut = tmp_path / "old"

    _interrupted_after_two(tower, images, cut)
    with np.load(cut / CHECKPOINT) as z:
        kept = {k: z[k] for k in z.files}
    older = {i: f[:3] for i, f in json.loads(str(kept["frames"])).items()}
    assert older and all(len(f) == 5 for f in json.loads(str(kept["frames"])).values())
    with open(cut / CHECKPOINT, "wb") as f:
        np.savez(f, **{**kept, "frames": np.array(json.dumps(older))})
    assert run_corpus(_cfg(tower, images, cut)).resumed_items == 2
    key = ("layer", "head", "score", "rank")
    full = {tuple(e[k] for k in key): e for e in results.examples}
    placeless = 0
    for e in read(cut).examples:
        want = full[tuple(e[k] for k in key)]["frame"]
        assert e["frame"] == (want.split(" (")[0] if str(e["item"]) in older else want)
        placeless += e["frame"] != want
    assert placeless  # some of the checkpoint's images' tiles among the examples


def test_ray_runs_the_drivers_plan_through_the_familys_processor(tower, images, results, tmp_path, ray_local):
    """``--engine ray``: the driver's plan (Ray Data's own image reading would resize the images as attnviz
    does, not split them as the processor does): the local engine's tables, bit for bit."""
    pytest.importorskip("ray.data")
    run_corpus(_cfg(tower, images, tmp_path / "ray", engine="ray"))
    _same_tables(results.folder, tmp_path / "ray")


def test_batches_hold_fewer_images_where_their_maps_would_pass_the_budget(tower):
    """The tiny model's processor: images resized to a longest edge of 96 in tiles of 48, so 2 x 2 tiles and the
    global image at most, each 6 x 6 patches; its 2 layers of 4 heads: 5 · 8 · 36² · 4 bytes of maps an image."""
    family = open_model(tower, provider="cpu").frames.require_family()
    assert family.frames_at_most() == (5, 36)
    one = 5 * 8 * 36 * 36 * 4
    assert images_per_batch(family, 8, 32, budget=3 * one) == 3
    assert images_per_batch(family, 8, 32, budget=3 * one - 1) == 2
    assert images_per_batch(family, 8, 32, budget=1) == 1  # one image a batch, whatever its maps
    assert images_per_batch(family, 8, 2) == 2  # --batch-size stays the most


def test_a_reducer_opens_the_tower_with_its_maps_one_per_frame(tower, images):
    """Set where the worker opens the model, not at each batch: the reducer's model gives each real frame's map
    (b_square: 2 x 2 tiles and the global image), as reduce_tower takes them, before any batch has run."""
    from attnviz.corpus.reduce import BatchReducer
    from attnviz.corpus.tower import tower_feeds

    r = BatchReducer(str(tower), "cpu", None, 1, 5)
    assert r.image_spec is not None
    feeds, counts, splits = tower_feeds(r.model, [str(images / "b_square.png")], r.image_spec)
    maps = r.model.run(feeds, mode="dense").maps
    assert counts == [FRAMES["b_square"]] and [(s.rows, s.cols) for s in splits] == [(2, 2)]
    assert [m.shape for m in maps] == [(FRAMES["b_square"], 4, PER, PER)] * 2


def test_heads_and_examples_name_the_stack_as_the_view_names_the_block(tower, images, results, tmp_path):
    """Every view names the tower's sites "vision self-attention" (``attnviz extract``'s block, as the window draws
    it): the tables say "vision" too, and run.json that the corpus was a vision tower's."""
    assert main(["extract", str(tower), "--image", str(images / "a_wide.png"), "--out", str(tmp_path / "a.npz")]) == 0
    (block,) = io.load_npz(tmp_path / "a.npz").blocks()
    assert block.name == "vision self-attention"
    assert {f"{r['stack']} {r['kind']}-attention" for r in results.heads} == {block.name}
    assert {f"{e['stack']} {e['kind']}-attention" for e in results.examples} == {block.name}
    assert results.run["vision_tower"] is True


def heads_of(out) -> list[dict]:
    return pq.read_table(out / "heads.parquet").to_pylist()


def test_ablate_reads_and_writes_vision_self_and_still_takes_encoder_self(tower, images, tmp_path, capsys):
    """``--heads 'vision self 1:2'`` (the tables' name) switches off the very head 'encoder self 1:2' (the sites'
    name) does: the same output change; the rows and the printed heads say "vision"."""
    image = str(images / "b_square.png")
    for name in ("vision", "encoder"):
        out = tmp_path / name
        argv = ["ablate", str(tower), "--image", image, "--heads", f"{name} self 1:2", "--out", str(out)]
        assert main([*argv, "--provider", "cpu"]) == 0
    a, b = heads_of(tmp_path / "vision"), heads_of(tmp_path / "encoder")
    assert a == b and [(r["stack"], r["kind"], r["layer"], r["head"]) for r in a] == [("vision", "self", 1, 2)]
    assert a[0]["ablation_max_dlogit"] > 0  # a head that was switched off
    run = json.loads((tmp_path / "vision" / "run.json").read_text())
    assert run["joint"]["heads"] == ["vision self 1:2"] and [s["site"] for s in run["sites"]] == ["vision self L1"]
    capsys.readouterr()
    out = tmp_path / "all"
    assert main(["ablate", str(tower), "--image", image, "--all-heads", "--out", str(out), "--provider", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "  vision self " in printed and "encoder self" not in printed
    assert {r["stack"] for r in heads_of(out)} == {"vision"}
    # a site the model lacks is named as the user wrote it, the sites as the tables name them
    bad = ["ablate", str(tower), "--image", image, "--heads", "vision self 5:1", "--out", str(tmp_path / "x")]
    assert main(bad) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        "--heads 'vision self 5:1': the model has no site vision self L5; its sites: vision self L0 (4 heads), "
        "vision self L1 (4 heads)"
    )


def test_vision_self_is_a_vision_towers_name_only(planted, tmp_path, capsys):
    """A text encoder has no vision tower: 'vision self' is no site of it (its encoder is not renamed)."""
    argv = ["ablate", str(planted[0]), "--text", "the cat sat", "--heads", "vision self 0:1"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "the model has no site vision self L0; its sites: encoder self L0 (4 heads)" in err


def test_compare_rows_say_vision_and_figure_head_takes_either_name(tower, images, tmp_path, capsys):
    image = str(images / "b_square.png")
    out = tmp_path / "c"
    argv = ["compare", str(tower), str(tower), "--image", image, "--out", str(out), "--provider", "cpu"]
    for name in ("vision", "encoder"):
        fig = tmp_path / f"{name}.png"
        assert main([*argv, "--figure", str(fig), "--figure-head", f"{name} self 1:2"]) == 0
        printed = capsys.readouterr().out
        assert f"wrote {fig}: A | B | A − B of vision self 1:2 " in printed and "encoder self" not in printed
    assert {r["stack"] for r in heads_of(out)} == {"vision"}
