"""Whisper export folders (optimum ``automatic-speech-recognition-with-past``) as one speech model.

A random-init tiny Whisper (tests/optimum_env.py: 2 + 2 layers, d_model 32, 4 heads, 80 mel bins, a 5 s window)
is exported with optimum-onnx in the second venv.  The references are transformers' own: its
``WhisperFeatureExtractor`` for the features, ``WhisperForConditionalGeneration`` (eager) ``output_attentions``
on the same saved weights and features for the maps, and its Whisper ``generate`` (greedy, forced prompt) for
the tokens.
"""

import json
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
sf = pytest.importorskip("soundfile")

from cli_run import refuse_unusable_clips, refused_in_one_line  # noqa: E402

from attnviz import AttnvizError  # noqa: E402
from attnviz.cli import main  # noqa: E402
from attnviz.runtime import ModelSet, open_model  # noqa: E402
from attnviz.runtime.audio import FeatureSpec, log_mel  # noqa: E402
from attnviz.runtime.protocol import AttnModel  # noqa: E402

TOL = 5e-4
RATE = 16000
pytestmark = pytest.mark.slow
LABELS = [("encoder", "self", 0), ("encoder", "self", 1)] + [
    x for i in range(2) for x in (("decoder", "self", i), ("decoder", "cross", i))
]
PROMPT = ["<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>"]  # the folder's forced ids


def chirp(seconds=2.5, f0=100.0, f1=4000.0):
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.5 * np.sin(2 * np.pi * (f0 * t + (f1 - f0) / (2 * seconds) * t**2))).astype(np.float32)


