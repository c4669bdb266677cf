import numpy as np
from onnx_builders import tiny_text_model

import attnviz.runtime.model as rm


def test_ondemand_row_chunks_with_2d_causal_mask(tmp_path, monkeypatch):
    m = rm.open_model(tiny_text_model(tmp_path / "lm.onnx", causal=True, classifier=False), provider="cpu")
    f = {"input_ids": np.array([[1, 3, 4, 5, 6, 7, 8, 9, 10]])}
    dense = m.run(f, mode="dense")
    monkeypatch.setattr(rm.RecomputeMap, "CHUNK_ELEMS", 10)  # force several row blocks per head
    od = m.run(f, mode="ondemand")
    for a, b in zip(od.maps, dense.maps):
        assert isinstance(a, rm.RecomputeMap)
        np.testing.assert_allclose(a.array(), b.array(), atol=1e-6)
        assert a.nbytes < b.nbytes * 4  # holds Q and K, not the probabilities
