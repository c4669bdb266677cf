"""`attnviz export-hf`: local Hugging Face folders (random-init BERT, GPT-2, BART, ViT, ViT->GPT-2) -> ONNX exports
whose maps, read back by attnviz on NEW inputs, equal transformers' own eager attentions."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import hf_models  # noqa: E402

from attnviz.cli import main  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
ARCHS = {  # arch -> (task written, model kind attnviz reports)
    "bert": ("text-encoder", "encoder"),
    "gpt2": ("text-generation", "decoder"),
    "bart": ("text2text-generation", "encoder-decoder"),
    "vit": ("image-encoder", "vision"),
    "vision-decoder": ("image-to-text", "vision-decoder"),
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    cache = {}

    def get(arch):
        if arch not in cache:
            root = tmp_path_factory.mktemp(arch)
            src = hf_models.save_hf_folder(arch, root / "hf")
            assert main(["export-hf", str(src), "--out", str(root / "onnx")]) == 0
            cache[arch] = (src, root / "onnx")
        return cache[arch]

    return get


def _reference(src, kw):
    m = transformers.AutoConfig.from_pretrained(str(src)).architectures[0]
    model = getattr(transformers, m).from_pretrained(str(src), attn_implementation="eager").eval()
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("eager")
    with torch.no_grad():
        o = model(**kw, output_attentions=True)
    enc = getattr(o, "encoder_attentions", None)
    if enc is None:
        return [a.numpy() for a in o.attentions]
    out = [a.numpy() for a in enc]
    for s, c in zip(o.decoder_attentions, o.cross_attentions):
        out += [s.numpy(), c.numpy()]
    return out


def _assert_equal(got, ref):
    assert len(got) == len(ref) > 0
    for g, r in zip(got, ref):
        assert g.shape == r.shape
        np.testing.assert_allclose(g, r, atol=1e-4, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("arch", list(ARCHS))
def test_export_hf_maps_equal_transformers(exported, arch, tmp_path, capsys):
    src, out = exported(arch)
    assert {"config.json", "model.onnx"} <= {p.name for p in out.iterdir()}
    model = open_model(out / "model.onnx", provider="cpu")
    meta = model.meta
    task, kind = ARCHS[arch]
    assert meta["task"] == task and model.kind == kind
    assert (
        meta["config"]["source"] == "huggingface"
        and meta["config"]["architecture"] == type(hf_models.build(arch)[0]).__name__
    )
    text = "the dog ran to the park of red image"  # not the texts export-hf checked with
    tok = transformers.AutoTokenizer.from_pretrained(str(src)) if arch != "vit" else None
    if arch == "bert":  # through the tokenizer.json copied beside the model
        assert (out / "tokenizer.json").read_bytes() == (src / "tokenizer.json").read_bytes()
        r = model.analyze(text=text)
        enc = tok(text, return_tensors="pt")
        assert r.info.get("kind", kind) == "encoder"
        _assert_equal([m.array() for m in r.maps], _reference(src, dict(enc)))
        assert meta["special"]["cls"] == tok.cls_token_id and meta["inputs"]["token_type_ids"] == "token_types"
    elif arch in ("gpt2", "bart"):
        ids = tok(text, return_tensors="pt")["input_ids"]
        kw = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if arch == "bart":
            kw["decoder_input_ids"] = torch.tensor([[4, 7, 9, 11]])
            assert meta["special"]["decoder_start"] == 4
        r = model.analyze(feeds={k: v.numpy() for k, v in kw.items()})
        _assert_equal([m.array() for m in r.maps], _reference(src, kw))
    else:  # images: the file's preprocessing (ImageNet statistics) is what the metadata carries
        pre = json.loads((src / "preprocessor_config.json").read_text())
        assert meta["image"]["mean"] == pre["image_mean"] and meta["image"]["preset"] == "imagenet"
        assert meta["image"]["grid"] == [4, 4] and meta["image"]["offset"] == 1  # 32 px / 8 px patches + CLS
        rng = np.random.default_rng(3)
        img_path = tmp_path / "in.png"
        from PIL import Image

        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(img_path)
        pix = transformers.ViTImageProcessor.from_pretrained(str(src))(Image.open(img_path), return_tensors="pt")[
            "pixel_values"
        ]
        kw = {"pixel_values": pix}
        feeds = None
        if arch == "vision-decoder":
            kw["decoder_input_ids"] = torch.tensor([[4, 8, 12]])
            feeds = {"decoder_input_ids": kw["decoder_input_ids"].numpy()}
        r = model.analyze(image=str(img_path), feeds=feeds)
        _assert_equal([m.array() for m in r.maps], _reference(src, kw))


def test_export_hf_refuses_bad_folders_and_writes_nothing(tmp_path, capsys):
    empty = tmp_path / "nothing"
    empty.mkdir()
    assert main(["export-hf", str(empty), "--out", str(tmp_path / "o1")]) == 2
    assert "no config.json" in capsys.readouterr().err and not (tmp_path / "o1").exists()
    assert main(["export-hf", str(tmp_path / "missing"), "--out", str(tmp_path / "o2")]) == 2
    assert "no such folder" in capsys.readouterr().err
    src = hf_models.save_hf_folder("bert", tmp_path / "hf")
    capsys.readouterr()  # transformers' own "Writing model shards" bar, when this test runs alone
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("user file")
    assert main(["export-hf", str(src), "--out", str(busy)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        f"attnviz: error: --out {busy} is not empty (keep.txt); choose an empty folder or pass --overwrite to replace it"
    )
    # --overwrite replaces an earlier export, never the user's own files
    assert main(["export-hf", str(src), "--out", str(busy), "--overwrite"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds no earlier export to replace" in err[0] and "choose an empty folder" in err[0]
    assert [p.name for p in busy.iterdir()] == ["keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy", "hf", "nothing"]  # no staging folder left behind


def test_export_hf_overwrite_replaces_an_earlier_export_as_train_does(tmp_path, capsys):
    """The same flag and wording as `attnviz train --overwrite`: a second export into the folder is refused with
    the flag named, and with it the folder holds the new export alone (a GPT-2 over a BERT: nothing of the BERT's
    left, no staging or old folder beside it)."""
    from attnviz.training.checkpoint import check_run_folder

    out = tmp_path / "onnx"
    bert = hf_models.save_hf_folder("bert", tmp_path / "bert")
    gpt2 = hf_models.save_hf_folder("gpt2", tmp_path / "gpt2")
    assert main(["export-hf", str(bert), "--out", str(out)]) == 0
    before = sorted(p.name for p in out.iterdir())
    capsys.readouterr()
    assert main(["export-hf", str(gpt2), "--out", str(out)]) == 2
    said = capsys.readouterr().err.strip()
    with pytest.raises(Exception) as trained:  # train's own refusal of a folder that is not its run
        check_run_folder(out, "translation")
    assert said.endswith("choose an empty folder or pass --overwrite to replace it")
    assert str(trained.value).endswith("choose an empty folder or pass --overwrite to replace it")
    assert sorted(p.name for p in out.iterdir()) == before  # the refusal changed nothing
    assert main(["export-hf", str(gpt2), "--out", str(out), "--overwrite"]) == 0
    assert open_model(out / "model.onnx").kind == "decoder"  # the GPT-2's, causal
    assert {p.name for p in out.iterdir()} == {p.name for p in gpt2.iterdir() if p.suffix == ".json"} | {"model.onnx"}
    for name in ("config.json", "tokenizer.json"):  # the GPT-2's copied files, not the BERT's left behind
        assert (out / name).read_bytes() == (gpt2 / name).read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bert", "gpt2", "onnx"]


def test_export_hf_reports_a_failed_check_and_publishes_nothing(tmp_path, monkeypatch, capsys):
    from attnviz.training import hf_export

    src = hf_models.save_hf_folder("bert", tmp_path / "hf")
    real = hf_export.reference_maps

    def off_by_a_bit(model, kw):  # transformers "disagrees": the export must not be published
        maps, labels, out = real(model, kw)
        return [m + 1e-3 for m in maps], labels, out

    monkeypatch.setattr(hf_export, "reference_maps", off_by_a_bit)
    assert main(["export-hf", str(src), "--out", str(tmp_path / "out")]) == 2
    assert "export check failed" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]
