"""The translation tasks' plumbing, checked with an oracle runner (no training): gold in, perfect scores out."""

import numpy as np
import pytest

from attnviz.training.tasks import TASKS
from attnviz.training.tasks.translation import BOS_ID, EOS_ID, IGNORE, TranslationSynthetic


class OracleRunner:
    """Answers like a perfect model: greedy decoding reproduces the reference; cross-attention of every head
    puts its mass on the first subword of the gold source word of the target word each position predicts."""

    def __init__(self, data, mcfg, wrong_head=None):
        self.data, self.mcfg, self.wrong_head = data, mcfg, wrong_head
        self.rows = {d.tobytes(): i for i, d in enumerate(data["input_ids"])}
        self.input_names = ("input_ids", "attention_mask", "decoder_input_ids")

    def _row(self, ids):
        return self.rows[np.ascontiguousarray(ids).tobytes()]

    def logits(self, feeds):
        dec = feeds["decoder_input_ids"]
        out = np.zeros((*dec.shape, self.mcfg.tgt_vocab_size), np.float32)
        for b, ids in enumerate(feeds["input_ids"]):
            lab = self.data["labels"][self._row(ids)]
            for t in range(dec.shape[1]):
                out[b, t, lab[t] if t < len(lab) and lab[t] != IGNORE else EOS_ID] = 1.0
        return out

    def attention(self, feeds):
        B, Ts = feeds["input_ids"].shape
        Tt = feeds["decoder_input_ids"].shape[1]
        H = self.mcfg.n_heads
        cross = np.full((B, H, Tt, Ts), 1e-3, np.float32)
        for b, ids in enumerate(feeds["input_ids"]):
            r = self._row(ids)
            gold = {int(t): int(s) for s, t in self.data["gold"][r] if s >= 0}
            src_words = list(self.data["src_word_ids"][r])
            for t, w in enumerate(self.data["tgt_word_ids"][r][:Tt]):
                if w >= 0 and int(w) in gold:
                    cross[b, :, t, src_words.index(gold[int(w)])] = 1.0
            if self.wrong_head is not None:
                cross[b, self.wrong_head] = cross[b, self.wrong_head, :, ::-1]
        cross /= cross.sum(-1, keepdims=True)
        maps = []
        for _ in range(self.mcfg.n_layers):
            maps.append(np.full((B, H, Ts, Ts), 1.0 / Ts, np.float32))
        for _ in range(self.mcfg.n_dec_layers):
            maps += [np.full((B, H, Tt, Tt), 1.0 / Tt, np.float32), cross]
        return maps


@pytest.fixture(scope="module")
def synthetic():
    task = TranslationSynthetic()
    mcfg, tcfg = task.configs("tiny")
    return task, mcfg, tcfg, task.make_split("train", mcfg, tcfg), task.make_split("test", mcfg, tcfg)


def test_registered():
    assert "translation" in TASKS and "translation-synthetic" in TASKS and "captioning" in TASKS


def test_arrays_are_consistent(synthetic):
    task, mcfg, tcfg, train, test = synthetic
    n = len(train["input_ids"])
    assert n == tcfg.n_train and all(len(v) == n for v in train.values())
    assert (train["decoder_input_ids"][:, 0] == BOS_ID).all()
    for r in range(20):
        lab = train["labels"][r][train["labels"][r] != IGNORE]
        assert lab[-1] == EOS_ID
        # teacher forcing: decoder input is the label shifted right
        np.testing.assert_array_equal(train["decoder_input_ids"][r, 1 : len(lab)], lab[:-1])
        assert train["tgt_word_ids"][r, len(lab) - 1] == -1  # EOS belongs to no word
        assert (train["src_word_ids"][r][train["attention_mask"][r] == 0] == -1).all()
    assert mcfg.vocab_size == task.tokenizers.source.get_vocab_size()
    assert mcfg.tgt_vocab_size == task.tokenizers.target.get_vocab_size()


def test_oracle_scores_perfectly(synthetic):
    task, mcfg, tcfg, _, test = synthetic
    r = task.evaluate(OracleRunner(test, mcfg, wrong_head=1), test, mcfg)
    assert r["bleu"] == pytest.approx(100.0)
    assert r["aer"]["heads"][0][0] == pytest.approx(0.0)
    assert r["aer"]["heads"][0][1] > 0.3  # the reversed head is penalised
    assert r["aer"]["best_head"]["aer"] == pytest.approx(0.0)
    assert r["n"] == tcfg.n_test


def test_metadata_restores_tokenizers(synthetic):
    task, mcfg, tcfg, _, test = synthetic
    meta = task.metadata(mcfg)
    assert len(meta["vocab"]["source"]) == mcfg.vocab_size and len(meta["vocab"]["target"]) == mcfg.tgt_vocab_size
    assert meta["special"] == {"pad": 0, "unk": 1, "bos": 2, "eos": 3}
    fresh = TranslationSynthetic()
    fresh.restore(meta)
    again = fresh.make_split("test", mcfg, tcfg)
    np.testing.assert_array_equal(again["input_ids"], test["input_ids"])
    assert fresh.tokenizers.target.to_str() == task.tokenizers.target.to_str()


