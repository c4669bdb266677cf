"""Architectures researchers export with plain ``optimum-cli export onnx`` (the sweep is bench/optimum_zoo.py; these
hold what it found): BERT takes token_type_ids, OPT learned absolute positions (left padding), Llama has grouped-query attention and a GQA KV cache, Swin attends
within windows.

Random-init tiny models (weights drawn wide, so heads differ by far more than the tolerance) are exported with
optimum-onnx in the second venv (tests/optimum_env.py); references are transformers' own eager
``output_attentions`` of the same saved weights on a batch of 2 with one row right-padded, and its greedy
``generate``.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from attnviz import AttnvizError  # noqa: E402
from attnviz.cli import main  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402

TOL = 5e-4
pytestmark = pytest.mark.slow


def _padded_batch():
    ids = torch.randint(3, 99, (2, 7), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, -2:] = 0
    ids[mask == 0] = 0  # as a tokenizer pads
    return ids, mask


def _check_real(result, refs, mask, labels):
    """Every map equals transformers' on the real query and key positions (padded rows are not compared)."""
    assert [(s.stack, s.kind, s.layer) for s in result.sites] == labels
    real = mask.numpy().astype(bool)
    for got, want, s in zip(result.maps, refs, result.sites):
        a, w = got.array(), want.numpy()
        assert a.shape == w.shape, (s, a.shape)
        # heads differ far more than TOL: a map from another head or layer could not pass
        assert np.abs(w - w.mean(1, keepdims=True)).max() > 100 * TOL
        for b, keep in enumerate(real):
            np.testing.assert_allclose(
                a[b][:, keep][..., keep], w[b][:, keep][..., keep], atol=TOL, err_msg=f"{s} row {b}"
            )


