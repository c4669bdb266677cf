"""One image against several texts on a dual encoder (zero-shot): ``--text`` given once per candidate text runs the
image once per text, the texts padded as the tokenizer pads them, and each text's score is the model's own.

Checked against transformers' CLIPModel / SiglipModel on the same random-init weights (tests/hf_models.py): the
tokenizer's own batched call (``padding=True``) makes the ids and mask, the image is a 32×32 PNG the model's size
(no resize: the pixels are the 0.5-preset's ``(x/255 - 0.5) / 0.5``), and the scores are CLIP's softmax over the
texts of ``logits_per_image`` and SigLIP's sigmoid of it.
"""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import dual_cache  # noqa: E402  (the exports, once per machine)
import hf_models  # noqa: E402

from attnviz.cli import main  # noqa: E402
from attnviz.core.io import load_npz  # noqa: E402
from attnviz.core.rows import pick_row  # noqa: E402
from attnviz.core.text_scores import TextScores  # noqa: E402

TEXTS = ["the cat sat on mat", "a dog ran", "red image of park", "blue"]
ATOL = 5e-4


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    """A random 32×32 RGB PNG (the towers' image size) and its pixel values as the 0.5 preset makes them."""
    from PIL import Image

    px = np.random.default_rng(5).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    path = tmp_path_factory.mktemp("img") / "img.png"
    Image.fromarray(px).save(path)
    values = (px.astype(np.float32) / 255.0 - 0.5) / 0.5
    return path, torch.from_numpy(values.transpose(2, 0, 1)[None].copy())


def _folder(tmp_path, arch, part="model", config=None):
    folder = tmp_path / f"{arch}_{part}"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(dual_cache.export_dual(arch, part, tmp_path).read_bytes())
    hf_models.word_tokenizer(99, bert_style=False).save_pretrained(str(folder))
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    return folder / "model.onnx"


def _reference(arch, texts, px, **padding):
    """transformers on the tokenizer's padded batch and the image repeated once per text."""
    m = hf_models.build_dual(arch)
    padding = padding or {"padding": True}
    enc = hf_models.word_tokenizer(99, bert_style=False)(texts, return_tensors="pt", **padding)
    with torch.no_grad():
        o = m(
            input_ids=enc["input_ids"],
            attention_mask=enc["attention_mask"],
            pixel_values=px.repeat(len(texts), 1, 1, 1),
            output_attentions=True,
        )
    logits = o.logits_per_image[0].double()
    scores = torch.softmax(logits, -1) if arch == "clip" else torch.sigmoid(logits)
    return scores.numpy(), o, enc


@pytest.mark.parametrize("arch", ["clip", "siglip"])
def test_extract_scores_every_text_as_transformers_does(tmp_path, capsys, image, arch):
    img, px = image
    path = _folder(tmp_path, arch)
    out = tmp_path / "m.npz"
    argv = ["extract", str(path), "--image", str(img), "--out", str(out)]
    for t in TEXTS:
        argv += ["--text", t]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    want, o, enc = _reference(arch, TEXTS, px)
    res = load_npz(out)
    scores = TextScores.from_info(res.info)
    assert scores is not None and scores.texts == TEXTS and scores.output == "logits_per_image"
    assert scores.rule == ("softmax" if arch == "clip" else "sigmoid")  # no config.json: SigLIP by its pooling head
    np.testing.assert_allclose(scores.scores, want, atol=1e-5)
    if arch == "clip":
        assert abs(sum(scores.scores) - 1.0) < 1e-6
    for i, t in enumerate(TEXTS):  # the summary says each text's score, in order
        assert f"text {i}  {want[i]:.3f}  {t}" in printed
    assert res.info["texts"] == TEXTS and res.batch_size == len(TEXTS)
    # SigLIP without its config.json: padded to the longest (as asked of the tokenizer), and one note says why
    assert any("not to 64 tokens" in n for n in res.info.get("notes", [])) == (arch == "siglip")
    # the text tower's rows are transformers' on the padded batch; the image tower's rows are all the one image's
    text_maps = [m for s, m in zip(res.sites, res.maps) if s.tower == "text"]
    image_maps = [m for s, m in zip(res.sites, res.maps) if s.tower == "image"]
    for got, ref in zip(text_maps, o.text_model_output.attentions):
        np.testing.assert_allclose(got.array(), ref.numpy(), atol=ATOL)
    for got, ref in zip(image_maps, o.vision_model_output.attentions):
        np.testing.assert_allclose(got.array(), ref.numpy(), atol=ATOL)
        assert np.array_equal(got.array()[0], got.array()[-1])
    # each row's text axis is its own words, the padding marked as padding
    blocks = res.blocks()
    n = int(enc["attention_mask"].shape[1])
    for b, t in enumerate(TEXTS):
        axis = pick_row(res, b).blocks()[-1].key_axis
        assert len(axis) == n and axis.labels[: len(t.split())] == t.split()
        assert (axis.pad or [False] * n) == [not bool(k) for k in enc["attention_mask"][b]]
    assert blocks[-1].tower == "text"


