"""``attnviz compare A B --texts FILE --engine ray``: the driver's batches through Ray Data actors that hold both
models give the local pool's tables (the same batches, reduced alike, folded in the same order).

Ray starts once for this module (its start-up is most of the cost on a small machine), as in test_ray.py."""

import json

import pytest
from test_compare_corpus import _cfg, _planted_change, _table

from attnviz.corpus.compare_run import CHECKPOINT, run_compare_corpus

pytest.importorskip("ray")
pytest.importorskip("ray.data")


pytestmark = pytest.mark.usefixtures("ray_local")  # the folder's one cluster (conftest.py)


def test_ray_equals_local_and_resumes_a_local_checkpoint(planted, tmp_path):
    model, texts = planted
    b = _planted_change(model, tmp_path / "b.onnx", layer=1, head=3, seed=2)
    run_compare_corpus(_cfg(model, b, texts, tmp_path / "local", batch_size=8, workers=2, threads=1))
    run_compare_corpus(_cfg(model, b, texts, tmp_path / "ray", batch_size=8, workers=2, threads=1, engine="ray"))
    for name in ("heads.parquet", "items.parquet"):
        assert _table(tmp_path / "ray", name) == _table(tmp_path / "local", name)
    assert any(r["js_divergence"] > 1e-3 for r in _table(tmp_path / "ray"))  # a real difference was compared
    run = json.loads((tmp_path / "ray" / "run.json").read_text())
    assert run["engine"] == "ray" and "ray" in run["versions"] and run["items"] == 40

    def stop(done):
        if done >= 16:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_compare_corpus(_cfg(model, b, texts, tmp_path / "cut", batch_size=8, workers=1, threads=1), on_batch=stop)
    assert (tmp_path / "cut" / CHECKPOINT).exists()
    s = run_compare_corpus(_cfg(model, b, texts, tmp_path / "cut", batch_size=8, workers=2, threads=1, engine="ray"))
    assert s.resumed_items == 16 and s.items == 40
    assert _table(tmp_path / "cut") == _table(tmp_path / "local")
