"""Several images on a dual encoder: one text against several images (retrieval: which of these is a cat?), and
every image against every text (the score table).  ``--image`` once per image, ``--text`` once per text; row ``r``
is image ``r // texts`` and text ``r % texts``, and the scores are the model's own.

Checked against transformers' CLIPModel / SiglipModel on the same random-init weights (tests/hf_models.py), fed
the images and the tokenizer's padded texts once each: CLIP's one text over the images is the softmax of
``logits_per_text`` (each text's row), its table each image's softmax over the texts (``logits_per_image``);
SigLIP's every cell is the sigmoid of its pair's logit.
"""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import hf_models  # noqa: E402
from test_dual_scores import ATOL, _folder  # noqa: E402

from attnviz.cli import main  # noqa: E402
from attnviz.core.io import load_npz  # noqa: E402
from attnviz.core.rows import pick_row  # noqa: E402
from attnviz.core.text_scores import TextScores  # noqa: E402

TEXTS = ["the cat sat on mat", "a dog ran", "blue"]


def random_images(folder, n: int, seed: int, stem: str = "img"):
    """``n`` random 32×32 RGB PNGs (the towers' image size) and their pixel values as the 0.5 preset makes them."""
    from PIL import Image

    paths, values = [], []
    for k in range(n):
        px = np.random.default_rng(seed + k).integers(0, 256, (32, 32, 3), dtype=np.uint8)
        paths.append(folder / f"{stem}{k}.png")
        Image.fromarray(px).save(paths[-1])
        values.append(((px.astype(np.float32) / 255.0 - 0.5) / 0.5).transpose(2, 0, 1))
    return paths, torch.from_numpy(np.stack(values))


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return random_images(tmp_path_factory.mktemp("imgs"), 3, 10)


