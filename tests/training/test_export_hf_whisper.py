"""``attnviz export-hf`` on a Whisper folder: the optimum layout (encoder_model.onnx + decoder_model.onnx) that opens
as one speech model, its maps and greedy tokens equal transformers' eager model on the same weights.

The source is the tiny random-init Whisper the optimum tests build (tests/optimum_env.py, cached per machine); the
references are transformers' own ``WhisperFeatureExtractor``, ``output_attentions`` and ``generate``.
"""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
sf = pytest.importorskip("soundfile")

from attnviz.cli import main  # noqa: E402
from attnviz.runtime import ModelSet, open_model  # noqa: E402
from attnviz.training.hf_onnx import _c_stdout_silenced  # noqa: E402

pytestmark = pytest.mark.slow
RATE = 16000
TOL = 5e-4
PROMPT = [61, 62, 65, 66]  # <|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|> (generation_config.json)


def chirp(seconds=2.5, f0=100.0, f1=4000.0):
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.5 * np.sin(2 * np.pi * (f0 * t + (f1 - f0) / (2 * seconds) * t**2))).astype(np.float32)


def noise_burst(seconds=1.7):
    x = np.random.default_rng(0).normal(0, 0.1, int(seconds * RATE)).astype(np.float32)
    x[: RATE // 4] = 0
    return x


@pytest.fixture(scope="module")
def exported(optimum_export, tmp_path_factory):
    src = optimum_export("whisper") / "hf"
    out = tmp_path_factory.mktemp("whisper-export") / "tiny-whisper"
    assert main(["export-hf", str(src), "--out", str(out)]) == 0
    hf = transformers.WhisperForConditionalGeneration.from_pretrained(src, attn_implementation="eager").eval()
    fe = transformers.WhisperFeatureExtractor.from_pretrained(src)
    return src, out, hf, fe


def test_the_export_is_the_optimum_layout_and_one_speech_model(exported):
    src, out, _, _ = exported
    names = sorted(p.name for p in out.iterdir())
    assert {"encoder_model.onnx", "decoder_model.onnx", "preprocessor_config.json", "generation_config.json"} <= set(
        names
    ) and "model.onnx" not in names
    m = open_model(out, provider="cpu")
    assert isinstance(m, ModelSet) and m.roles["input_features"] == "audio"
    import onnx

    for name in ("encoder_model.onnx", "decoder_model.onnx"):  # each file says where it came from
        f = onnx.load(out / name, load_external_data=False)
        props = {p.key: p.value for p in f.metadata_props}
        assert f.producer_name == "attnviz export-hf" and '"family": "speech"' in props["attnviz.config"]
    # the source folder is untouched: no file written into it
    assert not any(p.suffix == ".onnx" for p in src.iterdir())


def test_every_map_equals_transformers_on_two_clips(exported):
    """A chirp and a noise burst in one batch, teacher-forced on a typed transcript: encoder self, decoder self and
    decoder cross maps equal transformers' eager attentions on its own feature extractor's features."""
    _, out, hf, fe = exported
    m = open_model(out, provider="cpu")
    clips = [chirp(), noise_burst()]
    r = m.analyze(audio=clips, text_pair="w3 w17 w5")
    dec = PROMPT + [3, 17, 5]
    feats = fe(clips, sampling_rate=RATE, return_tensors="pt").input_features
    with torch.no_grad():
        o = hf(input_features=feats, decoder_input_ids=torch.tensor([dec, dec]), output_attentions=True)
    refs = list(o.encoder_attentions) + [x for p in zip(o.decoder_attentions, o.cross_attentions) for x in p]
    assert [(s.stack, s.kind) for s in r.sites] == [("encoder", "self")] * 2 + [
        ("decoder", "self"),
        ("decoder", "cross"),
    ] * 2
    for got, want, s in zip(r.maps, refs, r.sites):
        np.testing.assert_allclose(got.array(), want.numpy(), atol=TOL, err_msg=str(s))


def test_greedy_tokens_equal_transformers(exported):
    _, out, hf, fe = exported
    m = open_model(out, provider="cpu")
    for clip in (chirp(), noise_burst()):
        got = m.analyze(audio=clip, generate=10).info["generated_ids"]
        feats = fe(clip, sampling_rate=RATE, return_tensors="pt").input_features
        with torch.no_grad():
            want = [int(t) for t in hf.generate(feats, max_new_tokens=10, do_sample=False, num_beams=1)[0]]
        want = want[len(PROMPT) :] if want[: len(PROMPT)] == PROMPT else want
        assert len(set(got)) > 1 and got == want[: len(got)], (got, want)


def test_cli_extract_on_the_export(exported, tmp_path):
    _, out, _, _ = exported
    wav = tmp_path / "chirp.wav"
    sf.write(wav, chirp(), RATE, subtype="FLOAT")
    maps = tmp_path / "maps.npz"
    assert main(["extract", str(out), "--audio", str(wav), "--text-pair", "w8 w2", "--out", str(maps)]) == 0
    assert len(np.load(maps).files) > 6
    assert main(["inspect", str(out), "--json"]) == 0


def test_a_speech_folder_without_its_feature_extractor_is_one_line(optimum_export, tmp_path, capsys):
    src = optimum_export("whisper") / "hf"
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in src.iterdir():
        if f.name != "preprocessor_config.json":
            (bare / f.name).write_bytes(f.read_bytes())
    capsys.readouterr()
    assert main(["export-hf", str(bare), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "preprocessor_config.json" in err[0] and not (tmp_path / "x").exists()


def test_the_exporters_graph_dump_is_kept_off_stdout(capfd):
    """torch's C++ exporter writes the whole graph to fd 1 when an operator fails; export-hf says it in one line."""
    print("before", flush=True)
    with _c_stdout_silenced():
        os.write(1, b"Torch IR graph at exception: graph(...)\n")
    print("after", flush=True)
    assert capfd.readouterr().out.splitlines() == ["before", "after"]
