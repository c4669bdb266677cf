"""Word timestamps of a Whisper folder (``attnviz align-audio``) against transformers on the same tiny random-init
Whisper as tests/runtime/test_optimum_whisper.py: its ``generate(return_token_timestamps=True)`` with the same
``alignment_heads``, and its ``_extract_token_timestamps`` on its own eager cross-attentions of a teacher-forced
transcript; the per-head table against a hand computation from transformers' times."""

import json
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
sf = pytest.importorskip("soundfile")
pq = pytest.importorskip("pyarrow.parquet")

from whisper_reference import TEXTGRID_LONG, transformers_times  # noqa: E402

from attnviz.cli import main  # noqa: E402
from attnviz.core import audio_align as aa  # noqa: E402
from attnviz.runtime import audio_words as aw  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402
from attnviz.runtime.audio import FeatureSpec  # noqa: E402

pytestmark = pytest.mark.slow
RATE = 16000
P = 4  # <|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>
# words warp from the prompt's last row (OpenAI whisper's rows, core/audio_align.word_rows): transformers' DTW on
# the rows from there is their reference; its own token_timestamps (from row P) are the generated tokens' times
W = P - 1
HEADS = [[1, 0], [1, 3], [0, 2]]
GOLD = [("w3", 0.10, 0.55), ("w17", 0.55, 1.00), ("w5", 1.10, 1.60), ("w8", 1.60, 2.30)]


def chirp(seconds=2.5, f0=100.0, f1=4000.0):
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.5 * np.sin(2 * np.pi * (f0 * t + (f1 - f0) / (2 * seconds) * t**2))).astype(np.float32)


@pytest.fixture(scope="module")
def whisper(optimum_export, tmp_path_factory):
    """The export with the three alignment heads in its generation_config.json, and transformers' model."""
    root = optimum_export("whisper")
    folder = tmp_path_factory.mktemp("whisper-align")
    for f in (root / "onnx").iterdir():
        shutil.copy(f, folder / f.name)
    gen = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps(gen | {"alignment_heads": HEADS}))
    hf = transformers.WhisperForConditionalGeneration.from_pretrained(root / "hf", attn_implementation="eager").eval()
    fe = transformers.WhisperFeatureExtractor.from_pretrained(root / "hf")
    return folder, hf, fe


def test_generated_token_times_equal_transformers_generate(whisper):
    """Greedy generation on two clip lengths: the tokens and every token's time equal transformers'
    ``generate(return_token_timestamps=True)`` (the clip's frames from its feature extractor's attention mask)."""
    folder, hf, fe = whisper
    model = open_model(folder, provider="cpu")
    config = aw.AlignConfig.for_model(model)
    assert config.heads == tuple(map(tuple, HEADS)) and config.median_width == 7
    gc = transformers.GenerationConfig.from_pretrained(folder)
    gc.update(max_new_tokens=12, do_sample=False, num_beams=1)
    for clip in (chirp(), chirp(1.7, 300, 2000)):
        f = fe(clip, sampling_rate=RATE, return_tensors="pt", return_attention_mask=True)
        with torch.no_grad():
            out = hf.generate(
                f.input_features,
                attention_mask=f.attention_mask,
                generation_config=gc,
                return_token_timestamps=True,
                return_dict_in_generate=True,
            )
        clip_attn = aw.run_clip(model, clip, None, 12)
        assert clip_attn.n_frames == int(f.attention_mask.sum())
        assert clip_attn.ids == [int(t) for t in out["sequences"][0]]
        times = aa.token_times(clip_attn.weights(config.heads), clip_attn.n_prompt, clip_attn.n_frames)
        np.testing.assert_array_equal(times, out["token_timestamps"][0].numpy())
        assert len(set(times.tolist())) > 3  # the path moves: not a constant that would equal anything