def noise_burst(seconds=1.7):
    x = np.random.default_rng(0).normal(0, 0.1, int(seconds * RATE)).astype(np.float32)
    x[: RATE // 4] = 0  # silence, then the burst
    return x


@pytest.fixture(scope="module")
def whisper(optimum_export):
    root = optimum_export("whisper")
    hf = transformers.WhisperForConditionalGeneration.from_pretrained(root / "hf", attn_implementation="eager").eval()
    fe = transformers.WhisperFeatureExtractor.from_pretrained(root / "hf")
    tok = transformers.PreTrainedTokenizerFast.from_pretrained(root / "hf")
    return root, hf, fe, tok


def _reference(hf, fe, clips, dec_ids):
    feats = fe(clips, sampling_rate=RATE, return_tensors="pt").input_features
    with torch.no_grad():
        o = hf(input_features=feats, decoder_input_ids=torch.tensor(dec_ids), output_attentions=True)
    refs = list(o.encoder_attentions)
    for s, c in zip(o.decoder_attentions, o.cross_attentions):
        refs += [s, c]
    return feats.numpy(), [r.numpy() for r in refs]


def _check(result, refs):
    assert [(s.stack, s.kind, s.layer) for s in result.sites] == LABELS
    for got, want, s in zip(result.maps, refs, result.sites):
        a = got.array()
        assert a.shape == want.shape, (s, a.shape, want.shape)
        np.testing.assert_allclose(a, want, atol=TOL, err_msg=str(s))


def test_folder_is_one_speech_model_on_a_batch_of_two_clips(whisper):
    """A chirp and a noise burst, teacher-forced on one typed transcript: every map (encoder self, decoder self,
    decoder cross) equals transformers' on its own feature extractor's features."""
    root, hf, fe, tok = whisper
    m = open_model(root / "onnx", provider="cpu")
    assert isinstance(m, ModelSet) and isinstance(m, AttnModel) and m.kind == "encoder-decoder"
    assert [i.name for i in m.inputs] == ["input_features", "decoder_input_ids", "decoder_attention_mask"]
    assert m.roles["input_features"] == "audio"
    clips = [chirp(), noise_burst()]
    r = m.analyze(audio=clips, text_pair="w3 w17 w5")
    dec = tok.convert_tokens_to_ids(PROMPT) + tok("w3 w17 w5", add_special_tokens=False).input_ids
    _, refs = _reference(hf, fe, clips, [dec, dec])
    _check(r, refs)
    assert r.batch_size == 2 and r.info["audio"] == ["samples", "samples"]
    cross = r.blocks(0)[[b.name for b in r.blocks(0)].index("decoder cross-attention")]
    # the keys are the encoder's frames, 20 ms apart after the conv stride (2 hops of 10 ms)
    assert cross.key_axis.labels[:3] == ["0.00 s", "0.02 s", "0.04 s"] and len(cross.key_axis.labels) == 250
    assert cross.key_axis.labels[-1] == "4.98 s" and not any(cross.key_axis.special)
    assert cross.query_axis.labels == [*PROMPT, "w3", "w17", "w5"]
    assert cross.query_axis.special == [True] * 4 + [False] * 3


def test_features_given_raw_run_as_given(whisper, tmp_path):
    """--inputs FEEDS.npz keyed by transformers' input names: the maps equal, the frames still carry times."""
    root, hf, fe, _ = whisper
    clips = [noise_burst(), chirp(1.2)]
    dec = [[61, 62, 65, 66, 7, 9], [61, 62, 65, 66, 30, 2]]
    feats, refs = _reference(hf, fe, clips, dec)
    npz = tmp_path / "feeds.npz"
    np.savez(npz, input_features=feats, decoder_input_ids=np.array(dec))
    r = open_model(root / "onnx", provider="cpu").analyze(feeds=str(npz))
    _check(r, refs)
    assert r.key_tokens.labels[1] == "<|en|>" and r.row_axes(0)[0].labels[-1] == "4.98 s"


def test_generation_through_the_cache_equals_transformers_greedy(whisper):
    root, hf, fe, _ = whisper
    m = open_model(root / "onnx", provider="cpu")
    for clip in (chirp(), noise_burst()):
        r = m.analyze(audio=clip, generate=12)
        assert r.info["generation"] == "kv-cache"
        feats = fe(clip, sampling_rate=RATE, return_tensors="pt").input_features
        with torch.no_grad():
            out = hf.generate(feats, language="en", task="transcribe", max_new_tokens=12, do_sample=False, num_beams=1)
        want = [int(t) for t in out[0]]
        prompt = [61, 62, 65, 66]
        want = want[len(prompt) :] if want[: len(prompt)] == prompt else want  # with or without the prompt
        got = r.info["generated_ids"]
        assert len(set(got)) > 2 and got == want[: len(got)], (got, want)
        assert r.key_tokens.labels[:4] == PROMPT
        full = m.analyze(audio=clip, generate=12, use_cache=False)  # the cache changes nothing
        assert full.info["generated_ids"] == got
        for a, b, s in zip(r.maps, full.maps, r.sites):  # one step at a time vs the whole sequence: float noise
            np.testing.assert_allclose(a.array(), b.array(), atol=1e-4, err_msg=str(s))
        # the generated sequence re-run teacher-forced in transformers: the cached steps' maps are its maps.  On
        # the features attnviz computed: twelve steps on wide random weights carry the feature extractor's own
        # float32 noise (1e-4, tested in test_audio.py) past 5e-4 by the last layer
        with torch.no_grad():
            o = hf(
                input_features=torch.tensor(log_mel([clip], FeatureSpec.from_dict(fe.to_dict()))),
                decoder_input_ids=torch.tensor([prompt + got[:-1]]),
                output_attentions=True,
            )
        refs = list(o.encoder_attentions) + [x for p in zip(o.decoder_attentions, o.cross_attentions) for x in p]
        _check(r, [x.numpy() for x in refs])


def test_suppressed_tokens_are_never_chosen_as_in_transformers(whisper, tmp_path):
    """generation_config.json's suppress_tokens (every step) and begin_suppress_tokens (the first generated token),
    as the Hub's Whisper configs carry them: the tokens equal transformers' generate under the same config, with
    the cache and with the full re-run."""
    root, hf, fe, _ = whisper
    clip = chirp()
    plain = open_model(root / "onnx", provider="cpu").analyze(audio=clip, generate=12).info["generated_ids"]
    common = max(set(plain), key=plain.count)  # the word it says most, and the first one it says
    suppress, begin = [common], [plain[0]] if plain[0] != common else [60]
    for f in (root / "onnx").iterdir():
        shutil.copy(f, tmp_path / f.name)
    gen = json.loads((tmp_path / "generation_config.json").read_text())
    gen.update(suppress_tokens=suppress, begin_suppress_tokens=begin)
    (tmp_path / "generation_config.json").write_text(json.dumps(gen))
    m = open_model(tmp_path, provider="cpu")
    cached = m.analyze(audio=clip, generate=12)
    full = m.analyze(audio=clip, generate=12, use_cache=False)
    feats = fe(clip, sampling_rate=RATE, return_tensors="pt").input_features
    config = transformers.GenerationConfig.from_pretrained(tmp_path)
    with torch.no_grad():
        out = hf.generate(feats, generation_config=config, max_new_tokens=12, do_sample=False, num_beams=1)
    want = [int(t) for t in out[0]]
    want = want[4:] if want[:4] == [61, 62, 65, 66] else want
    got = cached.info["generated_ids"]
    assert got != plain[: len(got)] and common not in got and got[0] not in begin
    assert got == want[: len(got)] and full.info["generated_ids"] == got


def test_generation_fills_the_decoder_positions_and_no_more(whisper):
    """64 positions: the 4 forced tokens and 61 new ones (the last never fed back) run; 62 are refused in one
    line before anything runs, where onnxruntime would stop inside the position table."""
    root, _, _, _ = whisper
    m = open_model(root / "onnx", provider="cpu")
    m.meta["special"] = {k: v for k, v in m.meta["special"].items() if k != "eos"}  # exactly N tokens
    r = m.analyze(audio=chirp(), generate=61)
    assert len(r.info["generated_ids"]) == 61 and r.maps[-1].shape[2] == 64
    with pytest.raises(AttnvizError, match="holds 64 positions.*give --generate 61 or fewer"):
        m.analyze(audio=chirp(), generate=62)


def test_the_encoder_file_alone_hears_audio(whisper):
    """encoder_model.onnx opened alone: the folder's preprocessor_config.json makes its features, its frames are
    labelled by time, its maps are transformers' encoder attentions."""
    root, hf, fe, _ = whisper
    enc = open_model(root / "onnx" / "encoder_model.onnx", provider="cpu")
    assert enc.roles["input_features"] == "audio" and enc.meta["audio"]["chunk_length"] == 5
    clips = [chirp(), noise_burst()]
    r = enc.analyze(audio=clips)
    _, refs = _reference(hf, fe, clips, [[61], [61]])
    for got, want in zip(r.maps, refs[:2]):
        np.testing.assert_allclose(got.array(), want, atol=TOL)
    assert r.tokens.labels[:2] == ["0.00 s", "0.02 s"] and len(r.tokens.labels) == 250


def test_another_feature_extractor_is_not_taken_for_whisper(whisper, tmp_path):
    """A preprocessor_config.json of another kind (Speech2Text's Kaldi filter banks): the encoder file still opens
    and runs on raw features; --audio is refused in one line, the folder too (nothing computes those features)."""
    root, hf, fe, _ = whisper
    for f in (root / "onnx").iterdir():
        shutil.copy(f, tmp_path / f.name)
    pre = json.loads((tmp_path / "preprocessor_config.json").read_text())
    pre["feature_extractor_type"] = "Speech2TextFeatureExtractor"
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(pre))
    enc = open_model(tmp_path / "encoder_model.onnx", provider="cpu")
    clips = [chirp()]
    feats, refs = _reference(hf, fe, clips, [[61]])
    np.testing.assert_allclose(enc.analyze(feeds={"input_features": feats}).maps[1].array(), refs[1], atol=TOL)
    with pytest.raises(AttnvizError, match="no Whisper or wav2vec2 preprocessor_config.json.*--inputs FEEDS.npz"):
        enc.analyze(audio=clips)
    with pytest.raises(AttnvizError, match="Speech2TextFeatureExtractor features are not computed here"):
        open_model(tmp_path, provider="cpu")