def _reference(arch, texts, px):
    """transformers on every image and the tokenizer's padded texts, each given once: ``[images, texts]`` logits."""
    m = hf_models.build_dual(arch)
    enc = hf_models.word_tokenizer(99, bert_style=False)(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        o = m(
            input_ids=enc["input_ids"],
            attention_mask=enc["attention_mask"],
            pixel_values=px,
            output_attentions=True,
        )
    return o


def _extract(tmp_path, arch, paths, texts):
    out = tmp_path / "m.npz"
    argv = ["extract", str(_folder(tmp_path, arch)), "--out", str(out)]
    for p in paths:
        argv += ["--image", str(p)]
    for t in texts:
        argv += ["--text", t]
    assert main(argv) == 0
    return load_npz(out)


@pytest.mark.parametrize("arch", ["clip", "siglip"])
def test_one_text_against_several_images(tmp_path, capsys, images, arch):
    paths, px = images
    res = _extract(tmp_path, arch, paths, TEXTS[:1])
    printed = capsys.readouterr().out
    o = _reference(arch, TEXTS[:1], px)
    if arch == "clip":  # the text's softmax over the images, from logits_per_text
        want = torch.softmax(o.logits_per_text[0].double(), -1).numpy()
    else:
        want = torch.sigmoid(o.logits_per_image[:, 0].double()).numpy()
    scores = TextScores.from_info(res.info)
    assert scores is not None and scores.kind == "image"
    assert scores.images == [p.name for p in paths] and scores.texts == TEXTS[:1] * 3
    np.testing.assert_allclose(scores.scores, want, atol=1e-5)
    if arch == "clip":
        # (the export's one output: logits_per_text is its transpose)
        assert scores.output == "logits_per_image" and scores.over == "images"
        assert abs(sum(scores.scores) - 1.0) < 1e-6 and "softmax over the images" in printed
    for i, p in enumerate(paths):  # the summary says each image's score, in order
        assert f"image {i}  {want[i]:.3f}  {p.name}" in printed
    # each row's image tower maps are its own image's (transformers' row i), its picture the image as seen
    image_maps = [m for s, m in zip(res.sites, res.maps) if s.tower == "image"]
    for got, ref in zip(image_maps, o.vision_model_output.attentions):
        np.testing.assert_allclose(got.array(), ref.numpy(), atol=ATOL)
    assert len(res.images) == 3 and res.info["row_images"] == [0, 1, 2]
    for i in range(3):
        seen = np.asarray(pick_row(res, i).image)
        assert np.array_equal(seen, np.asarray(res.images[i]))
    assert not np.array_equal(np.asarray(res.images[0]), np.asarray(res.images[1]))


@pytest.mark.parametrize("arch", ["clip", "siglip"])
def test_every_image_against_every_text(tmp_path, capsys, images, arch):
    paths, px = images
    res = _extract(tmp_path, arch, paths[:2], TEXTS)
    printed = capsys.readouterr().out
    o = _reference(arch, TEXTS, px[:2])
    z = o.logits_per_image.double()
    want = (torch.softmax(z, -1) if arch == "clip" else torch.sigmoid(z)).numpy()
    scores = TextScores.from_info(res.info)
    assert scores is not None and scores.kind == "pair" and res.batch_size == 6
    np.testing.assert_allclose(np.array(scores.table()), want, atol=1e-5)
    # row r is image r // 3 and text r % 3: its text tower maps are that text's, its image tower's that image's
    text_maps = [m for s, m in zip(res.sites, res.maps) if s.tower == "text"]
    image_maps = [m for s, m in zip(res.sites, res.maps) if s.tower == "image"]
    for r in range(6):
        for got, ref in zip(text_maps, o.text_model_output.attentions):
            np.testing.assert_allclose(got.array()[r], ref.numpy()[r % 3], atol=ATOL)
        for got, ref in zip(image_maps, o.vision_model_output.attentions):
            np.testing.assert_allclose(got.array()[r], ref.numpy()[r // 3], atol=ATOL)
    # the table: an image a line, a text a column, then the texts
    for i, p in enumerate(paths[:2]):
        line = next(x for x in printed.splitlines() if x.strip().startswith(f"image {i} "))
        assert [float(v) for v in line.split()[2:5]] == pytest.approx(want[i], abs=1e-3) and p.name in line
    for j, t in enumerate(TEXTS):
        assert f"text {j}: {t}" in printed


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--image", "IMG", "--image", "IMG"], "give a text"),
        (["--image", "IMG", "--image", "NOT", "--text", "a"], "not.png"),
        (["--image", "IMG", "--image", "IMG", "--text", "a", "--text", "a"], "given twice"),
        (["--image", "IMG", "--image", "IMG", "--text", "a", "--text-pair", "b"], "no text pair"),
    ],
)
def test_bad_input_is_one_line(tmp_path, capsys, images, argv, words):
    paths, _ = images
    bad = tmp_path / "not.png"
    bad.write_text("not an image")
    argv = [str(paths[0]) if a == "IMG" else str(bad) if a == "NOT" else a for a in argv]
    out = tmp_path / "x.npz"
    assert main(["extract", str(_folder(tmp_path, "clip")), *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
    assert not out.exists()


def test_figure_draws_the_chosen_text_and_its_recipe_draws_it_again(tmp_path, capsys, images):
    """``figure --text A --text B``: the maps of the row asked for (--batch-index; row 0 said where none is), the
    title naming its text and score; the recipe keeps every text and image, and draws the same bytes."""
    from attnviz.core.text_scores import TextScores
    from attnviz.figures.layout import pair_part
    from attnviz.runtime import open_model

    paths, _ = images
    model = _folder(tmp_path, "siglip")
    argv = ["figure", str(model), "--image", str(paths[0]), "--text", TEXTS[0], "--text", TEXTS[1]]
    out = tmp_path / "f.png"
    assert main([*argv, "--view", "heatmap", "--out", str(out), "--batch-index", "1"]) == 0
    printed = capsys.readouterr().out
    res = open_model(model, provider="cpu").analyze(image=str(paths[0]), text=TEXTS[:2])
    scores = TextScores.from_info(res.info)
    assert scores is not None and f"text 1  {scores.scores[1]:.3f}  {TEXTS[1]}  ◀ shown" in printed
    assert pair_part(pick_row(res, 1)) == f"text 1 “{TEXTS[1]}” · score {scores.scores[1]:.3f}"
    recipe = json.loads((tmp_path / "f.png.recipe.json").read_text())
    assert recipe["inputs"]["texts"] == TEXTS[:2] and recipe["options"]["batch_index"] == 1
    again = tmp_path / "g.png"
    assert main(["figure", "--recipe", str(tmp_path / "f.png.recipe.json"), "--out", str(again)]) == 0
    assert again.read_bytes() == out.read_bytes()
    # no --batch-index: row 0, said
    assert main([*argv, "--view", "heatmap", "--out", str(tmp_path / "h.png")]) == 0
    assert f"drawing text 0 ({TEXTS[0]!r}), score {scores.scores[0]:.3f}" in capsys.readouterr().err


def test_a_long_image_name_stays_inside_the_figure_title(tmp_path, images):
    """A pair's figure names its image in the title: a long file name is cut in its middle (its start and its
    extension kept, as a long text is cut at its end) so every line of the title lies inside the figure (a
    79-character name ran off both edges at the default width, "image 1" itself cut away)."""
    import shutil

    from matplotlib.text import Text

    from attnviz.core import view as vm
    from attnviz.figures.spec import FigureStyle
    from attnviz.figures.views import draw_heatmap
    from attnviz.runtime import open_model

    paths, _ = images
    long = tmp_path / "a_very_long_photograph_name_from_the_holiday_in_the_mountains_2024_final_v2.png"
    shutil.copy(paths[1], long)
    res = open_model(_folder(tmp_path, "clip"), provider="cpu").analyze(image=[str(paths[0]), str(long)], text=TEXTS)
    row = pick_row(res, len(TEXTS))  # image 1 × text 0
    fig = draw_heatmap(row, vm.Selection(block=0), FigureStyle())
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = [t for t in fig.findobj(Text) if t.get_text() and t.get_visible()]
    title = next(t.get_text() for t in texts if "clip" in t.get_text() and "score" in t.get_text())
    assert "image 1 a_very_long" in title and "final_v2.png" in title
    for t in texts:
        box = t.get_window_extent(renderer)
        assert box.x0 >= 0 and box.x1 <= fig.bbox.width, f"{t.get_text()!r} runs past the figure's edge"
