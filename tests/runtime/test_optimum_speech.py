"""Speech encoders on raw samples (wav2vec2, HuBERT, WavLM) exported by optimum, given a sound file.

Tiny random-init models (tests/optimum_env.py SPEECH_SCRIPT: 2 layers, hidden 32, 4 heads, conv stacks of 16
channels) exported with optimum-onnx in the second venv: a wav2vec2 CTC head on wav2vec2-base's conv stack (20 ms
frames), a HuBERT with its own stack (5 ms frames) whose extractor returns the attention mask, a WavLM (gated
relative position bias) under a classification head.  The references are transformers' own: its
``Wav2Vec2FeatureExtractor`` for the samples fed, the eager model's ``output_attentions`` on them for the maps, and
``_get_feat_extract_output_lengths`` for the frame count.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
sf = pytest.importorskip("soundfile")

from cli_run import refuse_unusable_clips, refused_in_one_line  # noqa: E402

from attnviz.core.io import load_npz  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402
from attnviz.runtime.audio import load_audio  # noqa: E402
from attnviz.runtime.audio_specs import audio_spec  # noqa: E402
from attnviz.runtime.waveform import WaveSpec  # noqa: E402

TOL = 1e-4  # measured: at most 6e-6 (bench/RESULTS.md, session 22 w2v22)
RATE = 16000
pytestmark = pytest.mark.slow
MODELS = {  # arch -> (transformers class, ms per frame from the config's strides)
    "wav2vec2": ("Wav2Vec2ForCTC", 20.0),
    "hubert": ("HubertModel", 5.0),
    "wavlm": ("WavLMForSequenceClassification", 20.0),
    "data2vec-audio": ("Data2VecAudioForAudioFrameClassification", 20.0),
}


def chirp(seconds=1.3, f0=150.0, f1=3000.0, rate=RATE):
    t = np.arange(int(seconds * rate)) / rate
    x = 0.4 * np.sin(2 * np.pi * (f0 * t + (f1 - f0) / (2 * seconds) * t**2))
    return (x + np.random.default_rng(1).normal(0, 0.02, len(t)) + 0.05).astype(np.float32)  # an offset to remove


@pytest.fixture(scope="module", params=list(MODELS))
def speech(request, optimum_export):
    arch = request.param
    root = optimum_export(arch)
    cls, ms = MODELS[arch]
    hf = getattr(transformers, cls).from_pretrained(root / "hf", attn_implementation="eager").eval()
    fe = transformers.Wav2Vec2FeatureExtractor.from_pretrained(root / "hf")
    return arch, root, hf, fe, ms


def _reference(hf, fe, clips, monkeypatch):
    """transformers' samples and eager attentions.  WavLM's attention runs through torch's
    ``multi_head_attention_forward``, whose weights come averaged over the heads (and transformers broadcasts the
    mean to every head: pytorch issue 32590); asked for them per head (``average_attn_weights=False``) they are
    the heads' own, which the mean of checks too."""
    mha = torch.nn.functional.multi_head_attention_forward

    def per_head(*a, **kw):
        return mha(*a, **kw, average_attn_weights=False)

    inp = fe(clips, sampling_rate=RATE, padding=True, return_tensors="pt")
    with torch.no_grad():
        mean = hf(input_values=inp.input_values, output_attentions=True).attentions
        monkeypatch.setattr(torch.nn.functional, "multi_head_attention_forward", per_head)
        o = hf(input_values=inp.input_values, output_attentions=True)
        monkeypatch.undo()
    refs = []
    for a, m in zip(o.attentions, mean):
        if a.ndim == 5:  # WavLM's broadcast of per-head weights: [B, H (copies), H, T, T]; its own output the mean
            a = a[:, 0]
            np.testing.assert_allclose(a.mean(1, keepdim=True).expand_as(m).numpy(), m.numpy(), atol=1e-6)
        refs.append(a)
    return inp.input_values.numpy(), [r.numpy() for r in refs]


