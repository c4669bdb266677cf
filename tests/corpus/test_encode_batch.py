"""A corpus's items are tokenised in one batched call (tokenizers' ``encode_batch``): the flat arrays must hold
exactly what the tokenizer's own one-text ``encode`` gives for each item, in file order."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from attnviz import AttnvizError
from attnviz.corpus import plan
from attnviz.corpus.items import Item
from attnviz.runtime.inputs import HFTokenizer
from attnviz.runtime.limits import PositionLimit

TEXTS = ["The cat sat on the mat.", "", "attention is all you need", "Ünïcödé – text", "a " * 30, "x"]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    words = sorted({w for t in TEXTS for w in t.lower().replace(".", " .").split()})
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *words])}
    t = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    t.normalizer = normalizers.Lowercase()
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    t.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    t.save(str(path))
    return path


def model_of(tok_path, kind="encoder", positions=512):
    hf = HFTokenizer.from_file(tok_path)
    return SimpleNamespace(
        tokenizers=(hf, None), kind=kind, path=tok_path, meta={}, position_limit=PositionLimit(positions, "test")
    ), hf


def expected(tok_path, items, decoder):
    """Item by item through tokenizers itself; an empty item is one pad token marked special."""
    from tokenizers import Tokenizer

    t = Tokenizer.from_file(str(tok_path))
    ids, special, types, counts = [], [], [], []
    for it in items:
        e = (
            t.encode(it.text, it.pair, add_special_tokens=not decoder)
            if not decoder
            else t.encode(it.text, None, add_special_tokens=False)
        )
        got = (list(e.ids), [bool(x) for x in e.special_tokens_mask], list(e.type_ids)) if e.ids else ([0], [True], [0])
        ids += got[0]
        special += got[1]
        types += got[2]
        counts.append(len(got[0]))
    return np.array(ids), np.array(special), np.array(types), np.concatenate([[0], np.cumsum(counts)])


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
@pytest.mark.parametrize("with_pairs", [False, True])
def test_batched_encoding_equals_the_tokenizer_item_by_item(tok, kind, with_pairs, monkeypatch):
    monkeypatch.setattr(plan, "ENCODE_CHUNK", 4)  # several chunks, one of them starting with an empty item
    items = [Item(i, t, pair=(TEXTS[-1 - i % len(TEXTS)] if with_pairs else None)) for i, t in enumerate(TEXTS * 2)]
    model, _ = model_of(tok, kind)
    enc = plan.encode_items(model, items)
    ids, special, types, offsets = expected(tok, items, kind == "decoder")
    assert np.array_equal(enc.offsets, offsets)
    assert np.array_equal(enc.ids, ids) and enc.ids.dtype == np.int32
    assert np.array_equal(enc.special, special) and enc.special.dtype == bool
    assert np.array_equal(enc.type_ids, types) and enc.type_ids.dtype == np.int8


def test_an_item_over_the_position_limit_is_named(tok):
    items = [Item(i, t) for i, t in enumerate(TEXTS)]
    model, _ = model_of(tok, positions=20)  # item 4 ("a " * 30) has 32 tokens
    with pytest.raises(AttnvizError) as e:
        plan.encode_items(model, items)
    assert str(e.value).startswith("corpus item 4 "), str(e.value)


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
def test_max_tokens_cuts_as_the_tokenizers_own_truncation(tok, kind, monkeypatch):
    """--max-tokens N: each item as tokenizers' own truncation to N cuts it ([CLS] ... [SEP] kept around the first
    words), and the text recorded for a cut item tokenises, untruncated, to exactly the tokens kept."""
    from tokenizers import Tokenizer

    monkeypatch.setattr(plan, "ENCODE_CHUNK", 4)
    items = [Item(i, t) for i, t in enumerate(TEXTS * 2)]
    model, _ = model_of(tok, kind, positions=6)  # "a " * 30 alone would be refused
    enc = plan.encode_items(model, items, max_tokens=5)
    ref = Tokenizer.from_file(str(tok))
    ref.enable_truncation(max_length=5)
    plain = Tokenizer.from_file(str(tok))
    decoder = kind == "decoder"
    for i, it in enumerate(items):
        want = ref.encode(it.text, add_special_tokens=not decoder).ids or [0]  # an empty item: one pad token
        assert enc.ids[enc.offsets[i] : enc.offsets[i + 1]].tolist() == want, it.text
        if it.index in enc.cuts:
            assert plain.encode(enc.cuts[it.index].text, add_special_tokens=not decoder).ids == want
    long = {it.index for it in items if len(plain.encode(it.text, add_special_tokens=not decoder).ids) > 5}
    assert long and set(enc.cuts) == long