def test_an_open_language_is_detected_as_transformers_detects_it(whisper, tmp_path):
    """A multilingual checkpoint's forced ids leave the language open ([1, null]): one decoder step on the start
    token picks it, as transformers' detect_language does."""
    root, hf, fe, _ = whisper
    for f in (root / "onnx").iterdir():
        shutil.copy(f, tmp_path / f.name)
    gen = json.loads((tmp_path / "generation_config.json").read_text())
    gen["forced_decoder_ids"] = [[1, None], [2, 65]]
    (tmp_path / "generation_config.json").write_text(json.dumps(gen))
    m = open_model(tmp_path, provider="cpu")
    clips = [chirp(), noise_burst()]
    r = m.analyze(audio=clips)
    feats = fe(clips, sampling_rate=RATE, return_tensors="pt").input_features
    with torch.no_grad():
        langs = [int(x) for x in hf.detect_language(input_features=feats)]
    names = {62: "<|en|>", 63: "<|de|>"}
    for b, lang in enumerate(langs):
        assert r.row_axes(b)[1].labels == ["<|startoftranscript|>", names[lang], "<|transcribe|>", "<|notimestamps|>"]
    assert any("language detected from the audio" in n for n in r.info["notes"])


def test_cli_extract_inspect_and_bad_audio(whisper, tmp_path, capsys):
    root, hf, fe, tok = whisper
    folder = root / "onnx"
    assert main(["inspect", str(folder), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kind"] == "encoder-decoder" and [(s["stack"], s["kind"], s["layer"]) for s in d["sites"]] == LABELS
    assert d["probed"] and [s["heads"] for s in d["sites"]] == [4] * 6  # a dummy of silence at the window's size
    assert d["audio"] == {
        "sampling_rate": 16000,
        "seconds": 5.0,
        "mel_bins": 80,
        "frames": 500,
        "frame_seconds": 0.02,
        "decoder_prompt": PROMPT,
    }
    assert main(["inspect", str(folder)]) == 0
    assert "audio    16000 Hz, a 5 s window: 80 mel bins x 500 frames" in capsys.readouterr().out
    wav = tmp_path / "chirp.wav"
    sf.write(wav, chirp(), RATE, subtype="FLOAT")
    out = tmp_path / "maps.npz"
    assert main(["extract", str(folder), "--audio", str(wav), "--text-pair", "w8 w2", "--out", str(out)]) == 0
    dec = tok.convert_tokens_to_ids(PROMPT) + [8, 2]
    _, refs = _reference(hf, fe, [chirp()], [dec])
    z = np.load(out)
    for i, want in enumerate(refs):
        np.testing.assert_allclose(z[f"attn_{i:03d}"], want, atol=TOL)

    # a figure of the cross-attention over the sound; its recipe names the audio file (and its hash)
    fig = tmp_path / "cross.png"
    args = ["figure", str(folder), "--audio", str(wav), "--text-pair", "w8 w2", "--view", "heatmap"]
    assert (
        main([*args, "--block", "decoder cross", "--layer", "1", "--head", "2", "--out", str(fig), "--dpi", "60"]) == 0
    )
    recipe = json.loads((tmp_path / "cross.png.recipe.json").read_text())
    assert recipe["inputs"]["audio"]["path"] == "chirp.wav" and recipe["inputs"]["text_pair"] == "w8 w2"
    assert len(recipe["inputs"]["audio"]["sha256"]) == 64 and fig.stat().st_size > 0

    # compare the folder with itself on the clip: every head the same (0 bits), the audio file recorded
    assert main(["compare", str(folder), str(folder), "--audio", str(wav), "--out", str(tmp_path / "cmp")]) == 0
    pq = pytest.importorskip("pyarrow.parquet")
    heads = pq.read_table(tmp_path / "cmp" / "heads.parquet").to_pydict()
    assert len(heads["js_divergence"]) == 24 and max(heads["js_divergence"]) == 0
    assert json.loads((tmp_path / "cmp" / "run.json").read_text())["input"]["audio"] == str(wav)

    def refused(args, *words):
        refused_in_one_line(capsys, args, *words, unwritten=out)

    out.unlink()
    long = tmp_path / "long.wav"  # the model hears 5 s (its preprocessor_config.json's chunk_length)
    sf.write(long, np.tile(chirp(1.0), 6), RATE)
    refused(["extract", str(folder), "--audio", str(long), "--out", str(out)], "6.00 s", "--max-seconds 5")
    refuse_unusable_clips(refused, folder, out, tmp_path)
    # 64 decoder positions (config.json max_target_positions): the 4 forced tokens and 61 new ones fit, 62 do not
    refused(["extract", str(folder), "--audio", str(wav), "--generate", "62", "--out", str(out)], "--generate 61")
    # --max-seconds keeps the first 5 s: the maps are transformers' on the cut clip (as the 16-bit file holds it)
    capsys.readouterr()
    # (--generate 0: the forced prompt's rows alone; no steps given, extract generates as the window does: gen30)
    cut = ["--max-seconds", "5", "--generate", "0"]
    assert main(["extract", str(folder), "--audio", str(long), *cut, "--out", str(out)]) == 0
    assert f"attnviz: note: {long.name}: 6.00 s cut to the first 5 s (--max-seconds 5)" in capsys.readouterr().err
    held, _ = sf.read(long, dtype="float32")
    _, refs = _reference(hf, fe, [held[: 5 * RATE]], [dec[:4]])
    np.testing.assert_allclose(np.load(out)["attn_003"], refs[3], atol=TOL)
