"""``open``/``extract`` ``--max-tokens N`` on an encoder–decoder with a teacher-forced target (session 17), on the
bundled translation demo: the source keeps its first N tokens and the decoder's rows (its start token, then the
target's tokens) their first N, exactly as ``attnviz corpus --text-pair-column --max-tokens N`` cuts the same pair
(both run, each corpus example's text and pair tokenised again by the Hugging Face ``tokenizers`` library); a cut
computed by hand from the library's own tokens of the whole pair; the note counts each side's loss; a target past
the model's positions is refused in one line naming the flag, which then cuts it; generation is cut as before."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from tokenizers import Tokenizer

from attnviz.cli import main
from attnviz.corpus.output import read

TRANSLATION = Path(__file__).resolve().parents[2] / "models" / "translation.onnx"
LIMIT = 128  # the demo's positions (its training config's max_len), each side

VERSES = [  # (Greek source, English target): SBLGNT / BSB wording, as the demo was trained on
    (
        "ἐν ἀρχῇ ἦν ὁ λόγος καὶ ὁ λόγος ἦν πρὸς τὸν θεόν καὶ θεὸς ἦν ὁ λόγος",
        "In the beginning was the Word, and the Word was with God, and the Word was God.",
    ),
    (
        "μακάριοι οἱ καθαροὶ τῇ καρδίᾳ ὅτι αὐτοὶ τὸν θεὸν ὄψονται",
        "Blessed are the pure in heart, for they will see God.",
    ),
    (
        "μακάριοι οἱ πτωχοὶ τῷ πνεύματι ὅτι αὐτῶν ἐστιν ἡ βασιλεία τῶν οὐρανῶν",
        "Blessed are the poor in spirit, for theirs is the kingdom of heaven.",
    ),
    (
        "οὕτως γὰρ ἠγάπησεν ὁ θεὸς τὸν κόσμον ὥστε τὸν υἱὸν τὸν μονογενῆ ἔδωκεν",
        "For God so loved the world that He gave His one and only Son.",
    ),
    ("μακάριοι οἱ πτωχοὶ", "Blessed are the poor."),  # fits N: nothing cut
    ("ἐν ἀρχῇ ἦν ὁ λόγος", "In the beginning was the Word, and the Word was with God, and the Word was God."),
    ("ἐν ἀρχῇ ἦν ὁ λόγος καὶ ὁ λόγος ἦν πρὸς τὸν θεόν καὶ θεὸς ἦν ὁ λόγος", "In the beginning"),
]
LONG = (" ".join(a for a, _ in VERSES[:4]) + " ") * 4, (" ".join(b for _, b in VERSES[:4]) + " ") * 4  # > 128 each


def _library() -> tuple[Tokenizer, Tokenizer]:
    """The demo's source and target tokenizers, read from its ONNX metadata straight into the tokenizers library."""
    meta = {p.key: p.value for p in onnx.load(str(TRANSLATION), load_external_data=False).metadata_props}
    return Tokenizer.from_str(meta["attnviz.tokenizer"]), Tokenizer.from_str(meta["attnviz.target_tokenizer"])


def _extract(out: Path, src: str, tgt: str, *extra, model: Path = TRANSLATION) -> dict:
    argv = ["extract", model, "--text", src, "--text-pair", tgt, "--out", out, "--provider", "cpu", *extra]
    assert main([str(a) for a in argv]) == 0
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


def _notes(z: dict) -> list[str]:
    return json.loads(str(z["info"])).get("notes", [])


