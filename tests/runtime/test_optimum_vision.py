"""Vision->text optimum export folders (``--task image-to-text-with-past``): the folder is one model, and so is
each file alone.

Random-init tiny VisionEncoderDecoder models (a ViT encoder with a GPT-2 or a TrOCR decoder) are exported with
optimum-onnx in the second venv (tests/optimum_env.py).  The references are transformers' own eager
``output_attentions`` of the same saved weights on a batch of 2 images with padded captions, its image processor
for an image file, and its greedy ``generate``.
"""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
PIL = pytest.importorskip("PIL.Image")

from attnviz.cli import main  # noqa: E402
from attnviz.runtime import AttentionModel, ModelSet, open_model  # noqa: E402

TOL = 5e-4
pytestmark = pytest.mark.slow
ARCHS = ("vit-gpt2", "vit-trocr")
# canonical order: encoder self per layer, then per decoder layer its self and cross sites
LABELS = [("encoder", "self", 0), ("encoder", "self", 1)] + [
    x for i in range(2) for x in (("decoder", "self", i), ("decoder", "cross", i))
]


@pytest.fixture(scope="module", params=ARCHS)
def v2t(request, optimum_export):
    root = optimum_export(request.param)
    hf = transformers.VisionEncoderDecoderModel.from_pretrained(root / "hf", attn_implementation="eager").eval()
    px = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    dec = torch.randint(3, 99, (2, 5), generator=torch.Generator().manual_seed(1))
    dec[:, 0] = 0  # decoder_start_token_id
    mask = torch.ones_like(dec)
    mask[1, -2:] = 0  # the second caption is 3 tokens, padded on the right
    kw = {"pixel_values": px, "decoder_input_ids": dec, "decoder_attention_mask": mask}
    with torch.no_grad():
        o = hf(**kw, output_attentions=True)
    refs = list(o.encoder_attentions)
    for s, c in zip(o.decoder_attentions, o.cross_attentions):
        refs += [s, c]
    return root, hf, {k: v.numpy() for k, v in kw.items()}, o, [r.numpy() for r in refs]


def _check(result, refs, labels, mask=None):
    """Every map equals transformers'; decoder query rows that are padding (mask 0) are left out: transformers
    masks their keys, the optimum decoder files take no decoder mask, and no real token's row depends on them."""
    assert [(s.stack, s.kind, s.layer) for s in result.sites] == labels
    for got, want, s in zip(result.maps, refs, result.sites):
        a = got.array()
        assert a.shape == want.shape, (s, a.shape)
        if s.stack == "decoder" and mask is not None:
            for b, row in enumerate(mask):
                real = row.astype(bool)
                np.testing.assert_allclose(a[b][:, real], want[b][:, real], atol=TOL, err_msg=f"{s} row {b}")
                if s.kind == "self":  # padded keys get no weight from a real token
                    assert np.all(a[b][:, real][..., ~real] == 0)
        else:
            np.testing.assert_allclose(a, want, atol=TOL, err_msg=str(s))


def test_folder_is_one_vision_decoder_on_a_padded_batch(v2t, tmp_path):
    root, _, feeds, _, refs = v2t
    m = open_model(root / "onnx", provider="cpu")
    assert isinstance(m, ModelSet) and m.kind == "vision-decoder"
    assert [i.name for i in m.inputs] == ["pixel_values", "decoder_input_ids", "decoder_attention_mask"]
    npz = tmp_path / "feeds.npz"  # keyed by VisionEncoderDecoderModel's input names
    np.savez(npz, **feeds)
    r = m.analyze(feeds=str(npz))
    _check(r, refs, LABELS, feeds["decoder_attention_mask"])
    assert r.batch_size == 2  # every row kept
    # the grid comes from the graph: 32x32 pixels in 8x8 patches, CLS concatenated in front
    g = r.patch_grid
    assert (g.rows, g.cols, g.offset) == (4, 4, 1)
    cross = r.blocks(1)[[b.name for b in r.blocks(1)].index("decoder cross-attention")]
    assert cross.key_axis.labels[:2] == ["[CLS]", "(0,0)"] and len(cross.key_axis.labels) == 17
    assert cross.query_axis.special[-2:] == [True, True]  # the caption's padding is marked, not dropped
    assert cross.query_axis.labels[1] == f"w{feeds['decoder_input_ids'][1, 1] - 3}"  # folder's tokenizer.json


