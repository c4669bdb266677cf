"""``attnviz corpus MODEL --audio-dir DIR [--gold-dir REFS]`` on the tiny random-init Whisper export
(tests/runtime/test_whisper_align.py's, with three alignment heads): the per-head boundary scores equal
``align-audio --audio-dir``'s on the same files, the map statistics equal transformers' eager attentions, workers
and resume give identical tables, bad recordings are refused in one line and the input folders stay as they were."""

import hashlib
import json
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
sf = pytest.importorskip("soundfile")
pq = pytest.importorskip("pyarrow.parquet")

from attnviz.cli import main  # noqa: E402
from attnviz.corpus.run import CHECKPOINT, CorpusConfig, run_corpus  # noqa: E402

pytestmark = pytest.mark.slow
RATE = 16000
HEADS = [[1, 0], [1, 3], [0, 2]]
PROMPT = [61, 62, 65, 66]  # <|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>
GOLDS = {
    "a": [("w3", 0.10, 0.55), ("w17", 0.55, 1.00), ("w5", 1.10, 1.60), ("w8", 1.60, 2.30)],
    "b": [("w9", 0.2, 0.6), ("w4", 0.6, 1.5)],
    "c": [("w12", 0.0, 0.4), ("w30", 0.5, 0.9), ("w2", 0.9, 1.2)],
}
ALIGNED = ["within_20ms", "within_50ms", "within_100ms", "mean_abs_error_s", "boundaries"]


def chirp(seconds, f0, f1):
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.5 * np.sin(2 * np.pi * (f0 * t + (f1 - f0) / (2 * seconds) * t**2))).astype(np.float32)


CLIPS = {"a": chirp(2.5, 100, 4000), "b": chirp(1.7, 300, 2000), "c": chirp(1.3, 800, 1200)}


@pytest.fixture(scope="module")
def speech(optimum_export, tmp_path_factory):
    """The Whisper folder with alignment heads, three recordings with their references, transformers' model."""
    root = optimum_export("whisper")
    base = tmp_path_factory.mktemp("audio-corpus")
    folder, audio, refs = base / "model", base / "audio", base / "refs"
    for d in (folder, audio, refs):
        d.mkdir()
    for f in (root / "onnx").iterdir():
        shutil.copy(f, folder / f.name)
    gen = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps(gen | {"alignment_heads": HEADS}))
    for name, clip in CLIPS.items():
        sf.write(audio / f"{name}.wav", clip, RATE, subtype="FLOAT")
        (refs / f"{name}.tsv").write_text("".join(f"{w}\t{s}\t{e}\n" for w, s, e in GOLDS[name]))
    (audio / "notes.txt").write_text("not a recording")
    hf = transformers.WhisperForConditionalGeneration.from_pretrained(root / "hf", attn_implementation="eager").eval()
    fe = transformers.WhisperFeatureExtractor.from_pretrained(root / "hf")
    return folder, audio, refs, hf, fe


def _cfg(speech, out, gold=True, **kw):
    folder, audio, refs, _, _ = speech
    return CorpusConfig(
        model=str(folder),
        out=str(out),
        audio_dir=str(audio),
        gold_dir=str(refs) if gold else None,
        provider="cpu",
        progress=False,
        **{"workers": 1, "threads": 1} | kw,
    )


def _snapshot(*folders):
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for d in folders for f in sorted(d.rglob("*"))}


def _rows(path, name="heads.parquet"):
    return pq.read_table(path / name).to_pylist()


@pytest.fixture(scope="module")
def one_worker(speech, tmp_path_factory):
    out = tmp_path_factory.mktemp("one") / "out"
    run_corpus(_cfg(speech, out))
    return out


def _same(x, y):
    """Row for row equal, NaN equal to NaN."""
    assert len(x) == len(y)
    for a, b in zip(x, y):
        assert a.keys() == b.keys()
        for k in a:
            assert a[k] == b[k] or (a[k] != a[k] and b[k] != b[k]), (k, a, b)