def test_extract_shows_the_tokens_a_corpus_example_of_the_same_pair_records(tmp_path):
    """The same pairs through ``attnviz corpus --text-pair-column en --max-tokens N`` and ``attnviz extract --text
    --text-pair --max-tokens N``: each example's text and pair, tokenised again by the library with no cut, are
    exactly the source and decoder tokens ``extract`` shows."""
    n = 9
    pairs = [*VERSES, LONG]
    src_lib, tgt_lib = _library()
    lengths = [(len(src_lib.encode(a).ids), len(tgt_lib.encode(b, add_special_tokens=False).ids)) for a, b in pairs]
    assert any(s > n and t + 1 > n for s, t in lengths) and any(s <= n and t + 1 <= n for s, t in lengths)
    assert any(s > n >= t + 1 for s, t in lengths) and any(t + 1 > n >= s for s, t in lengths)
    assert min(lengths[-1]) > LIMIT  # past the positions on both sides: runs only when cut
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"text": a, "en": b}) + "\n" for a, b in pairs))
    argv = ["corpus", TRANSLATION, "--texts", tmp_path / "p.jsonl", "--text-pair-column", "en", "--max-tokens", n]
    argv += ["--out", tmp_path / "out", "--workers", 1, "--top-k", len(pairs), "--provider", "cpu", "--no-progress"]
    assert main([str(a) for a in argv]) == 0
    examples = read(tmp_path / "out").examples
    read_of = {e["item"]: (e["text"], e["pair"]) for e in examples}
    assert set(read_of) == set(range(len(pairs)))
    bos = tgt_lib.id_to_token(2)
    for i, (a, b) in enumerate(pairs):
        z = _extract(tmp_path / f"{i}.npz", a, b, "--max-tokens", n)
        text, pair = read_of[i]
        assert list(z["tokens"]) == src_lib.encode(text).tokens, (i, text)
        assert list(z["key_tokens"]) == [bos, *tgt_lib.encode(pair, add_special_tokens=False).tokens], (i, pair)
        assert len(z["tokens"]) == min(n, lengths[i][0]) and len(z["key_tokens"]) == min(n, lengths[i][1] + 1)


def _hand_cut(text: str, enc, k: int) -> str:
    """The start of ``text`` its first ``k`` tokens cover, by the library's own offsets."""
    return text[: enc.offsets[k - 1][1]] if k < len(enc.ids) else text


@pytest.mark.parametrize("n", [4, 7, 12])
def test_the_cut_is_the_first_n_of_each_side_by_hand_and_the_note_counts_each_sides_loss(tmp_path, n):
    """A source of 15+ tokens and a target of 20+: the source's first ``n`` tokens and the start token with the
    target's first ``n - 1``, counted by the library; the maps are those of the hand-cut pair run uncut."""
    src, tgt = VERSES[0]
    src_lib, tgt_lib = _library()
    se, te = src_lib.encode(src), tgt_lib.encode(tgt, add_special_tokens=False)
    assert not any(se.special_tokens_mask) and len(se.ids) > 12 and len(te.ids) > 12  # this source adds no </s>
    z = _extract(tmp_path / "cut.npz", src, tgt, "--max-tokens", n)
    assert list(z["tokens"]) == se.tokens[:n]
    assert list(z["key_tokens"]) == [tgt_lib.id_to_token(2), *te.tokens[: n - 1]]
    hand = _extract(tmp_path / "hand.npz", _hand_cut(src, se, n), _hand_cut(tgt, te, n - 1))
    assert list(hand["tokens"]) == list(z["tokens"]) and list(hand["key_tokens"]) == list(z["key_tokens"])
    for k in range(9):
        np.testing.assert_array_equal(z[f"attn_{k:03d}"], hand[f"attn_{k:03d}"])
    ns, nr = len(se.ids), len(te.ids) + 1
    assert (
        f"source and target truncated (--max-tokens {n}): the source lost {ns - n} of its {ns} tokens, the target's "
        f"decoder rows {nr - n} of their {nr} (" in " | ".join(_notes(z))
    )
    assert not _notes(hand)


def test_only_the_side_past_n_is_cut_and_the_note_says_the_other_lost_none(tmp_path):
    src, tgt = VERSES[5]  # 5 source tokens, a long target
    z = _extract(tmp_path / "m.npz", src, tgt, "--max-tokens", 6)
    _, tgt_lib = _library()
    nr = len(tgt_lib.encode(tgt, add_special_tokens=False).ids) + 1
    assert len(z["tokens"]) == 5 and len(z["key_tokens"]) == 6
    assert f"the source lost 0 of its 5 tokens, the target's decoder rows {nr - 6} of their {nr}" in _notes(z)[0]
    fits = _extract(tmp_path / "f.npz", *VERSES[4], "--max-tokens", 9)
    assert not any("truncated" in note for note in _notes(fits))


