"""A checkpoint's identity: the fingerprint in ``DIR/checkpoint.npz`` that a run must match to resume it.

For ``attnviz corpus``, ``compare --texts`` and ``ablate --texts`` it is the sha256 of a JSON list of named values
(the lists in corpus/run.py, compare_run.py and ablate_plan.py), never of a config object whole or in field order.
Recomputed here by hand from that list: the model's and the corpus's bytes, the batch plan by its documented rule
(length-sorted, ties in file order, cut every --batch-size items), the sites' shapes.  So a checkpoint written by
an earlier version that hashes the same list (before the engine settings moved into ``EngineConfig``) still
resumes; and the engine settings (--workers, --threads, --provider) are no part of it: a run resumes under others.
"""

import dataclasses
import hashlib
import json
import struct

import numpy as np
import pytest
from onnx_builders import tiny_text_model
from planted import corpus_lines

from attnviz.corpus.ablate_corpus import AblateCorpusConfig, run_ablation
from attnviz.corpus.compare_run import CompareCorpusConfig, run_compare_corpus
from attnviz.corpus.config import CHECKPOINT, CorpusConfig
from attnviz.corpus.run import run_corpus

WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "home"]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _data_sha(texts: list[str]) -> str:
    """The items' identity: each item's [text, pair, image name] as JSON, in file order."""
    h = hashlib.sha256()
    for t in texts:
        h.update(json.dumps([t, None, None]).encode())
    return h.hexdigest()


def _plan_sha(texts: list[str], batch_size: int) -> str:
    """The batches' item indices, each batch as little-endian int64s and a "|".  The test models' tokenizers are
    word-level with a fixed number of special tokens, so an item's length orders as its word count."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i].split()))  # sorted() is stable: ties in file order
    h = hashlib.sha256()
    for s in range(0, len(order), batch_size):
        batch = order[s : s + batch_size]
        h.update(struct.pack(f"<{len(batch)}q", *batch) + b"|")
    return h.hexdigest()


def _fingerprint(values: list) -> str:
    return _sha(json.dumps(values).encode())


def _interrupted(run, cfg) -> str:
    """The fingerprint of the checkpoint ``cfg``'s run leaves when stopped after its first folded batch."""

    def stop(done):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(cfg, on_batch=stop)
    with np.load(f"{cfg.out}/{CHECKPOINT}") as z:
        return str(z["fingerprint"])


@pytest.fixture(scope="module")
def corpus(planted, tmp_path_factory):
    model, _ = planted
    d = tmp_path_factory.mktemp("identity")
    lines = corpus_lines(12, seed=3)
    texts = d / "c.txt"
    texts.write_text("\n".join(lines) + "\n")
    return model, texts, lines


def test_corpus_checkpoint_is_the_documented_list_and_not_the_engine_settings(corpus, tmp_path):
    model, texts, lines = corpus

    def cfg(out, **engine):
        return CorpusConfig(str(model), str(tmp_path / out), texts=str(texts), batch_size=4, progress=False, **engine)

    got = _interrupted(run_corpus, cfg("one", workers=1, provider="cpu"))
    nh, k, generate, ranking = 2 * 4, 5, 32, "direction"  # planted: 2 layers of 4 heads; --top-k, --generate defaults
    expected = [
        _sha(model.read_bytes()),
        _data_sha(lines),
        4,  # --batch-size
        k,
        None,  # --text-pair-column
        nh,
        _plan_sha(lines, 4),
        generate,
        ranking,  # no --gold-column and no --max-tokens: nothing more
    ]
    assert got == _fingerprint(expected)
    assert _interrupted(run_corpus, cfg("two", workers=2, threads=1, provider="auto")) == got


def test_compare_checkpoint_is_the_documented_list_and_not_the_engine_settings(corpus, tmp_path):
    model, texts, lines = corpus

    def cfg(out, **engine):
        return CompareCorpusConfig(str(model), str(model), str(tmp_path / out), str(texts), batch_size=4, **engine)

    got = _interrupted(run_compare_corpus, cfg("one", workers=1, provider="cpu", progress=False))
    sha = _sha(model.read_bytes())
    matched = [[0, 0, 4], [1, 1, 4]]  # (A's site, B's site, heads): the planted encoder's two layers
    expected = ["compare", sha, sha, _data_sha(lines), 4, None, _plan_sha(lines, 4), matched, ["pooled"]]
    assert got == _fingerprint(expected)
    assert _interrupted(run_compare_corpus, cfg("two", workers=2, threads=1, progress=False)) == got


