"""Swinv2 from optimum (found by the optimum zoo sweep, session 22): the same windows, shift and patch merging as
Swin, so its export folder's config.json (model_type swinv2) gives the window layout; it was refused ("attends
within windows ... and no window layout is known").  Every block's map, placed on its stage's patch grid, equals
transformers' own eager windowed probabilities (a hook on each Swinv2SelfAttention) laid out by hand."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from attnviz.runtime import open_model  # noqa: E402

pytestmark = pytest.mark.slow


def _on_grid(windows, batch, side, window, shift):
    """``[B*nW, H, N, N]`` windows of a ``side`` x ``side`` grid rolled by ``-shift`` as ``[B, H, T, T]``."""
    rolled = np.roll(np.arange(side * side).reshape(side, side), (-shift, -shift), axis=(0, 1))
    per_row = side // window
    out = np.zeros((batch, windows.shape[1], side * side, side * side), np.float32)
    for b in range(batch):
        for w in range(per_row * per_row):
            r, c = divmod(w, per_row)
            pos = rolled[r * window : (r + 1) * window, c * window : (c + 1) * window].ravel()
            out[b][:, pos[:, None], pos[None, :]] = windows[b * per_row * per_row + w]
    return out


def test_swinv2_maps_on_the_patch_grid_equal_transformers_windows(optimum_export):
    root = optimum_export("swinv2")
    hf = transformers.Swinv2Model.from_pretrained(root / "hf", attn_implementation="eager").eval()
    px = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    got: list = []
    for m in hf.modules():
        if type(m).__name__ == "Swinv2SelfAttention":
            m.register_forward_hook(lambda mod, args, outs: got.append(outs[1].detach().numpy()))
    with torch.no_grad():
        hf(pixel_values=px, output_attentions=True)
    r = open_model(root / "onnx", provider="cpu").analyze(feeds={"pixel_values": px.numpy()})
    assert [(s.layer, s.stage) for s in r.sites] == [(0, 1), (1, 1), (2, 2)]
    # stage 1: 8x8 patches in four 4x4 windows, block 1 shifted by 2; stage 2: 4x4 patches, one window, no shift
    for m, w, (side, shift) in zip(r.maps, got, [(8, 0), (8, 2), (4, 0)]):
        want = _on_grid(w, 2, side, 4, shift)
        np.testing.assert_allclose(m.array(), want, atol=1e-5)
    assert np.abs(r.maps[0].array() - r.maps[1].array()).max() > 0.1  # the shift was exercised, not two equal maps