def test_config_names_the_rule(tmp_path, image):
    """A config.json model type says the family: a SigLIP export beside ``model_type: clip`` is scored as CLIP
    (softmax), whatever its pooling head."""
    from attnviz.runtime import open_model

    img, _ = image
    path = _folder(tmp_path, "siglip", config={"model_type": "clip"})
    res = open_model(path, provider="cpu").analyze(image=str(img), text=TEXTS[:2])
    scores = TextScores.from_info(res.info)
    assert scores is not None and scores.rule == "softmax"
    assert abs(sum(scores.scores) - 1.0) < 1e-6


def test_siglip_pads_as_the_zero_shot_pipeline(tmp_path, image):
    """SigLIP's text tower reads its last position, so padding moves its scores: with its config.json beside it the
    texts are padded as transformers' zero-shot pipeline pads SigLIP (max_length 64, here its 16 positions), and
    the scores are transformers' on that batch."""
    from attnviz.runtime import open_model

    img, px = image
    config = {"model_type": "siglip", "text_config": {"max_position_embeddings": 16}}
    path = _folder(tmp_path, "siglip", config=config)
    res = open_model(path, provider="cpu").analyze(image=str(img), text=TEXTS)
    want, _, enc = _reference("siglip", TEXTS, px, padding="max_length", max_length=16)
    assert enc["input_ids"].shape[1] == 16 and res.maps[-1].shape[-1] == 16
    scores = TextScores.from_info(res.info)
    assert scores is not None and scores.rule == "sigmoid"
    np.testing.assert_allclose(scores.scores, want, atol=1e-5)
    longest, _, _ = _reference("siglip", TEXTS, px)
    assert np.abs(longest - want).max() > 1e-4  # the padding matters: the longest-text padding scores otherwise
    assert any("padded to 16 tokens" in n for n in res.info["notes"])


def test_raw_feeds_pair_image_i_with_text_i(tmp_path, image):
    """Raw feeds of two images and two texts: row i's score is image i's against text i, from the same logits."""
    from attnviz.runtime import open_model

    _, px = image
    kw = hf_models.dual_inputs()
    m = hf_models.build_dual("clip")
    with torch.no_grad():
        logits = m(**kw).logits_per_image.double()
    want = [float(torch.softmax(logits[i], -1)[i]) for i in range(2)]
    res = open_model(_folder(tmp_path, "clip"), provider="cpu").analyze(feeds={k: v.numpy() for k, v in kw.items()})
    scores = TextScores.from_info(res.info)
    assert scores is not None
    np.testing.assert_allclose(scores.scores, want, atol=1e-5)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--image", "IMG", "--text", "a", "--text", "b", "--text-pair", "c"], "no text pair"),
    ],
)
def test_counts_that_do_not_fit_are_one_line(tmp_path, capsys, image, argv, words):
    img, _ = image
    path = _folder(tmp_path, "clip")
    out = tmp_path / "x.npz"
    argv = [str(img) if a == "IMG" else a for a in argv]
    assert main(["extract", str(path), *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0] and "--text once per text" in err[0]
    assert not out.exists()


def test_several_texts_for_a_text_model_is_one_line(tmp_path, capsys):
    import onnx_builders

    path = onnx_builders.tiny_text_model(tmp_path / "m.onnx")
    assert main(["extract", str(path), "--text", "the cat", "--text", "a dog", "--out", str(tmp_path / "x.npz")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "2 texts given" in err[0] and "takes one text" in err[0]


def test_a_tower_alone_says_it_has_no_score(tmp_path, capsys):
    """CLIP's text tower exported alone, its config.json beside it: the run goes on, one note says why no score."""
    path = _folder(tmp_path, "clip", "text", config={"model_type": "clip_text_model"})
    out = tmp_path / "t.npz"
    assert main(["extract", str(path), "--text", "the cat sat", "--out", str(out)]) == 0
    res = load_npz(out)
    assert TextScores.from_info(res.info) is None
    notes = [n for n in res.info.get("notes", []) if "no score" in n]
    assert len(notes) == 1 and "one tower" in notes[0] and "logits_per_image" in notes[0]
    assert f"attnviz: note: {notes[0]}" in capsys.readouterr().err.splitlines()  # extract says it


def test_inspect_calls_it_a_dual_encoder(tmp_path, capsys):
    """inspect said "vision" for a whole CLIP (the engine's word: it has an image input); a tower alone stays what
    it is."""
    assert main(["inspect", str(_folder(tmp_path, "clip"))]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "(dual encoder (image tower + text tower);" in first and "vision" not in first
    assert main(["inspect", str(_folder(tmp_path, "siglip", "vision"))]) == 0
    assert "(vision;" in capsys.readouterr().out.splitlines()[0]