def test_corpus_scores_heads_as_align_audio_and_reduces_as_transformers_attends(speech, one_worker, tmp_path, capsys):
    folder, audio, refs, hf, fe = speech
    before = _snapshot(audio, refs)
    out = tmp_path / "corpus"
    args = ["corpus", str(folder), "--audio-dir", str(audio), "--gold-dir", str(refs), "--out", str(out)]
    assert main([*args, "--workers", "1", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "3 items in 3 batches" in printed and "on 9 of 9 reference words in 3 files" in printed
    aligned = tmp_path / "aligned"
    assert (
        main(["align-audio", str(folder), "--audio-dir", str(audio), "--gold-dir", str(refs), "--out", str(aligned)])
        == 0
    )
    assert _snapshot(audio, refs) == before  # nothing written into the input folders
    assert sorted(p.name for p in out.iterdir()) == ["examples.parquet", "heads.parquet", "run.json", "words"]

    # the alignment columns: align-audio's own sums, bit for bit, on every cross head; NaN elsewhere
    theirs = {(r["layer"], r["head"]): [r[c] for c in ALIGNED] for r in _rows(aligned) if r["kind"] == "cross"}
    heads = _rows(out)
    ours = {(r["layer"], r["head"]): [r[c] for c in ALIGNED] for r in heads if r["kind"] == "cross"}
    assert ours == theirs and len(ours) == 8
    assert all(r["within_50ms"] != r["within_50ms"] and r["boundaries"] == 0 for r in heads if r["kind"] == "self")
    for name in CLIPS:  # the same words files, byte for byte
        assert (out / "words" / f"{name}.words.tsv").read_bytes() == (aligned / f"{name}.words.tsv").read_bytes()
    run = json.loads((out / "run.json").read_text())
    chosen = next(r for r in _rows(aligned) if r["kind"] == "alignment heads")
    assert run["audio_gold"]["alignment_heads"] == HEADS
    assert [run["audio_gold"]["alignment_heads_score"][c] for c in ALIGNED] == [chosen[c] for c in ALIGNED]
    _same(_rows(one_worker), heads)  # the library call and the command agree

    # the statistics of the maps: transformers' eager attentions of the teacher-forced references, every row
    # of every recording pooled (a head's mean over all its rows, as a text corpus's)
    vocab = {w: int(w[1:]) for g in GOLDS.values() for w, _, _ in g}
    cross_max, cross_ent, enc_max = [], [], []
    for name, clip in CLIPS.items():
        f = fe(clip, sampling_rate=RATE, return_tensors="pt")
        ids = PROMPT + [vocab[w] for w, _, _ in GOLDS[name]]
        with torch.no_grad():
            o = hf(input_features=f.input_features, decoder_input_ids=torch.tensor([ids]), output_attentions=True)
        cross = torch.stack(o.cross_attentions, 1)[0].numpy().astype(np.float64)  # [layers, heads, rows, frames]
        enc = torch.stack(o.encoder_attentions, 1)[0].numpy().astype(np.float64)
        cross_max.append(cross.max(-1))
        cross_ent.append(-(cross * np.log2(cross + 1e-30)).sum(-1))
        enc_max.append(enc.max(-1))
    by_head = {(r["stack"], r["kind"], r["layer"], r["head"]): r for r in heads}
    for lay in range(2):
        for h in range(4):
            row = by_head[("decoder", "cross", lay, h)]
            assert row["max"] == pytest.approx(np.concatenate([m[lay, h] for m in cross_max]).mean(), abs=2e-5)
            assert row["entropy"] == pytest.approx(np.concatenate([e[lay, h] for e in cross_ent]).mean(), abs=2e-4)
            enc_row = by_head[("encoder", "self", lay, h)]
            assert enc_row["max"] == pytest.approx(np.concatenate([m[lay, h] for m in enc_max]).mean(), abs=2e-5)
    assert {r["items"] for r in heads} == {3}
    examples = _rows(out, "examples.parquet")
    assert {e["audio"] for e in examples} <= {str(audio / f"{n}.wav") for n in CLIPS}
    assert {e["text"] for e in examples} <= {" ".join(w for w, _, _ in g) for g in GOLDS.values()}


def test_two_workers_and_a_resumed_run_give_the_same_tables(speech, one_worker, tmp_path):
    two = tmp_path / "two"
    run_corpus(_cfg(speech, two, workers=2))
    assert json.loads((two / "run.json").read_text())["workers"] == 2
    for name in ("heads.parquet", "examples.parquet"):
        _same(_rows(one_worker, name), _rows(two, name))

    cut = tmp_path / "cut"

    def stop(done):
        if done >= 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_corpus(_cfg(speech, cut), on_batch=stop)
    assert (cut / CHECKPOINT).exists() and not (cut / "heads.parquet").exists()
    s = run_corpus(_cfg(speech, cut))
    assert s.resumed_items == 1 and s.items == 3 and not (cut / CHECKPOINT).exists()
    for name in ("heads.parquet", "examples.parquet"):
        _same(_rows(one_worker, name), _rows(cut, name))
    for f in (one_worker / "words").iterdir():
        assert (cut / "words" / f.name).read_bytes() == f.read_bytes()


def test_ray_reduces_each_recording_as_the_local_engine_does(speech, one_worker, tmp_path, monkeypatch, ray_local):
    """``--engine ray``: the driver's plan (one batch a recording) through Ray Data actors, each its own
    session; the folders given relative to the command's directory, as typed.  The tables, the words files and
    run.json's alignment summary are the local engine's, bit for bit."""
    pytest.importorskip("ray.data")
    folder, audio, refs, _, _ = speech
    monkeypatch.chdir(audio.parent)  # after the folder's cluster started elsewhere: the driver resolves the paths
    out = tmp_path / "ray"
    cfg = _cfg(speech, out, engine="ray", workers=2)
    cfg.audio_dir, cfg.gold_dir = audio.name, refs.name
    assert run_corpus(cfg).items == 3
    _same(_rows(one_worker), _rows(out))
    examples = _rows(out, "examples.parquet")  # each names its recording as the command was given it
    assert {e["audio"] for e in examples} <= {f"{audio.name}/{n}.wav" for n in CLIPS}
    _same(_rows(one_worker, "examples.parquet"), [e | {"audio": str(audio.parent / e["audio"])} for e in examples])
    assert sorted(p.name for p in (out / "words").iterdir()) == sorted(p.name for p in (one_worker / "words").iterdir())
    for f in (one_worker / "words").iterdir():
        assert (out / "words" / f.name).read_bytes() == f.read_bytes()
    run, local = (json.loads((d / "run.json").read_text()) for d in (out, one_worker))
    assert run["engine"] == "ray" and "ray" in run["versions"] and run["workers"] == 2
    assert run["audio_gold"] == local["audio_gold"] and run["data_sha256"] == local["data_sha256"]


def test_without_references_the_model_generates_as_align_audio_does(speech, tmp_path):
    folder, audio, _, _, _ = speech
    out, aligned = tmp_path / "corpus", tmp_path / "aligned"
    s = run_corpus(_cfg(speech, out, gold=False))
    assert s.items == 3
    assert main(["align-audio", str(folder), "--audio-dir", str(audio), "--out", str(aligned)]) == 0
    for name in CLIPS:
        assert (out / "words" / f"{name}.words.tsv").read_bytes() == (aligned / f"{name}.words.tsv").read_bytes()
    heads = _rows(out)
    assert "within_50ms" not in heads[0] and len(heads) == 24
    run = json.loads((out / "run.json").read_text())
    assert run["decoder_input"].startswith("greedy generation") and "alignment_heads_score" not in run["audio_gold"]


def test_bad_recordings_and_flags_are_one_line_and_write_nothing(speech, optimum_export, tmp_path, capsys):
    folder, audio, refs, _, _ = speech
    out = tmp_path / "out"

    def refused(args, *words):
        capsys.readouterr()
        assert main(["corpus", *args, "--no-progress"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and all(w in err[0] for w in words), err
        assert not out.exists()

    for name, write, words in [
        ("silent", lambda p: sf.write(p, np.zeros(RATE, np.float32), RATE), ("silent.wav", "is silent")),
        ("broken", lambda p: p.write_bytes(b"RIFF\x00\x00not a wave at all"), ("broken.wav", "not a readable")),
        ("long", lambda p: sf.write(p, chirp(6.0, 100, 900), RATE), ("long.wav", "6.00 s long")),
    ]:
        bad = tmp_path / name
        shutil.copytree(audio, bad)
        write(bad / f"{name}.wav")
        before = _snapshot(bad)
        refused([str(folder), "--audio-dir", str(bad), "--out", str(out)], "corpus item", *words)
        assert _snapshot(bad) == before
    base = [str(folder), "--audio-dir", str(audio)]
    refused([*base, "--out", str(audio / "results")], "inside --audio-dir")
    refused([*base, "--gold-dir", str(refs), "--generate", "4", "--out", str(out)], "drop --generate")
    refused([str(folder), "--gold-dir", str(refs), "--texts", str(refs / "a.tsv"), "--out", str(out)], "--audio-dir")
    refused([str(folder), "--texts", str(refs / "a.tsv"), "--out", str(out)], "speech model", "--audio-dir DIR")
    marian = optimum_export("marian") / "onnx"
    refused([str(marian), "--audio-dir", str(audio), "--out", str(out)], "takes no sound")
    missing = tmp_path / "refs-missing"
    shutil.copytree(refs, missing)
    (missing / "b.tsv").unlink()
    refused([*base, "--gold-dir", str(missing), "--out", str(out)], "no reference for b.wav")