def test_a_run_carries_its_word_times_for_the_audio_view(whisper, optimum_export, tmp_path):
    """A folder naming its alignment heads: a plain teacher-forced run carries the words align-audio finds, and the
    Audio regions view model reads them as spans; a folder naming none, a batch of two, and a list that does not
    fit the model (a note; the maps stand) carry none."""
    from attnviz.core.audio_view import word_spans

    folder, _, _ = whisper
    model = open_model(folder, provider="cpu")
    r = model.analyze(audio=chirp(), text_pair="w3 w17 w5 w8")
    clip = aw.run_clip(model, chirp(), "w3 w17 w5 w8", None)
    want = clip.words([tuple(h) for h in HEADS])
    assert r.info["word_times"] == [[w.text, w.start, w.end] for w in want]
    assert [(w.word, w.start, w.end) for w in word_spans(r)] == [(w.text, w.start, w.end) for w in want]
    assert "word_times" not in model.analyze(audio=[chirp(), chirp(1.7)], text_pair="w3 w17").info
    plain = open_model(optimum_export("whisper") / "onnx", provider="cpu")
    assert "word_times" not in plain.analyze(audio=chirp(), text_pair="w3 w17").info
    bad = tmp_path / "bad"
    shutil.copytree(folder, bad)
    gen = json.loads((bad / "generation_config.json").read_text())
    (bad / "generation_config.json").write_text(json.dumps(gen | {"alignment_heads": [[7, 0]]}))
    r = open_model(bad, provider="cpu").analyze(audio=chirp(), text_pair="w3 w17")
    assert "word_times" not in r.info and any("no word times: " in n and "[7, 0]" in n for n in r.info["notes"])


def test_feature_frames_are_the_feature_extractors_mask():
    fe = transformers.WhisperFeatureExtractor(feature_size=80, chunk_length=5)
    spec = FeatureSpec.from_dict(fe.to_dict())
    for n in (1, 159, 160, 161, 27_345, 80_000):
        mask = fe(np.ones(n, np.float32), sampling_rate=RATE, return_attention_mask=True).attention_mask
        assert aw.feature_frames(n, spec) == int(np.sum(mask)), n


def _hf_cross(hf, fe, clip, ids, logits=False):
    """transformers' eager cross-attentions of ``ids`` teacher-forced: [1, layers, heads, rows, frames], the clip's
    frames (and its softmax over the vocabulary, [rows, vocab])."""
    f = fe(clip, sampling_rate=RATE, return_tensors="pt", return_attention_mask=True)
    with torch.no_grad():
        o = hf(input_features=f.input_features, decoder_input_ids=torch.tensor([ids]), output_attentions=True)
    out = torch.stack(o.cross_attentions, 1).numpy(), int(f.attention_mask.sum())
    return (*out, torch.softmax(o.logits[0], -1).numpy()) if logits else out


def _gold_words(tmp_path):
    gold = tmp_path / "gold.tsv"
    gold.write_text("word\tstart\tend\n" + "".join(f"{w}\t{s}\t{e}\n" for w, s, e in GOLD))
    return gold


def _errors(times, gold=GOLD):
    """Word k (decoder position P + k) spans (times[P + k - 1], times[P + k]): its start's and end's errors."""
    errs = []
    for k, (_, s, e) in enumerate(gold):
        errs += [abs(round(float(times[P + k - 1]), 2) - s), abs(round(float(times[P + k]), 2) - e)]
    return errs


def _by_hand(errs):
    """The shares within 20 / 50 / 100 ms and the mean error, computed here."""
    errs = np.array(errs)
    return [float(np.mean(errs <= t + 1e-9)) for t in (0.02, 0.05, 0.1)] + [float(errs.mean())]