def test_ablate_checkpoint_is_the_documented_list_and_not_the_engine_settings(tmp_path):
    lm = tiny_text_model(tmp_path / "lm.onnx", layers=2, heads=2, d=8, classifier=False, causal=True, seed=2)
    rng = np.random.default_rng(4)
    lines = [" ".join(rng.choice(WORDS, int(rng.integers(2, 7)))) for _ in range(9)]
    texts = tmp_path / "c.jsonl"
    texts.write_text("".join(json.dumps({"text": t}) + "\n" for t in lines))

    def cfg(out, **engine):
        return AblateCorpusConfig(
            model=str(lm), out=str(tmp_path / out), texts=str(texts), all_heads=True, batch_size=3, **engine
        )

    got = _interrupted(run_ablation, cfg("one", workers=1, progress=False))
    offs = "[((0, (0,)),), ((0, (1,)),), ((1, (0,)),), ((1, (1,)),)]"  # --all-heads: each (site, (head,)) alone
    labels = ["next-token", None]  # a decoder's labels are its next tokens: no label column to hash
    expected = ["ablate", _sha(lm.read_bytes()), _data_sha(lines), 3, "zero", *labels, offs, "logits"]
    assert got == _fingerprint([*expected, _plan_sha(lines, 3)])
    assert _interrupted(run_ablation, cfg("two", workers=2, threads=1, provider="cpu", progress=False)) == got


def test_a_refused_resume_names_the_settings_that_differ(corpus, tmp_path, capsys):
    """Audit 17: a run resumed with other flags was refused with "(model, data, batch size or top-k differ)" whatever
    it was that differed (--max-tokens, --generate, ...).  The checkpoint keeps its settings by name beside the
    fingerprint, and the refusal names each one that differs, with both values; the same flags then resume it."""
    from attnviz.cli import main

    model, texts, lines = corpus
    out = tmp_path / "out"
    cfg = CorpusConfig(str(model), str(out), texts=str(texts), batch_size=4, progress=False, workers=1, provider="cpu")
    _interrupted(run_corpus, cfg)
    ckpt = out / CHECKPOINT
    before = _sha(ckpt.read_bytes())
    base = ["corpus", str(model), "--texts", str(texts), "--out", str(out), "--no-progress", "--workers", "1"]
    cases = [
        (["--batch-size", "4", "--max-tokens", "6"], ["--max-tokens none there, 6 here"]),
        (["--batch-size", "3", "--top-k", "2"], ["--batch-size 4 there, 3 here", "--top-k 5 there, 2 here"]),
    ]
    for flags, words in cases:
        assert main([*base, *flags]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("attnviz: error:") and "\n" not in err, err
        for w in words:
            assert w in err, (w, err)
        assert "model, data, batch size or top-k" not in err
        assert _sha(ckpt.read_bytes()) == before  # refused: the checkpoint is as it was
    other = tmp_path / "other.txt"
    other.write_text("\n".join(lines[:-1]) + "\n")
    assert main([*base[:3], str(other), *base[4:], "--batch-size", "4"]) == 2
    assert "(the data changed)" in capsys.readouterr().err
    assert main([*base, "--batch-size", "4"]) == 0  # its own settings: resumed
    capsys.readouterr()
    assert json.loads((out / "run.json").read_text())["resumed_from_items"] > 0


@pytest.mark.parametrize("command", ["compare", "ablate"])
def test_compare_and_ablate_refusals_name_the_settings_that_differ_too(corpus, tmp_path, capsys, command):
    from attnviz.cli import main

    model, texts, _ = corpus
    out = tmp_path / "out"
    if command == "compare":
        cfg = CompareCorpusConfig(str(model), str(model), str(out), str(texts), batch_size=4, workers=1, progress=False)
        _interrupted(run_compare_corpus, cfg)
        argv = ["compare", str(model), str(model)]
    else:
        cfg = AblateCorpusConfig(str(model), str(out), texts=str(texts), all_heads=True, batch_size=4, workers=1)
        _interrupted(run_ablation, dataclasses.replace(cfg, progress=False))
        argv = ["ablate", str(model), "--all-heads"]
    base = [*argv, "--texts", str(texts), "--out", str(out), "--no-progress", "--workers", "1"]
    assert main([*base, "--batch-size", "4", "--max-tokens", "6"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnviz: error:") and "\n" not in err, err
    assert "(--max-tokens none there, 6 here)" in err, err
    assert main([*base, "--batch-size", "4"]) == 0  # its own settings: resumed
    assert json.loads((out / "run.json").read_text())["resumed_from_items"] > 0
