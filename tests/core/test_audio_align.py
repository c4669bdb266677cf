"""Word timestamps from cross-attention (attnviz.core.audio_align) against transformers' own Whisper code, and the
reference-time readers and boundary scores (attnviz.core.audio_gold) against hand computations."""

from types import SimpleNamespace

import numpy as np
import pytest

from attnviz import AttnvizError
from attnviz.core import audio_align as aa
from attnviz.core import audio_gold as ag

torch = pytest.importorskip("torch")
gw = pytest.importorskip("transformers.models.whisper.generation_whisper")
tw = pytest.importorskip("transformers.models.whisper.tokenization_whisper")

from whisper_reference import TEXTGRID_LONG, transformers_times  # noqa: E402

P = 4  # the forced prompt: <|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>
# frames (20 ms) where five tokens are spoken, then silence: row P - 1 + t predicts token t and listens to it
SEGMENTS = [(10, 24), (24, 40), (40, 71), (71, 90), (90, 112), (112, 130)]


def planted(frames=150, layers=2, heads=3, seed=0):
    """Cross-attention that moves through the frames as the tokens are spoken: the prompt's last row (it predicts
    token 0) peaks on token 0's frames, each fed token's row (predicting the next token or the end) on the next
    token's, the last on the silence after the words; noise elsewhere."""
    rng = np.random.default_rng(seed)
    n = len(SEGMENTS) - 1
    w = rng.uniform(0, 0.3, (layers, heads, P + n, frames)).astype(np.float32)
    for k, (s, e) in enumerate(SEGMENTS):
        w[:, :, P - 1 + k, s:e] += 4.0
    return w / w.sum(-1, keepdims=True)


def test_planted_monotonic_attention_gives_the_planted_times_as_transformers_does():
    w = planted()
    heads = [(0, 1), (1, 2), (1, 0)]
    want = transformers_times(w[None], heads, P, num_frames=2 * 140)[0]
    got = aa.token_times(np.stack([w[lay, h] for lay, h in heads]), P, 280)
    np.testing.assert_array_equal(got, want)
    # the planted alignment itself: after the first row (the path starts there, at frame 0), each fed token's
    # time is where its row's segment starts; the prompt's are 0, the one after the last row repeats it
    starts = [s * 0.02 for s, _ in SEGMENTS[2:]]
    np.testing.assert_allclose(got, [0] * P + [0.0, *starts, starts[-1]], atol=1e-6)


def test_planted_words_are_their_segments_the_first_from_the_clips_start():
    """Words warp from the prompt's last row (OpenAI whisper's rows; transformers' token times leave it out, which
    made the first word (0, 0) and the second span both): token t spans the start of its row's segment to the next
    one's, the first from frame 0 (the warp starts there) to the end of its segment."""
    w = planted()
    heads = [(0, 1), (1, 2), (1, 0)]
    ids = [61, 62, 65, 66, 10, 11, 12, 13, 14]
    labels = {10: " the", 11: " cat", 12: " sat", 13: " on", 14: " mats"}
    weights = np.stack([w[lay, h] for lay, h in heads])
    decode = lambda t: "".join(labels.get(i, "<|x|>") for i in t)
    words = aa.align_words(weights, ids, decode, P, 280, lambda i: i >= 60)
    assert [w.text for w in words] == ["the", "cat", "sat", "on", "mats"]
    spans = [(0, SEGMENTS[0][1])] + SEGMENTS[1:5]
    assert [(w.start, w.end) for w in words] == [(round(s * 0.02, 2), round(e * 0.02, 2)) for s, e in spans]
    assert all(w.end > w.start for w in words)
    assert words[2].positions == (6,) and words[2].tokens == (12,)
    # the same warp as transformers' with one prompt row fewer (its DTW code on the rows it is given)
    want = transformers_times(w[None], heads, P - 1, num_frames=2 * 140)[0]
    assert aa.word_times(want, ids, decode, P, lambda i: i >= 60) == words


@pytest.mark.parametrize("num_frames", [None, 300, [260, 300]])
def test_token_times_equal_transformers_on_random_attention(num_frames):
    """A batch of two, one crop for both, none, or each its own (transformers' per-clip branch)."""
    rng = np.random.default_rng(1)
    w = rng.dirichlet(np.ones(150), (2, 2, 4, P + 9)).astype(np.float32)
    heads = [(0, 3), (1, 1), (1, 2)]
    want = transformers_times(w, heads, P, num_frames)
    for b in range(2):
        nf = num_frames[b] if isinstance(num_frames, list) else num_frames
        got = aa.token_times(np.stack([w[b, lay, h] for lay, h in heads]), P, nf)
        np.testing.assert_array_equal(got, want[b])


