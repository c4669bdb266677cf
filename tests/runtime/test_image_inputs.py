import numpy as np
import pytest
from PIL import Image

from attnviz.cli import main
from attnviz.core.io import load_npz
from attnviz.runtime import open_model


@pytest.fixture()
def png(tmp_path):
    a = np.zeros((48, 40, 3), np.uint8)
    a[8:24, 10:30] = (255, 0, 0)
    p = tmp_path / "img.png"
    Image.fromarray(a).save(p)
    return p


def test_vit_image_through_cli(hf_export, tmp_path, png, capsys):
    path, _, _, _ = hf_export("vit", "legacy", "eager", 17)
    out = tmp_path / "vit.npz"
    assert main(["extract", str(path), "--image", str(png), "--out", str(out)]) == 0
    r = load_npz(out)
    assert r.patch_grid is not None and (r.patch_grid.rows, r.patch_grid.cols, r.patch_grid.offset) == (4, 4, 1)
    assert r.tokens.labels[:2] == ["[CLS]", "(0,0)"] and r.tokens.special[0] and len(r.tokens) == 17
    assert r.image.shape == (32, 32, 3)  # resized to the input's fixed 32x32
    assert r.maps[0].shape == (1, 4, 17, 17)


def test_vit_image_matches_manual_preprocessing(hf_export, png):
    path, feeds, _, _ = hf_export("vit", "legacy", "eager", 17)
    m = open_model(path, provider="cpu")
    r = m.analyze(image=png)
    img = Image.open(png).convert("RGB").resize((32, 32), Image.BICUBIC)
    x = ((np.asarray(img, np.float32) / 255 - 0.5) / 0.5).transpose(2, 0, 1)[None]
    ref = m.run({"pixel_values": x})
    np.testing.assert_allclose(r.maps[1].array(), ref.maps[1].array(), atol=1e-6)


def test_image_caption_generation(hf_export, png):
    path, _, _, _ = hf_export("vision-decoder", "legacy", "eager", 17)
    m = open_model(path, provider="cpu")
    assert m.kind == "vision-decoder"
    r = m.analyze(image=png, feeds={"decoder_input_ids": np.array([[5]])}, generate=3)
    assert len(r.generated) == 3 and r.prompt_len == 1
    cross = [b for b in r.blocks() if b.kind == "cross"][0]
    assert cross.head(0, 0).shape == (3, 17)  # prompt + 2 fed-back words over CLS + 16 patches
    assert r.patch_grid.rows == 4 and r.image is not None


def test_unreadable_image(hf_export, tmp_path, capsys):
    path, _, _, _ = hf_export("vit", "legacy", "eager", 17)
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    assert main(["extract", str(path), "--image", str(bad), "--out", str(tmp_path / "o.npz")]) == 2
    err = capsys.readouterr().err
    assert "cannot open it as an image" in err and err.count("\n") == 1
    assert main(["extract", str(path), "--text", "hello", "--out", str(tmp_path / "o.npz")]) == 2
    assert "takes an image" in capsys.readouterr().err