def test_cli_words_and_every_head_scored_as_transformers_times_say(whisper, tmp_path, capsys):
    """Teacher-forced on the reference's words: the words file holds transformers' times (its DTW on its own
    eager attentions, from the row that predicts the first word), heads.parquet every cross head and the alignment-heads set, each row equal to the shares
    and mean error computed by hand from transformers' times for that head alone; a TextGrid of the same words
    gives the same table."""
    folder, hf, fe = whisper
    wav = tmp_path / "chirp.wav"
    sf.write(wav, chirp(), RATE, subtype="FLOAT")
    gold = _gold_words(tmp_path)
    out = tmp_path / "words.tsv"
    assert main(["align-audio", str(folder), "--audio", str(wav), "--gold", str(gold), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "3 heads (generation_config.json alignment_heads)" in said and "scored on 4 of 4 reference words" in said

    ids = [61, 62, 65, 66, 3, 17, 5, 8]
    cross, n_frames, probs = _hf_cross(hf, fe, chirp(), ids, logits=True)
    want = transformers_times(cross, HEADS, W, n_frames)[0]
    lines = out.read_text().splitlines()
    assert lines[0] == "word\tstart\tend\ttokens\tprobability"
    rows = [ln.split("\t") for ln in lines[1:]]
    assert [r[0] for r in rows] == [w for w, _, _ in GOLD] and [r[3] for r in rows] == ["3", "17", "5", "8"]
    got = [(float(r[1]), float(r[2])) for r in rows]
    assert got == [(round(float(want[P + k - 1]), 2), round(float(want[P + k]), 2)) for k in range(4)]
    # each (one-token) word's probability: transformers' softmax of the row before it
    np.testing.assert_allclose([float(r[4]) for r in rows], [probs[P + k - 1, ids[P + k]] for k in range(4)], atol=2e-4)

    table = pq.read_table(tmp_path / "heads.parquet").to_pylist()
    assert list(table[0]) == [
        "stack",
        "kind",
        "layer",
        "head",
        "within_20ms",
        "within_50ms",
        "within_100ms",
        "mean_abs_error_s",
        "boundaries",
    ]
    assert len(table) == 2 * 4 + 1 and {r["stack"] for r in table} == {"decoder"}
    for r in table:
        heads = HEADS if r["kind"] == "alignment heads" else [[r["layer"], r["head"]]]
        hand = _by_hand(_errors(transformers_times(cross, heads, W, n_frames)[0]))
        assert [r["within_20ms"], r["within_50ms"], r["within_100ms"], r["mean_abs_error_s"]] == pytest.approx(hand)
        assert r["boundaries"] == 8
    keys = [(-r["within_50ms"], r["mean_abs_error_s"]) for r in table]
    assert keys == sorted(keys)  # ranked: most within 50 ms first, then the smallest error

    grid = tmp_path / "gold.TextGrid"
    intervals = "".join(
        f'        intervals [{k + 2}]:\n            xmin = {s}\n            xmax = {e}\n            text = "{w}"\n'
        for k, (w, s, e) in enumerate(GOLD)
    )
    text = TEXTGRID_LONG.split("        intervals [1]:\n            xmin = 0\n            xmax = 0.5")[0]
    text = text.replace("intervals: size = 3", f"intervals: size = {len(GOLD) + 1}").replace("xmax = 2.5", "xmax = 2.3")
    text += '        intervals [1]:\n            xmin = 0\n            xmax = 0.1\n            text = ""\n' + intervals
    grid.write_text(text.replace("size = 2\nitem", "size = 2\nitem"), encoding="utf-16")
    out2, table2 = tmp_path / "words2.json", tmp_path / "grid.parquet"
    args = ["align-audio", str(folder), "--audio", str(wav), "--gold", str(grid), "--out", str(out2)]
    assert main([*args, "--table", str(table2)]) == 0
    assert pq.read_table(table2).to_pylist() == table
    words = json.loads(out2.read_text())["words"]
    assert [(w["word"], w["start"], w["end"]) for w in words] == [(r[0], *g) for r, g in zip(rows, got)]
    assert [w["probability"] for w in words] == pytest.approx([float(r[4]) for r in rows], abs=1e-4)


def test_cli_a_folder_of_recordings_scored_together(whisper, tmp_path, capsys):
    """--audio-dir with --gold-dir: each recording's words beside the others, one heads.parquet whose rows pool
    the boundary errors of both recordings (computed here from transformers' times of each)."""
    folder, hf, fe = whisper
    audio, refs, out = tmp_path / "audio", tmp_path / "refs", tmp_path / "results"
    audio.mkdir()
    refs.mkdir()
    clips = {"a": chirp(), "b": chirp(1.7, 300, 2000)}
    golds = {"a": GOLD, "b": [("w9", 0.2, 0.6), ("w4", 0.6, 1.5)]}
    sf.write(audio / "a.wav", clips["a"], RATE, subtype="FLOAT")
    sf.write(audio / "b.flac", clips["b"], RATE, subtype="PCM_24")
    (audio / "notes.txt").write_text("not a recording")
    (refs / "a.tsv").write_text("".join(f"{w}\t{s}\t{e}\n" for w, s, e in golds["a"]))
    (refs / "b.tsv").write_text("".join(f"{w}\t{s}\t{e}\n" for w, s, e in golds["b"]))
    args = ["align-audio", str(folder), "--audio-dir", str(audio), "--gold-dir", str(refs), "--out", str(out)]
    assert main(args) == 0
    assert "scored on 6 of 6 reference words in 2 files" in capsys.readouterr().out
    assert sorted(f.name for f in out.iterdir()) == ["a.words.tsv", "b.words.tsv", "heads.parquet"]
    held = {"a": clips["a"], "b": sf.read(audio / "b.flac", dtype="float32")[0]}  # as the 24-bit file holds it
    vocab = {w: int(w[1:]) for g in golds.values() for w, _, _ in g}
    cross = {k: _hf_cross(hf, fe, held[k], [61, 62, 65, 66] + [vocab[w] for w, _, _ in golds[k]]) for k in held}
    table = pq.read_table(out / "heads.parquet").to_pylist()
    assert len(table) == 9
    for r in table:
        heads = HEADS if r["kind"] == "alignment heads" else [[r["layer"], r["head"]]]
        errs = []
        for k, (attn, n_frames) in cross.items():
            errs += _errors(transformers_times(attn, heads, W, n_frames)[0], golds[k])
        assert [r["within_20ms"], r["within_50ms"], r["within_100ms"], r["mean_abs_error_s"]] == pytest.approx(
            _by_hand(errs)
        )
        assert r["boundaries"] == 12
    (refs / "b.tsv").unlink()
    shutil.rmtree(out)
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no reference for b.flac; give b.tsv or b.TextGrid" in err[0], err
    assert not out.exists()


def test_cli_named_heads_and_generation(whisper, tmp_path, capsys):
    """--heads overrides the folder's list; without a transcript the model's own greedy tokens are aligned."""
    folder, hf, fe = whisper
    wav = tmp_path / "chirp.wav"
    sf.write(wav, chirp(), RATE, subtype="FLOAT")
    out = tmp_path / "words.json"
    spec = "decoder cross 0:1, decoder cross 1:2"
    assert main(["align-audio", str(folder), "--audio", str(wav), "--heads", spec, "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["heads"] == [[0, 1], [1, 2]] and d["heads_from"] == "--heads" and d["transcript"] == "generated"
    model = open_model(folder, provider="cpu")
    clip = aw.run_clip(model, chirp(), None, None)
    words = clip.words([(0, 1), (1, 2)])
    assert [(w["word"], w["start"], w["end"]) for w in d["words"]] == [(w.text, w.start, w.end) for w in words]
    assert len(d["words"]) == len([i for i in clip.ids[P:] if i < 60])  # one word a (word-level) token
    assert {w["probability"] for w in d["words"]} == {None}  # cached generation keeps no logits


def test_an_audio_note_goes_to_stderr_with_the_prefix(whisper, tmp_path, capsys):
    """A stereo recording is mixed down, and the command says so: as ``note: ...`` on stdout, between the result
    lines scripts read, before session 21; now ``attnviz: note: ...`` on stderr, as every command's notes."""
    folder, _, _ = whisper
    wav = tmp_path / "stereo.wav"
    sf.write(wav, np.stack([chirp(), chirp()], axis=1), RATE, subtype="FLOAT")
    out = tmp_path / "words.json"
    assert main(["align-audio", str(folder), "--audio", str(wav), "--out", str(out)]) == 0
    io = capsys.readouterr()
    assert io.err.splitlines() == ["attnviz: note: stereo.wav: 2 channels mixed down to mono"]
    assert len(io.out.splitlines()) == 1 and io.out.startswith(f"wrote {out}: ")


def test_the_default_table_never_replaces_another_commands_results(whisper, tmp_path, capsys):
    """Audit 17: with --gold, heads.parquet goes beside --out; --out inside a corpus results folder replaced the
    corpus run's heads.parquet.  Refused in one line (tests/test_hostile_foreign_results.py: the other commands)."""
    folder, _, _ = whisper
    wav = tmp_path / "chirp.wav"
    sf.write(wav, chirp(), RATE, subtype="FLOAT")
    gold = _gold_words(tmp_path)
    results = tmp_path / "corpus-results"
    results.mkdir()
    (results / "run.json").write_text(json.dumps({"top_k": 5, "example_ranking": "direction"}))
    (results / "heads.parquet").write_bytes(b"the corpus run's table")
    out = results / "words.tsv"
    assert main(["align-audio", str(folder), "--audio", str(wav), "--gold", str(gold), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'attnviz corpus'" in err[0] and "another --out" in err[0], err
    assert (results / "heads.parquet").read_bytes() == b"the corpus run's table" and not out.exists()
    table = tmp_path / "mine.parquet"  # a --table named by the user is written where it says
    args = ["align-audio", str(folder), "--audio", str(wav), "--gold", str(gold), "--table", str(table)]
    assert main([*args, "--out", str(out)]) == 0 and table.is_file()


def test_cli_bad_input_is_one_line_and_writes_nothing(whisper, optimum_export, tmp_path, capsys):
    folder, _, _ = whisper
    wav = tmp_path / "chirp.wav"
    sf.write(wav, chirp(), RATE, subtype="FLOAT")
    gold = _gold_words(tmp_path)
    out = tmp_path / "words.tsv"
    base = ["align-audio", str(folder), "--audio", str(wav)]

    def refused(args, *words):
        capsys.readouterr()
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and all(w in err[0] for w in words), err
        assert not out.exists() and not (tmp_path / "heads.parquet").exists()

    refused([*base, "--out", str(tmp_path / "words.txt")], "give a .tsv or .json")
    refused([*base, "--heads", "encoder self 0:1", "--out", str(out)], "decoder cross-attention heads")
    refused([*base, "--heads", "decoder cross 5:0", "--out", str(out)], "no site decoder cross L5")
    refused([*base, "--heads", "decoder cross 1:9", "--out", str(out)], "has 4 heads")
    refused([*base, "--table", str(tmp_path / "t.parquet"), "--out", str(out)], "give --gold REF too")
    refused([*base, "--gold-dir", str(tmp_path), "--out", str(out)], "--gold-dir goes with --audio-dir")
    refused(["align-audio", str(folder), "--out", str(out)], "--audio FILE", "--audio-dir DIR")
    text_model = optimum_export("marian") / "onnx"  # a translation folder: no audio, no word times
    refused(["align-audio", str(text_model), "--audio", str(wav), "--out", str(out)], "not a speech model folder")
    long, unknown = tmp_path / "long.txt", tmp_path / "unknown.txt"
    long.write_text(" ".join(f"w{k % 60}" for k in range(61)))  # 4 + 61 > the decoder's 64 positions
    unknown.write_text("hello there")
    refused([*base, "--transcript", str(long), "--out", str(out)], "61 tokens", "holds 60 after its 4-token prompt")
    refused([*base, "--transcript", str(unknown), "--out", str(out)], "no word the model's tokenizer knows")
    refused([*base, "--gold", str(gold), "--out", str(gold)], "--out", "overwrite an input")
    hostile = tmp_path / "hostile.TextGrid"
    hostile.write_bytes(b'File type = "ooTextFile"\nObject class = "TextGrid"\n0 1 <exists> 99999999 "x"')
    refused([*base, "--gold", str(hostile), "--out", str(out)], "hostile.TextGrid", "tier count")
    nul = tmp_path / "nul.tsv"
    nul.write_bytes(b"a\x00\t0\t1\n")
    refused([*base, "--gold", str(nul), "--out", str(out)], "nul.tsv", "NUL")
    for key, value, words in [
        ("alignment_heads", [[9, 0]], ("alignment head [9, 0] does not exist", "--heads")),
        ("alignment_heads", "all", ("not a list of [layer, head] pairs",)),
    ]:
        bad = tmp_path / f"bad-{len(words)}"
        shutil.copytree(folder, bad)
        gen = json.loads((bad / "generation_config.json").read_text())
        (bad / "generation_config.json").write_text(json.dumps(gen | {key: value}))
        refused(["align-audio", str(bad), "--audio", str(wav), "--out", str(out)], *words)
    bad = tmp_path / "bad-width"
    shutil.copytree(folder, bad)
    cfg = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps(cfg | {"median_filter_width": 4}))
    refused(["align-audio", str(bad), "--audio", str(wav), "--out", str(out)], "median_filter_width 4", "odd")