def test_every_head_warped_alone_in_one_batch_equals_transformers_per_head():
    rng = np.random.default_rng(4)
    w = rng.dirichlet(np.ones(120), (2, 5, P + 7)).astype(np.float32)  # 2 layers of 5 heads
    got = aa.token_times_per_head(w.reshape(10, P + 7, 120), P, 200)
    for k in range(10):
        want = transformers_times(w[None], [(k // 5, k % 5)], P, 200)[0]
        np.testing.assert_array_equal(got[k], want)
    mats = rng.normal(size=(aa.DTW_CHUNK + 3, 6, 30))  # more than one chunk
    for (rows, cols), m in zip(aa.dtw_batch(mats), mats):
        want = gw._dynamic_time_warping(m)
        np.testing.assert_array_equal(rows, want[0])
        np.testing.assert_array_equal(cols, want[1])


def test_one_generated_token_has_no_rows_to_warp():
    w = np.random.default_rng(2).dirichlet(np.ones(50), (1, 1, 2, P)).astype(np.float32)
    np.testing.assert_array_equal(aa.token_times(w[0, 0], P), transformers_times(w, [(0, 1)], P, None)[0])


def test_dtw_and_median_filter_equal_transformers_ties_included():
    rng = np.random.default_rng(3)
    for shape in [(1, 1), (3, 1), (1, 5), (7, 40), (20, 33)]:
        for m in (rng.normal(size=shape), rng.integers(0, 2, shape).astype(np.float64)):  # integers: many ties
            want = gw._dynamic_time_warping(m)
            got = aa.dtw(m)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
    x = rng.normal(size=(2, 3, 5, 40)).astype(np.float32)
    for width in (1, 3, 7):
        np.testing.assert_array_equal(aa.median_filter(x, width), gw._median_filter(torch.tensor(x), width).numpy())
    x[0, 1, 2, 5:9] = np.nan  # a column standardised as 0/0: NaN sorts last in torch, and here
    x[1, 0, 0, 0] = np.nan
    np.testing.assert_array_equal(aa.median_filter(x, 7), gw._median_filter(torch.tensor(x), 7).numpy())
    short = x[..., :3]
    np.testing.assert_array_equal(aa.median_filter(short, 7), short)  # too short to filter: as it is


@pytest.fixture(scope="module")
def bpe():
    """A byte-level BPE (Whisper's kind of tokenizer) trained here on a few sentences."""
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(["the cat sat on the mat", "a dog, a log; hello world"] * 5, trainer)
    return tok


@pytest.mark.parametrize(
    "text",
    [
        ' The cat\'s hat, (she said) sat on "the" mat.',
        " Il était une fois — l'été à Zürich... ¿Qué? ¡Sí!",
        " 日本語 and émigrés - well: 12.5% [sic] {ok}",
    ],
)
def test_words_are_split_as_transformers_splits_them(bpe, text):
    """Sub-word tokens merged, a byte-level token ending mid-character held back, punctuation joined to its
    neighbour: transformers' _combine_tokens_into_words on the same tokens and decoder."""
    ids = bpe.encode(text).ids
    assert len(ids) > len(text.split())  # sub-words and byte pieces to merge
    decode = lambda t: bpe.decode(list(t))
    fake = SimpleNamespace(decode=lambda t, decode_with_timestamps=True: decode(t), eos_token_id=10**6)
    words, _, indices = tw._combine_tokens_into_words(fake, ids, "english")
    got = aa.split_words(ids, decode)
    assert [w for w, _ in got] == words and [i for _, i in got] == indices
    assert "".join(words) == text


def test_a_decoder_that_spaces_its_tokens_still_splits_words():
    """A word-level tokenizer puts the spaces between tokens when it decodes: the text added by each token (the
    sequence decoded so far) starts with the space, so each token is a word."""
    vocab = {1: "w1", 2: "w2", 3: ","}
    decode = lambda t: " ".join(vocab[i] for i in t)
    # " ," is not a closing mark to transformers either (only the bare mark is): it stays a word of its own
    assert aa.split_words([1, 2, 3, 1], decode) == [("w1", [0]), (" w2", [1]), (" ,", [2]), (" w1", [3])]


# -- reference word times ---------------------------------------------------------------------------------------
def test_boundary_scores_by_hand():
    """Predicted (the, 0.00-0.30) (cat, 0.30-0.62) (sat, 0.62-1.00); reference the 0.02-0.30, Cat, 0.35-0.60,
    on 0.70-0.80, sat 0.65-1.20: 'on' is not predicted, so 3 of 4 words match, 6 boundaries with errors
    0.02 0 0.05 0.02 0.03 0.20 -> within 20 ms 3/6, 50 ms 5/6, 100 ms 5/6, mean 0.32 / 6."""
    pred = [(0.0, 0.30), (0.30, 0.62), (0.62, 1.00)]
    gold = [
        ag.GoldWord("the", 0.02, 0.30),
        ag.GoldWord("Cat,", 0.35, 0.60),
        ag.GoldWord("on", 0.70, 0.80),
        ag.GoldWord("sat", 0.65, 1.20),
    ]
    pairs = ag.match(["the", "cat", "sat"], [g.text for g in gold])
    assert pairs == [(0, 0), (1, 1), (2, 3)]
    errors = ag.boundary_errors(pred, gold, pairs)
    np.testing.assert_allclose(errors, [0.02, 0.0, 0.05, 0.02, 0.03, 0.20], atol=1e-12)
    s = ag.score(errors, len(pairs), len(gold))
    assert s.within == pytest.approx((3 / 6, 5 / 6, 5 / 6)) and s.mean_abs_error_s == pytest.approx(0.32 / 6)
    assert (s.boundaries, s.matched_words, s.gold_words) == (6, 3, 4)
    assert np.isnan(ag.score([], 0, 4).mean_abs_error_s)


TEXTGRID_SHORT = (
    'File type = "ooTextFile"\nObject class = "TextGrid"\n\n0\n2\n<exists>\n2\n"TextTier"\n"events"\n0\n2\n1\n'
    '0.5\n"click"\n"IntervalTier"\n"w"\n0\n2\n3\n0\n0.4\n"sil"\n0.4\n1\n"a"\n1\n2\n"b"\n'
)


def test_textgrids_long_and_short_utf8_and_utf16_and_tsv():
    want = [ag.GoldWord('say "hi"', 0.5, 1.25), ag.GoldWord("there", 1.25, 2.5)]
    assert ag.parse_gold(TEXTGRID_LONG.encode(), "a.TextGrid") == want
    assert ag.parse_gold(TEXTGRID_LONG.encode("utf-16"), "a.textgrid") == want  # Praat's UTF-16, BOM first
    assert ag.parse_gold(TEXTGRID_LONG.encode(), "a.TextGrid", tier="phones") == [ag.GoldWord("dh", 0, 2.5)]
    assert ag.parse_gold(TEXTGRID_SHORT.encode(), "b.TextGrid") == [ag.GoldWord("a", 0.4, 1), ag.GoldWord("b", 1, 2)]
    tsv = b"word\tstart\tend\nhello\t0.1\t0.5\nsil\t0.5\t0.6\n# a comment\n\nworld 0.6 1.0\n"
    assert ag.parse_gold(tsv, "g.tsv") == [ag.GoldWord("hello", 0.1, 0.5), ag.GoldWord("world", 0.6, 1.0)]


@pytest.mark.parametrize(
    "data, name, words",
    [
        (b"\x00\x01\x02binary" * 50, "x.tsv", ["NUL"]),
        (b"\xff\xfe\x00\xd8", "x.TextGrid", ["not UTF-8 or UTF-16"]),
        (b"\xc3\x28 0 1", "x.tsv", ["not UTF-8"]),
        (b"a\t0.1\n", "x.tsv", ["line 1", "2 fields"]),
        (b"a\tnan\t1\n", "x.tsv", ["line 1", "not a time"]),
        (b"a\t1e400\t1\n", "x.tsv", ["not a time"]),
        (b"a\t-1\t1\n", "x.tsv", ["not a time"]),
        (b"a\t2\t1\n", "x.tsv", ["ends (1 s) before it starts (2 s)"]),
        (b"a\t2\t3\nb\t1\t2\n", "x.tsv", ["starts (1 s) before 'a'"]),
        (b"word\tstart\tend\n", "x.tsv", ["holds no words"]),
        (b"a 0 1\n" * (ag.MAX_WORDS + 1), "x.tsv", ["more than 200,000 words"]),
        (b" " * (ag.MAX_BYTES + 1), "x.tsv", ["larger than 16 MB"]),
        (TEXTGRID_SHORT.replace("\n3\n0\n", "\n1e12\n0\n").encode(), "x.TextGrid", ["interval count", "cut"]),
        (TEXTGRID_SHORT.replace("\n3\n0\n", "\n2.5\n0\n").encode(), "x.TextGrid", ["interval count"]),
        (TEXTGRID_SHORT[:-12].encode(), "x.TextGrid", ["interval count", "cut"]),
        (TEXTGRID_SHORT.replace('"a"', '"a').encode(), "x.TextGrid", ["unexpected"]),
        (TEXTGRID_SHORT.replace('"TextGrid"', '"Sound"').encode(), "x.TextGrid", ["not a Praat TextGrid"]),
        (TEXTGRID_SHORT.replace('"IntervalTier"', '"Weird"').encode(), "x.TextGrid", ["tier class 'Weird'"]),
        (TEXTGRID_SHORT.replace("\n1\n2\n", "\n1\n0.9\n").encode(), "x.TextGrid", ["ends (0.9 s) before"]),
        (TEXTGRID_SHORT.replace("<exists>", "<absent>").encode(), "x.TextGrid", ["has no tiers"]),
        (("[" * 100000).encode(), "x.TextGrid", ["line 1", "unexpected '['"]),
        (TEXTGRID_SHORT.replace("\n2\n<exists>", "\ninf\n<exists>").encode(), "x.TextGrid", ["where its xmax"]),
    ],
    ids=lambda v: v[:24].decode("latin-1") if isinstance(v, bytes) else str(v)[:24],
)
def test_hostile_reference_files_are_refused_in_one_line(data, name, words):
    with pytest.raises(AttnvizError) as e:
        ag.parse_gold(data, name)
    msg = str(e.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_a_missing_tier_names_the_tiers_there():
    with pytest.raises(AttnvizError, match=r"no interval tier 'words' \(its tiers: w\)"):
        ag.parse_gold(TEXTGRID_SHORT.encode(), "b.TextGrid", tier="words")