def test_maps_equal_transformers_on_a_sound_file(speech, tmp_path, monkeypatch):
    """A 1.3 s chirp written as a WAV: every encoder map equals transformers' eager attentions on its own feature
    extractor's samples; the positions are the conv stack's frames, labelled by their start times."""
    arch, root, hf, fe, ms = speech
    clip = chirp()
    sf.write(tmp_path / "clip.wav", clip, RATE, subtype="FLOAT")
    m = open_model(root / "onnx", provider="cpu")
    assert m.roles["input_values"] == "audio"
    spec = audio_spec(m.meta["audio"])
    assert isinstance(spec, WaveSpec) and spec.frame_seconds * 1000 == pytest.approx(ms)
    values, refs = _reference(hf, fe, [clip], monkeypatch)
    ours, mask = spec.encode([clip])
    np.testing.assert_allclose(ours, values, atol=1e-5)  # the extractor's normalisation, its epsilon included
    assert mask.tolist() == [[1] * len(clip)]
    r = m.analyze(audio=str(tmp_path / "clip.wav"))
    n = int(hf._get_feat_extract_output_lengths(torch.tensor(len(clip))))
    assert [(s.stack, s.kind, s.layer) for s in r.sites] == [("encoder", "self", 0), ("encoder", "self", 1)]
    for got, want in zip(r.maps, refs):
        a = got.array()
        assert a.shape == want.shape == (1, 4, n, n)
        np.testing.assert_allclose(a, want, atol=TOL)
    labels = r.blocks()[0].query_axis.labels
    assert len(labels) == n
    assert labels[1].startswith(f"{ms / 1000:.2f} s" if ms >= 10 else f"{ms / 1000:.3f} s")  # (a CTC letter after)
    assert float(labels[-1].split()[0]) == pytest.approx((n - 1) * ms / 1000)
    assert r.audio is not None and r.audio.frame_seconds == pytest.approx(ms / 1000)
    # above the maps, each frame's loudness: the RMS of the 25 ms (or 6.6 ms) it hears, in dBFS, by hand
    hop, seen = int(RATE * ms / 1000), spec.receptive_samples
    rms = [np.sqrt(np.mean(clip[i * hop : i * hop + seen].astype(np.float64) ** 2)) for i in (0, n // 2, n - 1)]
    got = r.blocks()[0].key_axis.values
    np.testing.assert_allclose([got[0], got[n // 2], got[n - 1]], 20 * np.log10(rms), atol=0.01)
    if arch == "wav2vec2":  # the CTC head's greedy transcript, as transformers' tokenizer decodes its argmax
        tok = transformers.Wav2Vec2CTCTokenizer.from_pretrained(root / "hf")
        with torch.no_grad():
            want = tok.batch_decode(hf(torch.tensor(values)).logits.argmax(-1))[0]
        assert f"CTC transcript (greedy): {want}" in r.info["notes"]
        letters = [label.split(" ", 2)[2] for label in labels if label.count(" ") == 2]  # "0.42 s T"
        assert "".join(letters).replace("|", " ").strip() == want and len(letters) > 5


def test_a_batch_of_two_clips_feeds_the_extractors_mask(optimum_export, tmp_path):
    """HuBERT's extractor returns the attention mask, and the graph takes one (a torch.onnx export of the same
    weights): two clips of different lengths, padded to the longer, run with the mask; every map equals
    transformers' on its extractor's padded batch and mask (the shorter clip's padding gets no weight)."""
    root = optimum_export("hubert")
    hf = transformers.HubertModel.from_pretrained(root / "hf", attn_implementation="eager").eval()
    fe = transformers.Wav2Vec2FeatureExtractor.from_pretrained(root / "hf")
    clips = [chirp(1.0), chirp(0.6, 400.0, 900.0)]
    paths = []
    for i, c in enumerate(clips):
        paths.append(str(tmp_path / f"c{i}.wav"))
        sf.write(paths[-1], c, RATE, subtype="FLOAT")
    m = open_model(root / "onnx_mask", provider="cpu")
    assert m.roles == {"input_values": "audio", "attention_mask": "mask"}
    r = m.analyze(audio=paths)
    inp = fe(clips, sampling_rate=RATE, padding=True, return_tensors="pt")
    assert inp.attention_mask[1].sum() == len(clips[1]) < inp.attention_mask.shape[1]
    with torch.no_grad():
        refs = hf(**inp, output_attentions=True).attentions
    for got, want in zip(r.maps, refs):
        a = got.array()
        assert a.shape == tuple(want.shape) and a.shape[0] == 2
        np.testing.assert_allclose(a, want.numpy(), atol=TOL)
    short = int(hf._get_feat_extract_output_lengths(torch.tensor(len(clips[1]))))
    assert r.maps[0].array()[1, :, :, short:].max() < 1e-6  # the padding frames: masked out


def test_cli_extract_figure_inspect_and_bad_audio(optimum_export, tmp_path, capsys):
    """The CLI on the wav2vec2 CTC folder: inspect says how it hears, extract writes transformers' maps, the audio
    figure draws the clip's frames, and bad clips are refused in one line (exit 2) without an output file."""
    from attnviz.cli import main

    root = optimum_export("wav2vec2")
    folder = root / "onnx"
    assert main(["inspect", str(folder)]) == 0
    said = capsys.readouterr().out
    assert "input_values" in said and "role=audio" in said
    assert "16000 Hz samples (Wav2Vec2FeatureExtractor, normalised per clip), frames of 20 ms (25 ms heard" in said
    wav = tmp_path / "clip.wav"
    clip = chirp(22050 * 1.3 / 22050, rate=22050)  # a 22.05 kHz file: resampled to the extractor's 16 kHz
    sf.write(wav, clip, 22050, subtype="FLOAT")
    out = tmp_path / "maps.npz"
    assert main(["extract", str(folder), "--audio", str(wav), "--out", str(out)]) == 0
    z = np.load(out)
    said = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("attnviz: note: ")]
    transcript = next(n for n in load_npz(out).info["notes"] if n.startswith("CTC transcript (greedy): "))
    assert said == [f"attnviz: note: {wav.name}: resampled from 22050 Hz to 16000 Hz", f"attnviz: note: {transcript}"]
    n = (int(round(1.3 * RATE)) - 400) // 320 + 1  # frames of 20 ms, each hearing 25 ms
    assert z["attn_000"].shape == (1, 4, n, n) and len(z["audio_waves"][0]) == int(round(1.3 * RATE))
    fig = tmp_path / "audio.png"
    assert main(["figure", str(out), "--view", "audio", "--query", "10", "--out", str(fig), "--dpi", "50"]) == 0
    assert fig.stat().st_size > 0

    def refused(args, *words):
        refused_in_one_line(capsys, args, *words, unwritten=out)

    out.unlink()
    long = tmp_path / "long.wav"  # no window, but a cap: 31 s is refused unless --max-seconds says how much
    sf.write(long, np.tile(chirp(1.0), 31), RATE)
    refused(["extract", str(folder), "--audio", str(long), "--out", str(out)], "31.00 s", "--max-seconds 30")
    short = tmp_path / "short.wav"  # 20 ms: shorter than one frame's 25 ms
    sf.write(short, chirp(0.02), RATE)
    refused(["extract", str(folder), "--audio", str(short), "--out", str(out)], "short.wav", "25 ms")
    refuse_unusable_clips(refused, folder, out, tmp_path)
    # what needs a Whisper folder (words to time, a corpus of recordings) says so rather than failing inside
    refused(
        ["align-audio", str(folder), "--audio", str(wav), "--out", str(tmp_path / "a.tsv")], "raw samples", "Whisper"
    )
    clips = tmp_path / "clips"
    clips.mkdir()
    sf.write(clips / "a.wav", chirp(), RATE)
    refused(["corpus", str(folder), "--audio-dir", str(clips), "--out", str(tmp_path / "c")], "raw samples", "--audio")
    # --max-seconds cuts, and moves the cap: the model has no window, all 31 s are read
    capsys.readouterr()
    assert main(["extract", str(folder), "--audio", str(long), "--max-seconds", "2", "--out", str(out)]) == 0
    said = capsys.readouterr().err.splitlines()  # the cut and the transcript, as the window's notes say them
    assert said[0] == f"attnviz: note: {long.name}: 31.00 s cut to the first 2 s (--max-seconds 2)"
    assert len(said) == 2 and said[1].startswith("attnviz: note: CTC transcript (greedy): ")
    assert np.load(out)["attn_001"].shape == (1, 4, 99, 99)  # (2 s - 25 ms) / 20 ms + 1
    wave, notes = load_audio(long, audio_spec({"feature_extractor_type": "Wav2Vec2FeatureExtractor"}), 31.0)
    assert len(wave) == 31 * RATE and notes == []


def test_a_folder_without_config_json_numbers_frames_it_cannot_time(optimum_export, tmp_path):
    """HuBERT's own conv stack (5 ms frames) without its config.json: wav2vec2's default stack (20 ms) would
    mislabel the frames, so they are numbered and a note says why and what to add."""
    import shutil

    root = optimum_export("hubert")
    for name in ("model.onnx", "preprocessor_config.json"):
        shutil.copy(root / "onnx" / name, tmp_path / name)
    sf.write(tmp_path / "clip.wav", chirp(0.5), RATE)
    r = open_model(tmp_path, provider="cpu").analyze(audio=str(tmp_path / "clip.wav"))
    assert r.maps[0].shape[-1] == (8000 - 105) // 80 + 1 and r.blocks()[0].query_axis.labels[:2] == ["0", "1"]
    assert any("numbered, not timed; put the model's config.json beside it" in n for n in r.info["notes"])


def test_a_clip_over_the_memory_cap_is_refused_naming_the_max_seconds_that_runs(optimum_export, tmp_path):
    """A 60 s clip on the wav2vec2 folder under a 0.2 GB cap (two 4-head maps of 2999 frames: 0.29 GB): the refusal
    names ``--max-seconds S`` (it said "shorten the input"), and the same command with that S runs in a fresh
    process under the same cap (its arena enforces it), keeping the first S seconds; its maps alone take most of
    the cap (the S is not a needlessly short one)."""
    from cli_run import run_cli

    folder = optimum_export("wav2vec2") / "onnx"
    long = tmp_path / "minute.wav"
    sf.write(long, np.tile(chirp(1.0), 60), RATE)
    out = tmp_path / "maps.npz"
    args = ("extract", folder, "--audio", long, "--max-memory", "0.2", "--out", out)
    code, err = run_cli(*args, "--max-seconds", "60")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "over the memory cap of 0.2 GB" in lines[0], err
    assert "shorten the input" not in lines[0]
    said = lines[0].split("cut the clip with --max-seconds ")[1].split(",")[0]
    seconds = float(said)
    n = (int(round(seconds * RATE)) - 400) // 320 + 1
    assert 0.85 * 0.8 * 200e6 < 2 * 4 * n * n * 4 < 200e6  # the maps alone: under the cap, not far under
    code, err = run_cli(*args, "--max-seconds", said)
    assert code == 0, err
    assert np.load(out)["attn_000"].shape == (1, 4, n, n)
    assert f"minute.wav: 60.00 s cut to the first {said} s (--max-seconds {said})" in err
