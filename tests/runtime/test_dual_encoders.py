"""Dual encoders (CLIP, SigLIP): both towers are encoders, SigLIP's pooling head is a site of its own kind, and an
image goes in with a text.

Tiny random-init CLIPModel / SiglipModel (tests/hf_models.py: hidden 32, 2 layers, image 32, patch 8, seeded),
exported whole and as single towers with torch.onnx.export (eager attention), compared with transformers' eager
``output_attentions`` on a batch of two random images and two token rows, the second padded.
"""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import dual_cache  # noqa: E402  (the exports, once per machine)
import hf_models  # noqa: E402
import onnx_builders  # noqa: E402

from attnviz.cli import main  # noqa: E402
from attnviz.core.io import load_npz  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402

SAMPLE = "resources/samples/captioning.png"
ATOL = 5e-4


@pytest.fixture(scope="module")
def dual(tmp_path_factory):
    """dual(arch, part) -> exported path; cached for the module (each export is tiny)."""
    folder = tmp_path_factory.mktemp("dual")
    cache: dict = {}

    def get(arch, part="model"):
        if (arch, part) not in cache:
            cache[arch, part] = dual_cache.export_dual(arch, part, folder)
        return cache[arch, part]

    return get


@pytest.fixture(scope="module")
def reference():
    cache: dict = {}

    def get(arch):
        if arch not in cache:
            m, kw = hf_models.build_dual(arch), hf_models.dual_inputs()
            cache[arch] = (kw, *hf_models.dual_reference(arch, m, kw))
        return cache[arch]

    return get


def _run(path, kw):
    am = open_model(path, provider="cpu")
    res = am.analyze(feeds={i.name: kw[i.name].numpy() for i in am.inputs})
    return am, res


@pytest.mark.parametrize("arch", ["clip", "siglip"])
def test_whole_model_maps_and_labels_equal_transformers(dual, reference, arch):
    kw, ref, labels = reference(arch)
    am, res = _run(dual(arch), kw)
    got = [(s.stack, s.kind, s.layer) for s in res.sites]
    assert got == labels  # vision L0, L1 (SigLIP: pooling L0), text L0, L1 — all encoders
    assert am.kind == "vision" and not am.needs_probe
    for g, r in zip(res.maps, ref):
        assert g.shape == r.shape
        np.testing.assert_allclose(g.array(), r, atol=ATOL)
    assert res.maps[0].shape[0] == 2  # the batch of two is kept


