"""Issue 22 item 3, Hub layouts: a repository's onnx/ folder holds quantized siblings of the three files
(``vision_encoder_int8.onnx``, ``embed_tokens_int8.onnx``, ``decoder_model_merged_int8.onnx``, ...).  Opening the
repository picks full precision, ``inspect`` lists the variants, ``--variant NAME`` opens one (here onnxruntime's
quantize_dynamic copies of the tiny LLaVA's files)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from PIL import Image

from attnviz import AttnvizError
from attnviz.cli import main
from attnviz.runtime import open_model
from attnviz.runtime.vlm import VLMSet

PROMPT = "<s> <image> a photo of the cat"
FILES = ("vision_encoder", "embed_tokens", "decoder_model_merged")


@pytest.fixture
def repo(llava_variants_repo):
    return llava_variants_repo


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    p = tmp_path_factory.mktemp("img") / "photo.png"
    Image.fromarray((np.random.default_rng(3).random((32, 32, 3)) * 255).astype(np.uint8)).save(p)
    return p


def test_the_repository_opens_at_full_precision_and_lists_its_variants(repo):
    m = open_model(repo, provider="cpu")
    assert isinstance(m, VLMSet) and m.layout.variant == "full"
    assert [p.name for p in (m.layout.vision, m.layout.embed, m.layout.decoder)] == [f"{f}.onnx" for f in FILES]
    d = m.describe()
    assert d["variant"] == "full" and d["variants"] == ["full", "int8", "uint8"]


@pytest.mark.parametrize("name", ["int8", "_uint8"])
def test_a_variant_opens_its_own_three_files_and_runs(repo, image, name):
    full = open_model(repo, provider="cpu").analyze(text=PROMPT, image=str(image))
    m = open_model(repo, provider="cpu", variant=name)
    suffix = name.lstrip("_")
    assert [p.name for p in (m.layout.vision, m.layout.embed, m.layout.decoder)] == [
        f"{f}_{suffix}.onnx" for f in FILES
    ]
    r = m.analyze(text=PROMPT, image=str(image))
    assert [mp.shape for mp in r.maps] == [mp.shape for mp in full.maps]
    # the quantized vision tower ran: its maps differ from full precision's, a little
    diff = np.abs(r.maps[0].array() - full.maps[0].array()).max()
    assert 0 < diff < 0.1


def test_a_missing_variant_or_full_precision_is_one_line(repo, tmp_path):
    with pytest.raises(
        AttnvizError, match=r"no 'q4' set of .*its variants: full, int8, uint8 \(choose one with --variant"
    ):
        open_model(repo, provider="cpu", variant="q4")
    only = tmp_path / "quantized-only"
    shutil.copytree(repo, only)
    for f in FILES:
        (only / "onnx" / f"{f}.onnx").unlink()
    with pytest.raises(AttnvizError, match="no full-precision set .*its variants: int8, uint8"):
        open_model(only, provider="cpu")
    with pytest.raises(AttnvizError, match="--variant chooses among a Hub repository's quantized siblings"):
        open_model(repo / "onnx" / "embed_tokens.onnx", provider="cpu", variant="int8")


@pytest.mark.parametrize("gone", FILES)
def test_a_set_missing_one_of_its_three_files_names_it(repo, image, tmp_path, capsys, gone):
    """A download cut short (one of the three files not there): the folder opened its decoder alone, as a model of
    numeric series, and then told the user to give numbers instead of their image; the line names the missing file."""
    cut = tmp_path / "cut"
    shutil.copytree(repo, cut, ignore=shutil.ignore_patterns("*_int8.onnx", "*_uint8.onnx"))
    (cut / "onnx" / f"{gone}.onnx").unlink()
    for opened in (cut, cut / "onnx"):
        argv = ["extract", str(opened), "--image", str(image), "--text", PROMPT, "--out", str(tmp_path / "m.npz")]
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("attnviz: error:") and "\n" not in err, err
        assert f"and no {gone}.onnx" in err and f"download {gone}.onnx again" in err, err
    assert not (tmp_path / "m.npz").exists()
    alone = next(f for f in FILES if f not in (gone, "embed_tokens"))  # a file with attention, opened by its name
    assert open_model(cut / "onnx" / f"{alone}.onnx", provider="cpu").sites


def test_the_cli_lists_and_takes_variants(repo, image, tmp_path, capsys):
    assert main(["inspect", str(repo), "--no-probe"]) == 0
    assert "variant  full (of full, int8, uint8; choose with --variant NAME)" in capsys.readouterr().out
    assert main(["inspect", str(repo), "--no-probe", "--json", "--variant", "int8"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["variant"] == "int8" and d["files"][0] == "vision_encoder_int8.onnx"
    out = tmp_path / "maps.npz"
    assert (
        main(["extract", str(repo), "--variant", "uint8", "--text", PROMPT, "--image", str(image), "--out", str(out)])
        == 0
    )
    assert out.is_file()
    assert main(["inspect", str(repo), "--variant", "q4"]) == 2
    assert "its variants: full, int8, uint8" in capsys.readouterr().err


def test_compare_full_precision_with_a_quantized_variant_of_one_repository(repo, image, tmp_path, capsys):
    """``compare REPO REPO --variant-b int8``: the heads are compared between the repository's full-precision and
    int8 files; each head's JS divergence equals one computed by hand from the two variants' own runs."""
    from attnviz.core.compare import head_differences

    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "cmp"
    args = ["compare", str(repo), str(repo), "--variant-b", "int8", "--image", str(image), "--text", PROMPT]
    assert main([*args, "--out", str(out)]) == 0
    run = json.loads((out / "run.json").read_text())
    assert [run["models"][k]["variant"] for k in "AB"] == ["full", "int8"]
    rows = pq.read_table(out / "heads.parquet").to_pylist()
    full = open_model(repo, provider="cpu").analyze(text=PROMPT, image=str(image))
    q = open_model(repo, provider="cpu", variant="int8").analyze(text=PROMPT, image=str(image))
    want = np.concatenate(
        [head_differences(a.array(), b.array(), None).js_divergence for a, b in zip(full.maps, q.maps)]
    )
    np.testing.assert_allclose([r["js_divergence"] for r in rows], want, atol=1e-9)
    assert max(want) > 0  # the int8 files really ran
    texts = tmp_path / "t.txt"
    texts.write_text("a photo\n")
    assert main([*args[:3], "--texts", str(texts), "--variant-b", "int8", "--out", str(tmp_path / "c2")]) == 2
    assert "--variant-b" in capsys.readouterr().err  # a corpus run compares whole models: refused, not ignored


def test_the_repository_hash_covers_its_onnx_folder(repo, tmp_path):
    """Two repositories with the same configs and different weights in onnx/ are told apart."""
    from attnviz.corpus.items import sha256_model

    other = tmp_path / "other"
    shutil.copytree(repo, other)
    before = sha256_model(other)
    f = other / "onnx" / "embed_tokens_int8.onnx"
    f.write_bytes(f.read_bytes() + b"\0")
    assert sha256_model(other) != before and before == sha256_model(repo)
