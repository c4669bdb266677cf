"""The induction role on a planted circuit: a hand-built decoder whose layer-1 head 0 attends to the token after
an earlier occurrence of the current token (fed by a previous-token head in layer 0)."""

import numpy as np
from planted_induction import ROLES, lines, planted_induction_model
from test_statistics import _check_against_reference, _run

from attnviz.runtime import open_model


def test_planted_induction_head_is_found_and_scored_independently(tmp_path):
    model = planted_induction_model(tmp_path / "induction.onnx")
    texts = tmp_path / "c.txt"
    texts.write_text("\n".join(lines(16)) + "\n")
    res = _run(model, texts, tmp_path / "out", batch_size=5)
    _check_against_reference(res, model, texts, causal=True)  # the other statistics, as for any decoder
    roles = {(r["layer"], r["head"]): r["role"] for r in res.heads}
    assert roles == ROLES
    # the induction score, recomputed here on the same repeated random sequences (query i -> key i - 16 + 1)
    m = open_model(model, provider="cpu")
    tok = m.tokenizers[1] or m.tokenizers[0]
    pool = np.array([i for i in range(tok.size) if not tok.is_special(i)])
    base = np.random.default_rng(0).choice(pool, size=(8, 16))
    r = m.run({"input_ids": np.concatenate([base, base], 1)})
    for row in res.heads:
        p = r.maps[row["layer"]].array()[:, row["head"]]
        want = np.mean([p[b, i, i - 15] for b in range(8) for i in range(16, 32)])
        assert abs(row["induction"] - want) < 1e-6
    ind = {(r["layer"], r["head"]): r["induction"] for r in res.heads}
    assert ind[(1, 0)] > 0.8 and max(v for k, v in ind.items() if k != (1, 0)) < 0.1