def test_each_file_alone(v2t):
    root, _, feeds, o, refs = v2t
    enc = open_model(root / "onnx" / "encoder_model.onnx", provider="cpu")
    assert isinstance(enc, AttentionModel) and enc.kind == "vision"
    r = enc.analyze(feeds={"pixel_values": feeds["pixel_values"]})
    _check(r, refs[:2], LABELS[:2])
    assert (r.patch_grid.rows, r.patch_grid.cols, r.patch_grid.offset) == (4, 4, 1)
    states = o.encoder_last_hidden_state.numpy()
    dec_feeds = {"input_ids": feeds["decoder_input_ids"], "encoder_hidden_states": states}
    dec = open_model(root / "onnx" / "decoder_model.onnx", provider="cpu")
    _check(dec.analyze(feeds=dec_feeds), refs[2:], LABELS[2:], feeds["decoder_attention_mask"])
    merged = open_model(root / "onnx" / "decoder_model_merged.onnx", provider="cpu")
    r = merged.analyze(feeds=dec_feeds)  # empty cache, cache branch off: filled in as a plain forward pass
    assert len(r.maps) == 4  # both If branches hold the layers: the same sites, not twice as many
    _check(r, refs[2:], LABELS[2:], feeds["decoder_attention_mask"])
    past = open_model(root / "onnx" / "decoder_with_past_model.onnx", provider="cpu")
    assert [(s.stack, s.kind, s.layer) for s in past.sites] == LABELS[2:]
    # one cached step: the cache of the first 4 tokens from plain onnxruntime on decoder_model.onnx, then the
    # last token alone; its maps are the last query row of transformers' (row 0: the unpadded caption)
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(str(root / "onnx" / "decoder_model.onnx"), providers=["CPUExecutionProvider"])
    ids = feeds["decoder_input_ids"][:1]
    outs = dict(
        zip(
            [o.name for o in sess.get_outputs()],
            sess.run(None, {"input_ids": ids[:, :-1], "encoder_hidden_states": states[:1]}),
        )
    )
    step = {"input_ids": ids[:, -1:]}
    for i in past.inputs:
        if i.name == "encoder_hidden_states":
            step[i.name] = states[:1]
        elif i.name.startswith("past_key_values"):
            step[i.name] = outs[i.name.replace("past_key_values", "present")]
    r = past.analyze(feeds=step)
    _check(r, [w[:1, :, -1:] for w in refs[2:]], LABELS[2:])


def test_an_image_file_is_preprocessed_as_the_folder_says(v2t, tmp_path):
    """preprocessor_config.json gives the size and normalisation: the maps equal transformers' on its own
    image processor's pixels."""
    root, hf, _, _, _ = v2t
    rgb = (np.random.default_rng(3).random((32, 32, 3)) * 255).astype(np.uint8)
    path = tmp_path / "scene.png"
    PIL.fromarray(rgb).save(path)
    proc = transformers.ViTImageProcessor.from_pretrained(root / "hf")
    px = proc(images=PIL.open(path), return_tensors="pt").pixel_values
    dec = torch.tensor([[0, 5, 9]])
    with torch.no_grad():
        o = hf(pixel_values=px, decoder_input_ids=dec, output_attentions=True)
    m = open_model(root / "onnx", provider="cpu")
    r = m.analyze(image=str(path), text="w2 w6")  # the caption so far: decoder start + two words
    np.testing.assert_allclose(r.maps[0].array(), o.encoder_attentions[0].numpy(), atol=TOL)
    np.testing.assert_allclose(r.maps[-1].array(), o.cross_attentions[-1].numpy(), atol=TOL)
    assert r.image.shape == (32, 32, 3)


def _hf_greedy(hf, px, steps):
    with torch.no_grad():
        out = hf.generate(pixel_values=px, max_new_tokens=steps, do_sample=False, num_beams=1)
    return [int(t) for t in out[0]]


