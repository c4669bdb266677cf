"""Translation data: the synthetic pair's gold is right by construction; the NT loader's shape and bounds."""

import random

import pytest

from attnviz import AttnvizError
from attnviz.training import data_translation as dt


def test_synthetic_gold_is_correct_by_construction():
    for p in dt.synthetic_pairs(300, seed=3):
        # every content word has exactly one link, to its lexicon translation; articles are unaligned
        aligned_src = {s for s, _ in p.links}
        assert [t for _, t in sorted(p.links, key=lambda l: l[1])] == list(range(len(p.tgt)))
        for s, t in p.links:
            assert dt._LEX[p.src[s]] == p.tgt[t]
        for i, w in enumerate(p.src):
            assert (i in aligned_src) == (w not in dt._DETS)
        # SOV: the verb comes last on the target side
        verb = next(i for i, w in enumerate(p.src) if w in dt._VERBS)
        assert (verb, len(p.tgt) - 1) in p.links


def test_synthetic_reorders_adjectives_after_nouns():
    p = dt.synthetic_pair(random.Random(0))
    for s, t in p.links:
        if p.src[s] in dt._ADJS:
            noun_t = [tt for ss, tt in p.links if p.src[ss] in dt._NOUNS and tt < t]
            assert noun_t, "an adjective follows a noun on the target side"


def test_synthetic_is_deterministic_and_split_differs():
    assert dt.synthetic_pairs(20, 1) == dt.synthetic_pairs(20, 1)
    sp = dt.synthetic_split(50, 20, seed=0)
    assert len(sp.train) == 50 and len(sp.test) == 20 and sp.train[:5] != sp.test[:5]


def test_tokenizer_word_map_covers_every_word():
    pairs = dt.synthetic_pairs(400, 0)
    toks = dt.train_tokenizers(pairs, 200, 200, greek=False)
    for p in pairs[:50]:
        e = toks.encode_pair(p)
        assert sorted(set(e["src_words"])) == list(range(len(p.src)))
        assert sorted(set(e["tgt_words"]) - {-1}) == list(range(len(p.tgt)))
        assert e["tgt_ids"][0] == toks.target.token_to_id(dt.BOS) and e["tgt_ids"][-1] == toks.target.token_to_id(
            dt.EOS
        )
        assert toks.target.decode(e["tgt_ids"]) == " ".join(p.tgt)
    assert [toks.source.token_to_id(s) for s in dt.SPECIALS] == [0, 1, 2, 3]


def test_missing_package_names_the_install_command(tmp_path):
    with pytest.raises(AttnvizError, match="pip install --no-deps bible-alignments"):
        dt.load_bible(tmp_path)


def _bible_installed() -> bool:
    try:
        dt.bible_data_dir()
    except AttnvizError:
        return False
    return True


@pytest.mark.skipif(
    not _bible_installed(), reason="bible-alignments not installed (pip install --no-deps bible-alignments)"
)
def test_bible_loader_verses_and_links_in_bounds():
    pairs = dt.load_bible()
    assert 7800 <= len(pairs) <= 7950
    n_links = sum(len(p.links) for p in pairs)
    assert 185_000 <= n_links <= 195_000
    for p in pairs:
        assert len(p.tgt_skip) == len(p.tgt)
        for s, t in p.links:
            assert 0 <= s < len(p.src) and 0 <= t < len(p.tgt)
            assert not p.tgt_skip[t]
    first = pairs[0]
    assert first.id == "40001001" and first.src[0] == "Βίβλος" and first.tgt[0] == "This"
    assert first.text().startswith("This is the record of the genealogy of Jesus Christ, the son of David")
    sp = dt.split_pairs(pairs)
    assert len(sp.test) >= 500 and len(sp.train) + len(sp.test) == len(pairs)
    assert not {p.id for p in sp.test} & {p.id for p in sp.train}


def test_a_target_tokenizer_without_bos_is_refused_with_one_line():
    """A tokenizer loaded from elsewhere may lack [BOS]/[EOS]; token_to_id then gives None, which used to land
    inside the target ids (found by mypy)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    pairs = dt.synthetic_pairs(20, seed=1)
    toks = dt.train_tokenizers(pairs, 200, 200, greek=False)
    vocab = {w: i for i, w in enumerate(["[UNK]", *sorted({w for p in pairs for w in p.tgt})])}
    plain = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    plain.pre_tokenizer = pre_tokenizers.Whitespace()
    no_bos = dt.TranslationTokenizers(toks.source, plain)
    with pytest.raises(AttnvizError, match=r"no \[BOS\] token"):
        no_bos.encode_pair(pairs[0])
    assert toks.encode_pair(pairs[0])["tgt_ids"][0] == toks.target.token_to_id("[BOS]")


def _tiny_bible(folder, word: str):
    """One verse in the package's three files: two Greek words, two English ones, each linked to its own."""
    import json

    for name, text in (
        (dt.SOURCE_TSV, "id\ttext\tgloss2\nn40001001001\tΒίβλος\tbook\nn40001001002\tγενέσεως\tgenealogy\n"),
        (
            dt.TARGET_TSV,
            f"id\tsource_verse\ttext\tskip_space_after\texclude\n40001001001\t40001001\t{word}\t\t\n"
            "40001001002\t40001001\tgenealogy\t\t\n",
        ),
        (
            dt.ALIGNMENT_JSON,
            json.dumps(
                {
                    "records": [
                        {"source": ["n40001001001"], "target": ["40001001001"]},
                        {"source": ["n40001001002"], "target": ["40001001002"]},
                    ]
                }
            ),
        ),
    ):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")


def test_the_bible_is_parsed_once_until_a_file_changes(tmp_path):
    _tiny_bible(tmp_path, "book")
    first, again = dt.load_bible(tmp_path), dt.load_bible(tmp_path)
    assert [p.tgt for p in first] == [("book", "genealogy")] and first[0].links == {(0, 0), (1, 1)}
    assert again == first and again is not first  # a list of its own ...
    assert again[0] is first[0]  # ... of the pairs parsed once
    _tiny_bible(tmp_path, "record")  # another size: parsed again
    assert [p.tgt for p in dt.load_bible(tmp_path)] == [("record", "genealogy")]
