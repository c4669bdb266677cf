"""`attnviz ablate` and a speech model: `--audio` on a speech model in one ONNX file (the Whisper demo's
encoder_model.onnx) runs on the clip as `--inputs` runs on the features transformers' WhisperFeatureExtractor makes
of it; the demo's export folder (encoder + decoder) is refused in one line naming what ablate runs and the command
to use instead (argparse's "unrecognized arguments: --audio" said neither).  `compare` takes --audio and the folder
(checked here too)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

sf = pytest.importorskip("soundfile")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("onnxruntime")

from attnviz.cli import main  # noqa: E402

DEMO = Path(__file__).resolve().parents[2] / "models" / "spoken-digits"
WAV = DEMO / "sample.wav"


@pytest.fixture(autouse=True)
def demo():
    if not (DEMO / "encoder_model.onnx").is_file():
        pytest.skip("models/spoken-digits is not in this checkout")


def test_the_speech_folder_is_refused_in_one_line_naming_its_encoder(tmp_path, capsys):
    for given in (["--audio", str(WAV)], []):
        rc = main(["ablate", str(DEMO), *given, "--all-heads", "--out", str(tmp_path / "a")])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1, err
        line = err[0]
        assert line.startswith("attnviz: error: ") and "ablate runs one ONNX file" in line
        assert f"attnviz ablate {DEMO / 'encoder_model.onnx'} --audio {WAV}" in line  # what to run instead
        assert "unrecognized" not in line and "Traceback" not in line
    assert not (tmp_path / "a").exists()


def test_audio_on_the_encoder_file_is_the_feature_extractors_features(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    wave, rate = sf.read(str(WAV), dtype="float32")
    fx = transformers.WhisperFeatureExtractor.from_pretrained(str(DEMO))
    feats = fx(wave, sampling_rate=rate, return_tensors="np").input_features.astype(np.float32)
    np.savez(tmp_path / "feeds.npz", input_features=feats)
    enc = DEMO / "encoder_model.onnx"
    heads = ["--heads", "encoder self 0:1,encoder self 1:2"]
    assert main(["ablate", str(enc), "--audio", str(WAV), *heads, "--out", str(tmp_path / "audio")]) == 0
    assert (
        main(["ablate", str(enc), "--inputs", str(tmp_path / "feeds.npz"), *heads, "--out", str(tmp_path / "npz")]) == 0
    )
    capsys.readouterr()
    a, b = (pq.read_table(tmp_path / d / "heads.parquet").to_pylist() for d in ("audio", "npz"))
    assert [(r["layer"], r["head"]) for r in a] == [(0, 1), (1, 2)]
    assert a[0]["ablation_max_dlogit"] > 0  # switching the heads off moved the encoder's states
    for x, y in zip(a, b):
        assert x["ablation_max_dlogit"] == pytest.approx(y["ablation_max_dlogit"], rel=1e-3, abs=1e-4)


def test_audio_is_for_one_input_not_a_corpus(tmp_path, capsys):
    texts = tmp_path / "t.txt"
    texts.write_text("one\n")
    rc = main(["ablate", str(DEMO / "encoder_model.onnx"), "--audio", str(WAV), "--texts", str(texts), "--all-heads",
               "--out", str(tmp_path / "a")])  # fmt: skip
    assert rc == 2 and "--audio: for one input; over a corpus (--texts) drop it" in capsys.readouterr().err


def test_compare_takes_the_speech_folder_and_audio(tmp_path, capsys):
    rc = main(["compare", str(DEMO), str(DEMO), "--audio", str(WAV), "--out", str(tmp_path / "c")])
    assert rc == 0 and (tmp_path / "c" / "heads.parquet").is_file()
    assert "no head changed" in capsys.readouterr().out