def test_generation_with_cache_equals_transformers_and_full_rerun(v2t):
    root, hf, feeds, _, _ = v2t
    m = open_model(root / "onnx", provider="cpu")
    one = {"pixel_values": feeds["pixel_values"][1:], "decoder_input_ids": np.array([[0]])}
    r = m.analyze(feeds=one, generate=8)
    assert r.info["generation"] == "kv-cache"
    assert r.info["model"] == root.name  # the folder's name (optimum's onnx/ says little), not the with-past file's
    want = _hf_greedy(hf, torch.tensor(one["pixel_values"]), 8)
    got = [0] + r.info["generated_ids"]
    assert len(set(got)) > 2 and got == want[: len(got)]  # a caption that changes, not one repeated token
    full = m.analyze(feeds=one, generate=8, use_cache=False)
    assert full.info["generation"] == "full re-run" and full.info["generated_ids"] == r.info["generated_ids"]
    assert [s.label for s in r.sites] == [s.label for s in full.sites]
    n = len(got) - 1  # query rows: the start token and every generated word but the last
    for a, b, s in zip(r.maps, full.maps, r.sites):
        assert a.shape == b.shape and (s.stack == "encoder" or a.shape[2] == n)
        np.testing.assert_allclose(a.array(), b.array(), atol=1e-5, err_msg=str(s))


def test_cli_on_the_folder(v2t, tmp_path, capsys):
    root, _, feeds, o, refs = v2t
    folder = root / "onnx"
    assert main(["inspect", str(folder), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kind"] == "vision-decoder"
    assert [(s["stack"], s["kind"], s["layer"]) for s in d["sites"]] == LABELS
    assert d["probed"] and [s["heads"] for s in d["sites"]] == [4] * 6  # a dummy image at the folder's size
    npz = tmp_path / "feeds.npz"
    np.savez(npz, **feeds)
    out = tmp_path / "maps.npz"
    assert main(["extract", str(folder), "--inputs", str(npz), "--out", str(out)]) == 0
    z = np.load(out)
    np.testing.assert_allclose(z["attn_000"], refs[0], atol=TOL)
    np.testing.assert_allclose(z["attn_003"][0], refs[3][0], atol=TOL)  # decoder cross, first row (unpadded)
    img = tmp_path / "scene.png"
    PIL.fromarray((np.random.default_rng(4).random((48, 64, 3)) * 255).astype(np.uint8)).save(img)
    fig = tmp_path / "regions.png"
    args = ["figure", str(folder), "--image", str(img), "--text", "w3 w4", "--view", "image"]
    assert main([*args, "--block", "decoder cross", "--query", "2", "--out", str(fig), "--dpi", "60"]) == 0
    assert fig.stat().st_size > 0
    # left padding cannot be given to a decoder file without a mask: one line, exit 2, not a silent wrong map
    bad = dict(feeds, decoder_attention_mask=feeds["decoder_attention_mask"][:, ::-1].copy())
    np.savez(npz, **bad)
    capsys.readouterr()
    assert main(["extract", str(folder), "--inputs", str(npz), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pad decoder_input_ids on the right" in err[0]


def test_a_folder_with_only_the_merged_decoder(v2t, tmp_path):
    """encoder_model.onnx + decoder_model_merged.onnx alone: the merged file runs full sequences with its cache
    branch off and generation steps with it on (TrOCR's merged file returns an empty placeholder for the
    encoder half of the cache in that branch: the half from the first run is kept)."""
    root, _, feeds, _, refs = v2t
    for f in (root / "onnx").iterdir():
        if f.name not in ("decoder_model.onnx", "decoder_with_past_model.onnx"):
            (tmp_path / f.name).write_bytes(f.read_bytes())
    m = open_model(tmp_path, provider="cpu")
    assert isinstance(m, ModelSet) and m.layout.decoder.name == "decoder_model_merged.onnx"
    _check(m.analyze(feeds=feeds), refs, LABELS, feeds["decoder_attention_mask"])
    one = {"pixel_values": feeds["pixel_values"][1:], "decoder_input_ids": np.array([[0]])}
    r = m.analyze(feeds=one, generate=8)
    full = open_model(root / "onnx", provider="cpu").analyze(feeds=one, generate=8, use_cache=False)
    assert r.info["generation"] == "kv-cache" and r.info["generated_ids"] == full.info["generated_ids"]
    for a, b, s in zip(r.maps, full.maps, r.sites):
        np.testing.assert_allclose(a.array(), b.array(), atol=1e-5, err_msg=str(s))