def test_bert_raw_feeds_without_token_type_ids(optimum_export, tmp_path, capsys):
    """optimum's BERT export takes token_type_ids; feeds of input_ids + attention_mask alone (what most code saves)
    get transformers' default, one segment of zeros, instead of a refusal."""
    root = optimum_export("bert")
    hf = transformers.BertModel.from_pretrained(root / "hf", attn_implementation="eager").eval()
    ids, mask = _padded_batch()
    with torch.no_grad():
        o = hf(input_ids=ids, attention_mask=mask, output_attentions=True)
    m = open_model(root / "onnx", provider="cpu")
    assert "token_type_ids" in [i.name for i in m.inputs]
    r = m.analyze(feeds={"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
    _check_real(r, o.attentions, mask, [("encoder", "self", 0), ("encoder", "self", 1)])
    # given token types still win: segment 1 changes the maps, exactly as in transformers
    tt = torch.ones_like(ids)
    with torch.no_grad():
        o1 = hf(input_ids=ids, attention_mask=mask, token_type_ids=tt, output_attentions=True)
    r1 = m.analyze(feeds={"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "token_type_ids": tt.numpy()})
    _check_real(r1, o1.attentions, mask, [("encoder", "self", 0), ("encoder", "self", 1)])
    assert np.abs(r1.maps[1].array() - r.maps[1].array()).max() > 100 * TOL
    npz = tmp_path / "feeds.npz"
    np.savez(npz, input_ids=ids.numpy(), attention_mask=mask.numpy())
    assert main(["extract", str(root / "onnx"), "--inputs", str(npz), "--out", str(tmp_path / "maps.npz")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "maps.npz")["attn_001"][0], o.attentions[1][0].numpy(), atol=TOL)


def test_llama_gqa_maps_and_generation_through_its_cache(optimum_export):
    """4 query heads over 2 KV heads: 4 maps per layer, each its own query head's; the GQA cache (2 heads) gives
    transformers' greedy tokens."""
    root = optimum_export("llama")
    hf = transformers.LlamaForCausalLM.from_pretrained(root / "hf", attn_implementation="eager").eval()
    assert hf.config.num_key_value_heads == 2
    ids, mask = _padded_batch()
    with torch.no_grad():
        o = hf(input_ids=ids, attention_mask=mask, output_attentions=True)
    m = open_model(root / "onnx", provider="cpu")
    r = m.analyze(feeds={"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
    _check_real(r, o.attentions, mask, [("decoder", "self", 0), ("decoder", "self", 1)])
    assert [s.heads for s in r.sites] == [4, 4]
    prompt = ids[:1]
    with torch.no_grad():
        want = hf.generate(
            input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=6, do_sample=False, num_beams=1
        )[0].tolist()
    g = m.analyze(feeds={"input_ids": prompt.numpy(), "attention_mask": np.ones_like(prompt.numpy())}, generate=6)
    assert g.info["generation"] == "kv-cache"
    got = prompt[0].tolist() + g.info["generated_ids"]
    assert len(got) > prompt.shape[1] and got == want[: len(got)]


def test_opt_left_padded_row_has_its_own_maps(optimum_export):
    """OPT's export takes position_ids for its learned absolute positions.  Filled 0..T-1, a left-padded row's real
    tokens sat at shifted positions (maps off by up to 0.98); counted over real tokens, as transformers' OPT and
    optimum's own ORTModel count them, the row's maps are transformers' and those of the row alone."""
    root = optimum_export("opt")
    hf = transformers.OPTForCausalLM.from_pretrained(root / "hf", attn_implementation="eager").eval()
    ids, _ = _padded_batch()
    mask = torch.ones_like(ids)
    mask[1, :2] = 0  # row 1 padded on the left, as batched generation pads
    ids[mask == 0] = 0
    with torch.no_grad():
        o = hf(input_ids=ids, attention_mask=mask, output_attentions=True)
    m = open_model(root / "onnx", provider="cpu")
    assert "position_ids" in [i.name for i in m.inputs]
    r = m.analyze(feeds={"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
    _check_real(r, o.attentions, mask, [("decoder", "self", 0), ("decoder", "self", 1)])
    alone = m.analyze(feeds={"input_ids": ids[1:, 2:].numpy(), "attention_mask": mask[1:, 2:].numpy()})
    for a, b in zip(r.maps, alone.maps):
        np.testing.assert_allclose(a.array()[1][:, 2:, 2:], b.array()[0], atol=TOL)


def test_swin_windowed_attention_is_refused_in_one_line(optimum_export, tmp_path, capsys):
    """Swin's attention is [batch·windows, heads, N, N]: shown as it comes, one image would pass for a batch of 4
    with 16 tokens each.  attnviz says what it is instead of showing windows as batch rows."""
    root = optimum_export("swin")
    hf = transformers.SwinModel.from_pretrained(root / "hf", attn_implementation="eager").eval()
    px = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        o = hf(pixel_values=px, output_attentions=True)
    assert o.attentions[-1].shape == (4, 4, 16, 16)  # what transformers itself returns: windows on the batch axis
    m = open_model(root / "onnx", provider="cpu")
    with pytest.raises(AttnvizError, match=r"attends within windows \(4 windows of 16 patches per image"):
        m.analyze(feeds={"pixel_values": px.numpy()})
    img = tmp_path / "x.png"
    pytest.importorskip("PIL.Image").fromarray(np.zeros((32, 32, 3), np.uint8)).save(img)
    capsys.readouterr()  # transformers' own loading progress above
    assert main(["extract", str(root / "onnx"), "--image", str(img), "--out", str(tmp_path / "m.npz")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "windowed-attention models are not supported" in err
    assert not (tmp_path / "m.npz").exists()
    # a corpus run over images meets it at its first batch: the same line, and no results folder left behind
    out = tmp_path / "corpus"
    args = ["corpus", str(root / "onnx"), "--images", str(tmp_path), "--out", str(out), "--no-progress"]
    assert main([*args, "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "windowed-attention models are not supported" in err
    assert not out.exists()