def test_a_target_past_the_positions_is_refused_naming_the_flag_which_then_cuts_it(tmp_path, capsys):
    """No --max-tokens, or an N itself past the model's positions: one line offering --max-tokens 128 (the target
    is cut by it now, so the window's Truncate button and the flag both fix it); --max-tokens 128 runs."""
    src, tgt = VERSES[4][0], LONG[1]
    _, tgt_lib = _library()
    rows = len(tgt_lib.encode(tgt, add_special_tokens=False).ids) + 1
    base = ["extract", TRANSLATION, "--text", src, "--text-pair", tgt, "--out", tmp_path / "m.npz"]
    assert rows > 200
    for extra, shown in (([], rows), (["--max-tokens", 200], 200)):
        assert main([str(a) for a in (*base, *extra)]) == 2
        err = capsys.readouterr().err.strip()
        assert err == (
            f"attnviz: error: the text pair (decoder side): {shown} tokens; this model's positions stop at "
            f"{LIMIT} (training config max_len); use --max-tokens {LIMIT} to truncate"
        )
        assert not (tmp_path / "m.npz").exists()
    z = _extract(tmp_path / "m.npz", src, tgt, "--max-tokens", LIMIT)
    assert len(z["key_tokens"]) == LIMIT and z["attn_004"].shape[-2:] == (LIMIT, len(z["tokens"]))


def test_generation_without_a_target_cuts_the_source_alone_as_before(tmp_path):
    src = VERSES[0][0]
    out = tmp_path / "g.npz"
    argv = ["extract", TRANSLATION, "--text", src, "--generate", 3, "--max-tokens", 5, "--out", out]
    assert main([str(a) for a in (*argv, "--provider", "cpu")]) == 0
    src_lib, _ = _library()
    with np.load(out) as z:
        assert list(z["tokens"]) == src_lib.encode(src).tokens[:5]
        ns = len(src_lib.encode(src).ids)
        assert json.loads(str(z["info"]))["notes"][0] == f"{ns} tokens truncated to the first 5 (--max-tokens 5)"


def test_a_bart_source_keeps_its_final_special_and_reads_what_a_corpus_example_records(hf_export, tmp_path):
    """A transformers BART (random init, exported) with a tokenizer.json whose source form is ``[CLS] A [SEP]``: the
    source keeps [CLS], its first N - 2 words and its final [SEP]; the decoder rows the start token and the target's
    first N - 1 words; a corpus run of the same pairs records exactly those words."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import hf_models

    path, *_ = hf_export("bart", "legacy", "eager", 17)
    tok = tmp_path / "tokenizer.json"
    hf_models.word_tokenizer(99).backend_tokenizer.save(str(tok))
    words = hf_models.WORDS
    pairs = [(" ".join(words[i : i + la]), " ".join(words[-lb - i : len(words) - i])) for i, la, lb in
             [(0, 12, 3), (2, 3, 12), (4, 10, 10), (1, 4, 4)]]  # fmt: skip
    n = 7
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"text": a, "en": b}) + "\n" for a, b in pairs))
    argv = ["corpus", path, "--texts", tmp_path / "p.jsonl", "--text-pair-column", "en", "--max-tokens", n]
    argv += ["--out", tmp_path / "out", "--workers", 1, "--top-k", len(pairs), "--tokenizer", tok]
    assert main([str(a) for a in (*argv, "--provider", "cpu", "--no-progress")]) == 0
    read_of = {e["item"]: (e["text"], e["pair"]) for e in read(tmp_path / "out").examples}
    assert set(read_of) == set(range(len(pairs)))
    for i, (a, b) in enumerate(pairs):
        z = _extract(tmp_path / f"{i}.npz", a, b, "--max-tokens", n, "--tokenizer", tok, model=path)
        kept_a, kept_b = a.split()[: n - 2], b.split()[: n - 1]
        assert list(z["tokens"]) == ["[CLS]", *kept_a, "[SEP]"]
        assert list(z["key_tokens"])[1:] == kept_b and len(z["key_tokens"]) == len(kept_b) + 1
        assert read_of[i] == (" ".join(kept_a), " ".join(kept_b))