def test_cross_attention_indices_match_the_model_layout():
    # the helper every task uses must agree with the order the model itself reports
    from attnviz.training.config import ModelConfig
    from attnviz.training.model import AttnModel, cross_attention_indices

    for cfg in (
        ModelConfig(arch="encoder-decoder", n_layers=2, n_dec_layers=3, d_model=16, vocab_size=10),
        ModelConfig(
            arch="image-decoder",
            image_encoder="cnn",
            n_layers=2,
            n_dec_layers=2,
            d_model=16,
            image_size=16,
            patch_size=4,
            vocab_size=10,
        ),
        ModelConfig(
            arch="image-decoder", n_layers=1, n_dec_layers=2, d_model=16, image_size=16, patch_size=4, vocab_size=10
        ),
    ):
        layout = AttnModel(cfg).attention_layout()
        assert cross_attention_indices(cfg) == [i for i, (_, kind, _) in enumerate(layout) if kind == "cross"]


def test_configs_without_the_bible_data(monkeypatch):
    from attnviz import AttnvizError
    from attnviz.training import data_translation as dt
    from attnviz.training.tasks.translation import Translation

    def missing():
        raise AttnvizError(f"the Greek-English alignment data is not installed: run `{dt.INSTALL_HINT}`")

    monkeypatch.setattr(dt, "bible_data_dir", missing)
    task = Translation()
    mc, tc = task.configs("demo")
    assert (mc.vocab_size, mc.tgt_vocab_size) == (3000, 3000) and tc.n_test == 528
    with pytest.raises(AttnvizError, match="pip install --no-deps bible-alignments"):
        task.make_split("train", mc, tc)


def test_a_damaged_embedded_tokenizer_is_one_plain_line(synthetic):
    """``attnviz eval`` of a model whose embedded target tokenizer was edited: what is wrong, in plain words."""
    import json

    from attnviz import AttnvizError

    task, mcfg, *_ = synthetic
    meta = task.metadata(mcfg)
    cfg = json.loads(meta["target_tokenizer"])
    cfg["model"]["type"] = "Bogus"
    with pytest.raises(AttnvizError) as raised:
        TranslationSynthetic().restore(meta | {"target_tokenizer": json.dumps(cfg)})
    msg = str(raised.value)
    assert "attnviz.target_tokenizer" in msg and "unknown model type 'Bogus'" in msg and "re-export" in msg, msg
    assert "untagged enum" not in msg and "\n" not in msg


def _restored_with_a_missing_word(task, mcfg):
    """A task restored from its own metadata, but the source tokenizer a WordLevel over the same pieces with the
    first test pair's first word renamed and no unknown token in its vocabulary: that word cannot be encoded (the
    library says "WordLevel error: Missing [UNK] token from the vocabulary")."""
    import json

    meta = task.metadata(mcfg)
    cfg = json.loads(meta["tokenizer"])
    pair = task._split().test[0]
    word = pair.src[0]
    vocab = {("[GONE]" if k == word else k): v for k, v in cfg["model"]["vocab"].items()}
    cfg["model"] = {"type": "WordLevel", "vocab": vocab, "unk_token": "[NOPE]"}
    fresh = TranslationSynthetic()
    fresh.restore(meta | {"tokenizer": json.dumps(cfg)})
    return fresh, pair, word


def test_a_pair_the_tokenizer_cannot_encode_is_one_plain_line(synthetic):
    """data_translation encoded unguarded: a word a restored tokenizer (``attnviz eval``, ``init_from``) cannot
    encode was the library's own text ("WordLevel error: Missing [UNK] token", or a Rust panic's report), an
    internal error.  Now the runtime's guarded encode (runtime/inputs.encode_pretokenized): one line naming the
    pair, the side, the tokenizer and the word."""
    from attnviz import AttnvizError
    from attnviz.training import data_translation as dt

    task, mcfg, tcfg, *_ = synthetic
    fresh, pair, word = _restored_with_a_missing_word(task, mcfg)
    with pytest.raises(AttnvizError) as raised:
        fresh.make_split("test", mcfg, tcfg)
    msg = str(raised.value)
    assert msg.startswith(f"pair {pair.id} (source words): tokenizer attnviz.tokenizer in the model's metadata "), msg
    assert repr(word) in msg and "\n" not in msg and raised.value.param is None, msg
    assert "WordLevel error" not in msg and "Missing [UNK]" not in msg, msg
    # a word that is not Unicode (half a surrogate pair): the trained tokenizers, the same one line
    bad = dt.AlignedPair("x1", (pair.src[0], "ab\ud800"), pair.tgt, frozenset())
    with pytest.raises(AttnvizError) as raised:
        task.tokenizers.encode_pair(bad)
    msg = str(raised.value)
    assert msg.startswith("pair x1 (source words): the text holds U+D800 at character "), msg
    assert "UTF-8" in msg and "\n" not in msg, msg