@pytest.mark.parametrize("arch", ["clip", "siglip"])
def test_the_run_counts_text_and_image_tokens_apart(dual, reference, arch):
    """The Run sidebar said "tokens 16" for a dual encoder: the image tower's patches, not the text's tokens. Each
    row's text tokens are its mask's 1s (the second row padded), the image's the config's (32 / 8)² patches (and
    CLIP's class embedding)."""
    from attnviz.core.token_counts import token_rows

    kw, _, _ = reference(arch)
    _, res = _run(dual(arch), kw)
    words = [int(n) for n in kw["attention_mask"].sum(-1)]
    patches = (hf_models.DUAL_VISION["image_size"] // hf_models.DUAL_VISION["patch_size"]) ** 2
    cls = arch == "clip"  # CLIP's tower puts its class embedding before the patches; SigLIP's has none
    assert words == [7, 5]
    assert dict(token_rows(res)) == {
        "text tokens": " · ".join(f"row {b}: {n} in the text tower" for b, n in enumerate(words)),
        "image tokens": f"{patches + cls} in the image tower (4×4{' + 1 other' if cls else ''} patches)",
    }


@pytest.mark.parametrize("arch", ["clip", "siglip"])
def test_one_image_against_several_texts(dual, reference, arch):
    """Zero-shot use feeds one image and several candidate texts: the text tower's batch of two was a multiple of the
    image batch of one and was refused as Swin's windows ("attends within windows ... as Swin does", an audit's raw
    feeds).  A result's rows pair image i with text i, so that is refused in one line saying so and what to give;
    the image repeated once per text then gives the text tower's maps of every text (transformers' on the same texts)
    and the image's in every row."""
    from attnviz import AttnvizError

    kw, ref, _ = reference(arch)
    one = {k: v.numpy() for k, v in kw.items()}
    one["pixel_values"] = one["pixel_values"][:1]
    am = open_model(dual(arch), provider="cpu")
    with pytest.raises(AttnvizError) as e:
        am.analyze(feeds=one)
    msg = str(e.value)
    assert "rows pair image i with text i" in msg and "1 image and 2 texts were fed" in msg and "Swin" not in msg
    one["pixel_values"] = np.repeat(one["pixel_values"], 2, axis=0)
    res = am.analyze(feeds=one)
    n_vision = 3 if arch == "siglip" else 2
    for g, r in zip(res.maps[n_vision:], ref[n_vision:]):  # the texts' maps, whatever the image
        np.testing.assert_allclose(g.array(), r, atol=ATOL)
    for g, r in zip(res.maps[:n_vision], ref[:n_vision]):  # image 0's in both rows
        np.testing.assert_allclose(g.array(), np.repeat(r[:1], 2, axis=0), atol=ATOL)


@pytest.mark.parametrize("arch", ["clip", "siglip"])
@pytest.mark.parametrize("part", ["text", "vision"])
def test_single_towers(dual, reference, arch, part):
    """A tower exported alone: CLIP's causal text tower is still an encoder (its pooling ArgMax over the ids says
    so; no config beside it), SigLIP's vision tower ends in its pooling head."""
    kw, ref, labels = reference(arch)
    n_vision = 3 if arch == "siglip" else 2
    want = (ref[:n_vision], labels[:n_vision]) if part == "vision" else (ref[n_vision:], labels[n_vision:])
    am, res = _run(dual(arch, part), kw)
    assert [(s.stack, s.kind, s.layer) for s in res.sites] == want[1]
    assert am.kind == ("vision" if part == "vision" else "encoder")
    for g, r in zip(res.maps, want[0]):
        np.testing.assert_allclose(g.array(), r, atol=ATOL)


def test_clip_text_tower_maps_are_causal_and_still_encoder(dual, reference):
    """The reason for the rule: the text tower's maps have nothing above the diagonal, which alone would make it a
    decoder."""
    kw, _, _ = reference("clip")
    _, res = _run(dual("clip", "text"), kw)
    h = res.maps[0].array()[0, 0]
    assert np.abs(np.triu(h, 1)).max() == 0.0
    assert {s.stack for s in res.sites} == {"encoder"}


def test_pooling_block_is_drawn_as_a_block(dual, reference):
    """The window groups sites into blocks: SigLIP's pooling head is its own block after the vision layers, a
    1×N map over the patches, and the text tower's layers are another block numbered from 0."""
    kw, _, _ = reference("siglip")
    _, res = _run(dual("siglip"), kw)
    blocks = res.blocks()
    assert [(b.stack, b.kind, b.n_layers) for b in blocks] == [
        ("encoder", "self", 2),
        ("encoder", "pooling", 1),
        ("encoder", "self", 2),
    ]
    assert [b.name for b in blocks] == [
        "encoder self-attention (image)",
        "encoder pooling-attention (image)",
        "encoder self-attention (text)",
    ]
    assert blocks[1].head(0, 0).shape == (1, 16)


def test_block_names_name_the_tower(dual, reference):
    """``--block "encoder self text"`` picks the text tower; a bare "encoder self" is ambiguous between the towers
    (it used to pick the image tower silently)."""
    from attnviz import AttnvizError
    from attnviz.figures.select import resolve_block

    kw, _, _ = reference("siglip")
    _, res = _run(dual("siglip"), kw)
    assert resolve_block(res, "encoder self text")[1].tower == "text"
    assert resolve_block(res, "encoder self image")[1].tower == "image"
    assert resolve_block(res, "pooling")[1].kind == "pooling"
    with pytest.raises(AttnvizError, match="ambiguous.*encoder self image.*encoder self text"):
        resolve_block(res, "encoder self")


def _folder(tmp_path, arch, dual):
    """The whole export beside a word tokenizer (as a Hub download has its tokenizer)."""
    folder = tmp_path / arch
    folder.mkdir()
    (folder / "model.onnx").write_bytes(dual(arch).read_bytes())
    hf_models.word_tokenizer(99, bert_style=False).save_pretrained(str(folder))
    return folder / "model.onnx"


@pytest.mark.parametrize("arch", ["clip", "siglip"])
def test_inspect_and_extract_with_image_and_text(dual, tmp_path, capsys, arch):
    path = _folder(tmp_path, arch, dual)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    table = out.split("attention sites")[1]
    assert "decoder" not in table and table.count("(image tower)") == (3 if arch == "siglip" else 2)
    assert ("pooling" in out) == (arch == "siglip")
    npz = tmp_path / f"{arch}.npz"
    assert main(["extract", str(path), "--image", SAMPLE, "--text", "the cat sat on the mat", "--out", str(npz)]) == 0
    res = load_npz(npz)
    assert [s.label for s in res.sites][-2:] == ["encoder self L0 (text)", "encoder self L1 (text)"]
    assert res.sites[0].label == "encoder self L0 (image)"
    # the text tower's block is labelled with the typed words, the vision tower's with the patches
    blocks = res.blocks()
    assert blocks[-1].key_axis.labels == ["the", "cat", "sat", "on", "the", "mat"]
    assert blocks[0].key_axis.labels[-1] == "(3,3)" and len(blocks[0].key_axis) == (17 if arch == "clip" else 16)
    assert res.patch_grid is not None and (res.patch_grid.rows, res.patch_grid.cols) == (4, 4)


def test_image_without_text_is_one_line(dual, tmp_path, capsys):
    path = _folder(tmp_path, "clip", dual)
    assert main(["extract", str(path), "--image", SAMPLE, "--out", str(tmp_path / "x.npz")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "dual encoder" in err[0] and "--text" in err[0]
    assert not (tmp_path / "x.npz").exists()


@pytest.mark.parametrize(
    "config, where, stack",
    [
        (None, "", "decoder"),  # a causal graph with nothing else to say: a decoder, as before
        ({"model_type": "clip_text_model"}, "", "encoder"),  # the folder says it is a dual encoder's tower
        ({"model_type": "clip"}, "hub", "encoder"),  # REPO/config.json above REPO/onnx/model.onnx
        ({"model_type": "clip"}, "above", "decoder"),  # a config above any other folder is never read
        ({"model_type": "gpt2"}, "", "decoder"),
    ],
)
def test_config_model_type_decides_a_causal_single_stack(tmp_path, config, where, stack):
    """A hand-built causal text graph (no ArgMax pooling, names say nothing) beside a config.json."""
    repo = tmp_path / "repo"
    folder = repo / ("onnx" if where == "hub" else "m")
    folder.mkdir(parents=True)
    path = onnx_builders.tiny_text_model(folder / "model.onnx", causal=True, classifier=False, metadata=False)
    if config is not None:
        (folder if where == "" else repo).joinpath("config.json").write_text(json.dumps(config))
    am = open_model(path, provider="cpu")
    am.analyze(feeds={"input_ids": np.array([[3, 4, 5, 6]], np.int64)})
    assert {s.stack for s in am.sites} == {stack}


def test_towers_of_equal_length_stay_apart(dual, tmp_path):
    """A text as long as the image's tokens (16 for SigLIP's 4×4 patches): the towers are still two blocks, the
    text block labelled with the words and the image block with the patches."""
    m = hf_models.build_dual("siglip")
    kw = hf_models.dual_inputs()
    ids = hf_models._ids(2, 16, 99, 7)
    kw = {**kw, "input_ids": ids, "attention_mask": torch.ones_like(ids)}
    ref, labels = hf_models.dual_reference("siglip", m, kw)
    _, res = _run(dual("siglip"), kw)
    blocks = res.blocks()
    assert [(b.kind, b.tower, b.n_layers) for b in blocks] == [
        ("self", "image", 2),
        ("pooling", "image", 1),
        ("self", "text", 2),
    ]
    assert blocks[0].key_axis.labels[0] == "(0,0)" and blocks[2].key_axis.labels[0] != "(0,0)"
    for g, r in zip(res.maps, ref):
        np.testing.assert_allclose(g.array(), r, atol=ATOL)


def test_compare_keeps_the_towers_apart(dual, reference):
    """attnviz compare matches sites by stack, kind, layer — and tower: CLIP against itself compares each tower's
    layer with itself (all zero), none with the other tower's layer of the same number."""
    from attnviz.corpus.compare import compare_results

    kw, _, _ = reference("clip")
    _, res = _run(dual("clip"), kw)
    comp = compare_results(res, res, {k: v.numpy() for k, v in kw.items()})
    assert not comp.unmatched
    sites = sorted({(r["stack"], r["kind"], r["layer"]) for r in comp.heads})
    assert sites == [("encoder (image)", "self", 0), ("encoder (image)", "self", 1)] + [
        ("encoder (text)", "self", 0),
        ("encoder (text)", "self", 1),
    ]
    assert all(r["max_abs_diff"] == 0.0 for r in comp.heads)
