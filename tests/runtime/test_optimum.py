"""Hugging Face optimum export folders: the folder is one model, and so is each file alone.

Random-init tiny Marian and GPT-2 models are exported with optimum-onnx in a second venv (see
tests/optimum_env.py); the references are transformers' own eager ``output_attentions`` of the same saved
weights, on a padded batch of 2, and transformers' greedy ``generate``.
"""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from attnviz.cli import main  # noqa: E402
from attnviz.runtime import AttentionModel, ModelSet, open_model  # noqa: E402

TOL = 5e-4
pytestmark = pytest.mark.slow


def _ids(b, t, seed):
    return torch.randint(3, 99, (b, t), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def marian(optimum_export):
    root = optimum_export("marian")
    hf = transformers.MarianMTModel.from_pretrained(root / "hf", attn_implementation="eager").eval()
    ids = _ids(2, 7, 1)
    mask = torch.ones_like(ids)
    mask[1, -2:] = 0
    kw = {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": _ids(2, 5, 2)}
    with torch.no_grad():
        o = hf(**kw, output_attentions=True)
    return root, hf, {k: v.numpy() for k, v in kw.items()}, o


@pytest.fixture(scope="module")
def gpt2(optimum_export):
    root = optimum_export("gpt2")
    hf = transformers.GPT2LMHeadModel.from_pretrained(root / "hf", attn_implementation="eager").eval()
    ids = _ids(2, 6, 3)
    mask = torch.ones_like(ids)
    mask[1, -2:] = 0
    with torch.no_grad():
        o = hf(input_ids=ids, attention_mask=mask, output_attentions=True)
    return root, hf, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}, o


def _check(result, refs, labels):
    assert [(s.stack, s.kind, s.layer) for s in result.sites] == labels
    for got, want, s in zip(result.maps, refs, result.sites):
        a = got.array()
        assert a.shape == tuple(want.shape), (s, a.shape)
        np.testing.assert_allclose(a, want.numpy(), atol=TOL, err_msg=str(s))


def _marian_canon(o):
    refs = list(o.encoder_attentions)
    for s, c in zip(o.decoder_attentions, o.cross_attentions):
        refs += [s, c]
    labels = [("encoder", "self", i) for i in range(2)] + [
        x for i in range(2) for x in (("decoder", "self", i), ("decoder", "cross", i))
    ]
    return refs, labels


def test_marian_folder_is_one_encoder_decoder(marian, tmp_path):
    root, _, feeds, o = marian
    m = open_model(root / "onnx", provider="cpu")
    assert isinstance(m, ModelSet) and m.kind == "encoder-decoder"
    npz = tmp_path / "feeds.npz"  # keyed by the original model's input names
    np.savez(npz, **feeds)
    r = m.analyze(feeds=str(npz))
    refs, labels = _marian_canon(o)
    _check(r, refs, labels)
    assert r.batch_size == 2 and r.blocks(1)[0].key_axis.special[-2:] == [True, True]  # padding is special
    assert r.tokens.labels[0] == f"w{feeds['input_ids'][0, 0] - 3}"  # token axes from the folder's tokenizer.json


def test_marian_folder_with_padded_decoder_rows(marian):
    """decoder_attention_mask (right padding) as transformers takes it: the optimum decoder files have no decoder
    mask, and with causal attention no real token sees a later pad, so every real query row is transformers' own;
    padded positions are labelled special and a pad's key gets no weight from a real token."""
    root, hf, feeds, _ = marian
    dmask = np.ones_like(feeds["decoder_input_ids"])
    dmask[0, -3:] = 0
    kw = {k: torch.tensor(v) for k, v in feeds.items()}
    with torch.no_grad():
        o = hf(**kw, decoder_attention_mask=torch.tensor(dmask), output_attentions=True)
    refs, labels = _marian_canon(o)
    r = open_model(root / "onnx", provider="cpu").analyze(feeds={**feeds, "decoder_attention_mask": dmask})
    assert [(s.stack, s.kind, s.layer) for s in r.sites] == labels
    real = dmask[0].astype(bool)
    for got, want, s in zip(r.maps, refs, r.sites):
        a, w = got.array(), want.numpy()
        if s.stack == "encoder":
            np.testing.assert_allclose(a, w, atol=TOL, err_msg=str(s))
            continue
        np.testing.assert_allclose(a[1], w[1], atol=TOL, err_msg=str(s))  # the unpadded row: every query
        np.testing.assert_allclose(a[0][:, real], w[0][:, real], atol=TOL, err_msg=str(s))
        if s.kind == "self":
            assert np.all(a[0][:, real][..., ~real] == 0)
    dec_block = next(b for b in r.blocks(0) if b.name == "decoder self-attention")
    assert dec_block.key_axis.special[-3:] == [True, True, True]


def test_marian_each_file_alone(marian):
    root, hf, feeds, o = marian
    refs, labels = _marian_canon(o)
    enc = open_model(root / "onnx" / "encoder_model.onnx", provider="cpu")
    assert isinstance(enc, AttentionModel)
    r = enc.analyze(feeds={k: feeds[k] for k in ("input_ids", "attention_mask")})
    _check(r, refs[:2], labels[:2])
    dec = open_model(root / "onnx" / "decoder_model.onnx", provider="cpu")
    r = dec.analyze(
        feeds={
            "input_ids": feeds["decoder_input_ids"],
            "encoder_attention_mask": feeds["attention_mask"],
            "encoder_hidden_states": o.encoder_last_hidden_state.numpy(),
        }
    )
    _check(r, refs[2:], labels[2:])


def test_gpt2_folder_and_file_with_empty_past(gpt2):
    root, _, feeds, o = gpt2
    labels = [("decoder", "self", i) for i in range(2)]
    for target in (root / "onnx", root / "onnx" / "model.onnx"):
        m = open_model(target, provider="cpu")
        r = m.analyze(feeds=feeds)  # past_key_values.* are fed empty, position_ids as transformers makes them
        _check(r, o.attentions, labels)
        assert r.batch_size == 2


def _hf_greedy(hf, steps, **kw):
    with torch.no_grad():
        out = hf.generate(
            **kw,
            max_new_tokens=steps,
            do_sample=False,
            num_beams=1,
            forced_eos_token_id=None,
            bad_words_ids=None,
            min_length=0,
        )
    return [int(t) for t in out[0]]


def test_marian_generation_with_cache_equals_transformers_and_full_rerun(marian):
    root, hf, feeds, _ = marian
    m = open_model(root / "onnx", provider="cpu")
    one = {
        "input_ids": feeds["input_ids"][:1],
        "attention_mask": feeds["attention_mask"][:1],
        "decoder_input_ids": np.array([[0]]),
    }
    r = m.analyze(feeds=one, generate=8)
    assert r.info["generation"] == "kv-cache"
    want = _hf_greedy(
        hf, 8, input_ids=torch.tensor(one["input_ids"]), attention_mask=torch.tensor(one["attention_mask"])
    )
    assert [0] + r.info["generated_ids"] == want[: 1 + len(r.info["generated_ids"])]
    full = m.analyze(feeds=one, generate=8, use_cache=False)
    assert full.info["generation"] == "full re-run" and full.info["generated_ids"] == r.info["generated_ids"]
    assert [s.label for s in r.sites] == [s.label for s in full.sites]
    for a, b in zip(r.maps, full.maps):
        np.testing.assert_allclose(a.array(), b.array(), atol=1e-5)


def test_gpt2_generation_with_cache_equals_transformers_and_full_rerun(gpt2):
    root, hf, feeds, _ = gpt2
    m = open_model(root / "onnx", provider="cpu")
    prompt = feeds["input_ids"][:1]
    r = m.analyze(feeds={"input_ids": prompt, "attention_mask": np.ones_like(prompt)}, generate=10)
    assert r.info["generation"] == "kv-cache"
    want = _hf_greedy(hf, 10, input_ids=torch.tensor(prompt), attention_mask=torch.ones_like(torch.tensor(prompt)))
    got = [int(t) for t in prompt[0]] + r.info["generated_ids"]
    assert got == want[: len(got)]
    full = m.analyze(feeds={"input_ids": prompt, "attention_mask": np.ones_like(prompt)}, generate=10, use_cache=False)
    assert full.info["generated_ids"] == r.info["generated_ids"]
    for a, b in zip(r.maps, full.maps):
        assert a.shape == b.shape == (1, 4, len(got) - 1, len(got) - 1)
        np.testing.assert_allclose(a.array(), b.array(), atol=1e-5)


def test_cli_on_the_folder(marian, tmp_path, capsys):
    root, _, feeds, o = marian
    folder = root / "onnx"
    assert main(["inspect", str(folder), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kind"] == "encoder-decoder" and [i["name"] for i in d["inputs"]] == [
        "input_ids",
        "attention_mask",
        "decoder_input_ids",
        "decoder_attention_mask",
    ]
    assert [(s["stack"], s["kind"], s["layer"]) for s in d["sites"]] == _marian_canon(o)[1]
    npz = tmp_path / "feeds.npz"
    np.savez(npz, **feeds)
    out = tmp_path / "maps.npz"
    assert main(["extract", str(folder), "--inputs", str(npz), "--out", str(out)]) == 0
    assert f"from {root.name}/onnx on" in capsys.readouterr().out  # optimum's onnx/ alone says little
    z = np.load(out)
    np.testing.assert_allclose(z["attn_003"], o.cross_attentions[0].numpy(), atol=TOL)
    fig = tmp_path / "cross.png"
    assert (
        main(
            [
                "figure",
                str(folder),
                "--text",
                "w1 w2 w3",
                "--generate",
                "3",
                "--block",
                "decoder cross",
                "--out",
                str(fig),
                "--dpi",
                "60",
            ]
        )
        == 0
    )
    assert fig.stat().st_size > 0
    assert main(["extract", str(tmp_path), "--text", "w1", "--out", str(tmp_path / "x.npz")]) == 2
    assert "no .onnx file in this folder" in capsys.readouterr().err


def test_marian_merged_and_with_past_files_alone(marian):
    """decoder_model_merged.onnx (the decoder inside an If on use_cache_branch) gives the same maps and labels as
    transformers with the cache branch off; decoder_with_past_model.onnx alone labels cross-attention (keys from
    the encoder half of the cache) as cross, layers numbered per kind."""
    root, hf, feeds, o = marian
    refs, labels = _marian_canon(o)
    merged = open_model(root / "onnx" / "decoder_model_merged.onnx", provider="cpu")
    f = {
        "input_ids": feeds["decoder_input_ids"],
        "encoder_attention_mask": feeds["attention_mask"],
        "encoder_hidden_states": o.encoder_last_hidden_state.numpy(),
    }
    batch = f["input_ids"].shape[0]
    for i in merged.inputs:  # the first step of a merged decoder: empty cache, cache branch off
        if i.name.startswith("past_key_values"):
            f[i.name] = np.zeros(
                [batch if ax == 0 else (0 if isinstance(d, str) else d) for ax, d in enumerate(i.shape)], np.float32
            )
        elif i.name == "use_cache_branch":
            f[i.name] = np.zeros([1 if isinstance(d, str) else d for d in i.shape], bool)
    r = merged.analyze(feeds=f)
    assert len(r.maps) == len(refs[2:])  # both If branches hold the layers: the same sites, not twice as many
    _check(r, refs[2:], labels[2:])
    past = open_model(root / "onnx" / "decoder_with_past_model.onnx", provider="cpu")
    assert [(s.stack, s.kind, s.layer) for s in past.sites] == labels[2:]
    # one cached step alone: the cache of the first tokens from plain onnxruntime on decoder_model.onnx, then the
    # last token; its maps are the last query row of transformers' (row 0)
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(str(root / "onnx" / "decoder_model.onnx"), providers=["CPUExecutionProvider"])
    ids = feeds["decoder_input_ids"][:1]
    head = {"input_ids": ids[:, :-1], "encoder_attention_mask": feeds["attention_mask"][:1]}
    head["encoder_hidden_states"] = o.encoder_last_hidden_state.numpy()[:1]
    outs = dict(zip([x.name for x in sess.get_outputs()], sess.run(None, head)))
    step = {"input_ids": ids[:, -1:], "encoder_attention_mask": head["encoder_attention_mask"]}
    step.update({i.name: outs[i.name.replace("past_key_values", "present")] for i in past.inputs if "past" in i.name})
    _check(past.analyze(feeds=step), [w[:1, :, -1:] for w in refs[2:]], labels[2:])


def test_extract_with_cache_generation_reports_the_generation_time(gpt2, tmp_path, capsys):
    """Generation through the cache has no single run: the summary gives the generation's time, not "run 0.0 ms"."""
    root, _, feeds, _ = gpt2
    npz = tmp_path / "feeds.npz"
    prompt = feeds["input_ids"][:1]
    np.savez(npz, input_ids=prompt, attention_mask=np.ones_like(prompt))
    out = tmp_path / "maps.npz"
    assert main(["extract", str(root / "onnx"), "--inputs", str(npz), "--generate", "5", "--out", str(out)]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    n = len(np.load(out)["attn_000"][0, 0]) - prompt.shape[1] + 1  # decoder rows = prompt + generated - 1
    assert f"generated {n} tokens in" in line and "(kv-cache)" in line and "run 0.0 ms" not in line


def test_gpt2_generation_loop_beside_the_session_equals_one_request_per_step(gpt2, monkeypatch):
    """Greedy steps run in chunks where the session lives (one reply per chunk, the cache never leaves it):
    chunks of one step, the default chunks, the loop in this process (ATTNVIZ_INPROCESS) and the path with one
    request per step give the same ids and the same maps; an EOS mid-chunk stops there; a cancel between
    chunks stops the generation."""
    from attnviz.runtime import model_loop as model_mod  # where the generation loop reads CHUNK_S
    from attnviz.runtime.errors import Cancelled
    from attnviz.runtime.generate import FileCache

    root, _, feeds, _ = gpt2
    prompt = feeds["input_ids"][:1]
    one = {"input_ids": prompt, "attention_mask": np.ones_like(prompt)}
    calls = []
    run_loop = AttentionModel.run_loop
    monkeypatch.setattr(AttentionModel, "run_loop", lambda self, *a: calls.append(1) or run_loop(self, *a))

    def generate(n=24, **kw):
        calls.clear()
        m = open_model(root / "onnx", provider="cpu")
        m.meta["special"] = {k: v for k, v in m.meta["special"].items() if k != "eos"}
        m.meta["special"].update(kw)
        return m.analyze(feeds=one, generate=n), len(calls)

    base, chunks = generate()
    assert chunks == 1 and len(base.info["generated_ids"]) == 24  # 23 steps after the prompt's, in one chunk
    with monkeypatch.context() as mp:
        mp.setattr(FileCache, "plan", lambda self: None)  # no loop: one request per step, as before
        per_step, chunks = generate()
        assert chunks == 0
    with monkeypatch.context() as mp:
        mp.setattr(model_mod, "CHUNK_S", 0.0)  # every chunk ends after one step
        tiny, chunks = generate()
        assert chunks == 23
    with monkeypatch.context() as mp:
        mp.setenv("ATTNVIZ_INPROCESS", "1")
        local, _ = generate()
    for other in (per_step, tiny, local):
        assert other.info["generated_ids"] == base.info["generated_ids"]
        for a, b in zip(other.maps, base.maps):
            np.testing.assert_array_equal(a.array(), b.array())
    # an EOS inside the chunk: generation stops at it, and its rows are the first rows of the longer run
    ids = base.info["generated_ids"]
    stop = next(i for i in range(3, 24) if ids[i] not in ids[:i])
    short, _ = generate(eos=ids[stop])
    assert short.info["generated_ids"] == ids[: stop + 1]
    for a, b in zip(short.maps, base.maps):
        t = a.shape[-1]
        np.testing.assert_array_equal(a.array(), b.array()[:, :, :t, :t])
    # a cancel between chunks
    m = open_model(root / "onnx", provider="cpu")
    m.meta["special"] = {}
    asked = []
    with monkeypatch.context() as mp, pytest.raises(Cancelled):
        mp.setattr(model_mod, "CHUNK_S", 0.0)
        m.analyze(feeds=one, generate=24, cancelled=lambda: asked.append(1) or len(asked) > 3)
    assert len(asked) == 4


def test_marian_generation_loop_beside_the_with_past_session_equals_one_request_per_step(marian, monkeypatch):
    """The folder's with-past decoder steps in a loop beside its session too (the encoder's states and mask
    stay fed as they are): the same ids and maps as one request per step."""
    from attnviz.runtime.folder import FolderCache

    root, _, feeds, _ = marian
    one = {"input_ids": feeds["input_ids"][:1], "attention_mask": feeds["attention_mask"][:1]}
    one["decoder_input_ids"] = np.array([[0]])
    calls = []
    run_loop = AttentionModel.run_loop
    monkeypatch.setattr(AttentionModel, "run_loop", lambda self, *a: calls.append(1) or run_loop(self, *a))

    def generate():
        m = open_model(root / "onnx", provider="cpu")
        m.meta["special"] = {}
        return m.analyze(feeds=one, generate=12)

    looped = generate()
    assert calls and len(looped.info["generated_ids"]) == 12
    calls.clear()
    monkeypatch.setattr(FolderCache, "plan", lambda self: None)
    per_step = generate()
    assert not calls and per_step.info["generated_ids"] == looped.info["generated_ids"]
    for a, b in zip(looped.maps, per_step.maps):
        np.testing.assert_array_equal(a.array(), b.array())
