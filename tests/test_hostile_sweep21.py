"""Session 21's hostile-input sweep (bench/hostile_sweep.py): what it found still wrong, each as one line naming
the file and the fix, exit code 2, the inputs unchanged.

* A long recording was read whole before its length was checked: an 8-hour, four-channel WAV (3.7 GB of 16-bit
  samples, 7.4 GB as floats) was "larger than this machine's free memory" even with ``--max-seconds 5``.  The
  length now comes from the header and only the kept seconds are read.
* ``figure --image`` / ``--audio`` naming a FIFO or a folder said "no such file" (the user looked for a typo in a
  name that is there); it now says what the path is, as extract does.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_run import bounded, run_cli, run_cli_forked

ROOT = Path(__file__).resolve().parents[1]
VIT = ROOT / "models" / "vit-classification.onnx"
RATE = 16000


def one_line(err: str, *words: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("attnviz: error:") and "Traceback" not in err, err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def sha(*paths: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def long_wav(path: Path, hours: float, channels: int) -> Path:
    """A 16-bit WAV of ``hours`` at 16 kHz, a 440 Hz tone in its first second and silence after, written sparse
    (the header and the first second; the rest is a hole the filesystem reads back as zeros)."""
    frames = int(hours * 3600 * RATE)
    block = 2 * channels
    data = frames * block
    assert data < 2**32  # a plain RIFF's size fields
    head = (
        b"RIFF"
        + struct.pack("<I", 36 + data)
        + b"WAVE"
        + b"fmt "
        + struct.pack("<IHHIIHH", 16, 1, channels, RATE, RATE * block, block, 16)
        + b"data"
        + struct.pack("<I", data)
    )
    tone = (0.3 * 32767 * np.sin(2 * np.pi * 440 * np.arange(RATE) / RATE)).astype("<i2")
    with open(path, "wb") as f:
        f.write(head + np.repeat(tone[:, None], channels, axis=1).tobytes())
        f.truncate(len(head) + data)
    return path


@pytest.fixture(scope="module")
def speech(optimum_export) -> Path:
    """The Whisper test export (a 5 s window: chunk_length 5)."""
    return optimum_export("whisper") / "onnx"


def test_an_8_hour_recording_is_cut_or_refused_from_its_header(speech, tmp_path):
    clip = long_wav(tmp_path / "night.wav", hours=8, channels=4)
    assert os.path.getsize(clip) > 3.6e9
    out = tmp_path / "maps.npz"
    # 3 GB of address space: the old code's float samples alone were 7.4 GB
    code, err = run_cli("extract", speech, "--audio", clip, "--out", out, memory_gb=3.0)
    assert code == 2
    one_line(err, "night.wav: 28800.00 s long", "give --max-seconds 5")
    assert not out.exists()
    code, err = run_cli("extract", speech, "--audio", clip, "--max-seconds", "5", "--out", out, memory_gb=3.0)
    assert code == 0, err
    with np.load(out) as z:
        info = json.loads(str(z["info"]))
        wave = z["audio_waves"][0]
    assert info["notes"] == [
        "night.wav: 28800.00 s cut to the first 5 s (--max-seconds 5)",
        "night.wav: 4 channels mixed down to mono",
    ]
    tone = (0.3 * 32767 * np.sin(2 * np.pi * 440 * np.arange(RATE) / RATE)).astype("<i2") / 32768
    np.testing.assert_allclose(wave, np.r_[tone, np.zeros(4 * RATE)], atol=1e-6)  # the file's first 5 s, as written


def test_the_cut_reads_the_same_samples_as_a_short_file(tmp_path):
    """Reading only the kept frames gives exactly the samples a whole read then a cut gave (a mixed-down tone)."""
    import soundfile as sf

    from attnviz.runtime.audio import FeatureSpec, load_audio

    rng = np.random.default_rng(0)
    stereo = (rng.standard_normal((RATE * 9, 2)) * 0.1).astype(np.float32)
    sf.write(tmp_path / "nine.wav", stereo, RATE, subtype="FLOAT")
    wave, notes = load_audio(tmp_path / "nine.wav", FeatureSpec(), max_seconds=2.5)
    np.testing.assert_array_equal(wave, stereo[: int(2.5 * RATE)].mean(axis=1))
    assert sorted(notes) == [
        "nine.wav: 2 channels mixed down to mono",
        "nine.wav: 9.00 s cut to the first 2.5 s (--max-seconds 2.5)",
    ]


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_figure_names_a_source_that_is_no_file_as_what_it_is(tmp_path, kind):
    model = tmp_path / "vit.onnx"
    shutil.copy(VIT, model)
    before = sha(model)
    given = tmp_path / "photo.png"
    os.mkfifo(given) if kind == "fifo" else given.mkdir()
    out = tmp_path / "fig.png"
    code, err = run_cli("figure", model, "--image", given, "--view", "image", "--out", out)
    assert code == 2
    why = "not a regular file (a pipe, socket or device); give a regular file" if kind == "fifo" else "is a folder"
    line = one_line(err, f"image {given}: {why}")
    assert "no such file" not in line
    assert sha(model) == before and not out.exists()


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_corpus_of_texts_that_is_no_file_is_refused_at_once(tmp_path, kind):
    """The early worker start counted the --texts lines with a plain open(): a FIFO waited for a writer for ever,
    and /dev/zero is one endless line.  Both are refused in one line naming what they are."""
    model = tmp_path / "model.onnx"
    shutil.copy(ROOT / "models" / "sequence-classification.onnx", model)
    before = sha(model)
    texts = tmp_path / "texts.txt"
    if kind == "fifo":
        os.mkfifo(texts)
    else:
        texts = Path("/dev/zero")
    out = tmp_path / "results"
    code, err = run_cli(
        "corpus", model, "--texts", texts, "--out", out, "--no-progress", bound_s=60, memory_gb=3.0
    )  # (a regression reading /dev/zero stops at 3 GB)
    assert code == 2
    one_line(err, f"--texts {texts}: not a regular file (a pipe, socket or device); give a regular file")
    assert sha(model) == before and not out.exists()


CONFIG_NAMES = ("config.json", "generation_config.json")
CONFIG_TEXTS = ("[1, 2]", '"bert"', "7")


@pytest.fixture(scope="module")
def configs_no_object(tmp_path_factory) -> dict:
    """(name, text) -> (the model, the file's path, their digests before, inspect's and extract's results): both
    commands run on each folder in turn, each in a process of its own (forked from one interpreter: run_cli_forked)."""
    from onnx_builders import tiny_text_model

    root = tmp_path_factory.mktemp("config-no-object")
    built, cases = {}, []
    for i, (name, text) in enumerate((n, t) for n in CONFIG_NAMES for t in CONFIG_TEXTS):
        folder = root / str(i)
        folder.mkdir()
        model = tiny_text_model(folder / "model.onnx", metadata=False)
        (folder / "config.json").write_text("{}")  # (the folder's config files are read where config.json is)
        (folder / name).write_text(text)
        np.savez(folder / "feeds.npz", input_ids=np.array([[1, 3, 4, 5, 2]], np.int64))
        built[name, text] = (folder, model, sha(model, folder / name))
        cases += [
            (["inspect", model], Path.cwd()),
            (["extract", model, "--inputs", folder / "feeds.npz", "--out", folder / "maps.npz"], Path.cwd()),
        ]
    results = run_cli_forked(*cases)
    return {key: (*b, results[2 * i], results[2 * i + 1]) for i, (key, b) in enumerate(built.items())}


@pytest.mark.parametrize("name", CONFIG_NAMES)
@pytest.mark.parametrize("text", CONFIG_TEXTS)
def test_a_config_file_of_valid_json_that_is_no_object_is_passed_over(configs_no_object, name, text):
    """config.json (or generation_config.json) holding a list, a string or a number was read for special token ids
    as if it were an object: an internal error (AttributeError) in every command that opens the model.  It is
    passed over as an unreadable one is; the model opens and runs as without the file."""
    folder, model, before, inspected, extracted = configs_no_object[name, text]
    code, err = bounded(inspected)
    assert code == 0, err
    code, err = bounded(extracted)
    assert code == 0, err
    with np.load(folder / "maps.npz") as z:
        assert z["attn_000"].shape == (1, 2, 5, 5)
    assert sha(model, folder / name) == before


def _speech_copy(speech: Path, dst: Path) -> Path:
    shutil.copytree(speech, dst)
    return dst


def _clip(path: Path) -> Path:
    import soundfile as sf

    t = np.arange(2 * RATE) / RATE
    sf.write(path, (0.3 * np.sin(2 * np.pi * 440 * t) * np.sin(2 * np.pi * 3 * t)).astype(np.float32), RATE)
    return path


def test_a_decoder_start_id_no_input_can_hold_is_passed_over(speech, tmp_path):
    """generation_config.json's decoder_start_token_id of 10**20 reached numpy (OverflowError: an internal error);
    it is passed over as a missing one is, and config.json's start is used: the words equal the plain folder's."""
    clip = _clip(tmp_path / "a.wav")
    good = _speech_copy(speech, tmp_path / "good")
    bad = _speech_copy(speech, tmp_path / "bad")
    gen = json.loads((bad / "generation_config.json").read_text())
    cfg = json.loads((bad / "config.json").read_text())
    assert gen["decoder_start_token_id"] == cfg["decoder_start_token_id"]  # config.json's is the same id
    (bad / "generation_config.json").write_text(json.dumps(gen | {"decoder_start_token_id": 10**20}))
    before = sha(*bad.iterdir(), clip)
    for folder in (good, bad):
        code, err = run_cli("align-audio", folder, "--audio", clip, "--out", tmp_path / f"{folder.name}.tsv")
        assert code == 0, err
    assert (tmp_path / "bad.tsv").read_text() == (tmp_path / "good.tsv").read_text()
    assert sha(*bad.iterdir(), clip) == before


@pytest.mark.parametrize(
    "filters, why",
    [([[1.0], [1.0, 2.0]], "rows of unequal lengths or values that are not numbers"), ([["a"]], "not numbers")],
)
def test_mel_filters_that_are_no_table_of_numbers_are_one_line(speech, tmp_path, filters, why):
    """A ragged or non-numeric mel_filters in preprocessor_config.json was numpy's ValueError (an internal error)."""
    folder = _speech_copy(speech, tmp_path / "model")
    pre = json.loads((folder / "preprocessor_config.json").read_text())
    (folder / "preprocessor_config.json").write_text(json.dumps(pre | {"mel_filters": filters}))
    clip = _clip(tmp_path / "a.wav")
    out = tmp_path / "maps.npz"
    code, err = run_cli("extract", folder, "--audio", clip, "--out", out)
    assert code == 2
    one_line(err, "preprocessor_config.json: mel_filters has", why, "fix the file or remove mel_filters")
    assert not out.exists()


@pytest.mark.parametrize("size", [("0", "0"), ("-3", "5"), ("99999", "224")])
def test_an_image_size_no_image_can_have_is_one_line(tmp_path, size):
    """--image-size 0 0 reached Pillow's resize (ValueError: an internal error); 99999 a side was resized to first
    (99999 x 99999 pixels are 120 GB as floats), refused only by the model's input shape, where it had one."""
    model = tmp_path / "vit.onnx"
    shutil.copy(VIT, model)
    image = tmp_path / "cat.png"
    shutil.copy(ROOT / "resources" / "samples" / "vit-classification.png", image)
    before = sha(model, image)
    out = tmp_path / "maps.npz"
    code, err = run_cli("extract", model, "--image", image, "--image-size", *size, "--out", out)
    assert code == 2
    one_line(err, f"--image-size {' '.join(size)}: give the height and width in pixels, each in 1..16384")
    assert sha(model, image) == before and not out.exists()


def _grey_ramp() -> np.ndarray:
    return (np.arange(12 * 20).reshape(12, 20) % 256).astype(np.uint8)


def _shown(path: Path, h: int, w: int) -> np.ndarray:
    from attnviz.runtime import inputs as ip

    _x, shown = ip.load_image(path, ip.ImageSpec(h, w, 3, [0.0] * 3, [1.0] * 3, "test"))
    return shown


@pytest.mark.parametrize("kind", ["16-bit PNG", "float TIFF in 0..1"])
def test_a_deep_image_is_seen_as_its_8_bit_twin(tmp_path, kind):
    """Pillow's convert("RGB") clips each value at 255: a 16-bit PNG came out almost all white and a float TIFF in
    0..1 black, and the model ran on that without a word.  The same picture at 8 bits is the reference."""
    from PIL import Image

    v8 = _grey_ramp()
    Image.fromarray(v8).save(tmp_path / "eight.png")
    if kind == "16-bit PNG":
        deep = tmp_path / "deep.png"
        Image.fromarray(v8.astype(np.uint16) * 257).save(deep)  # 128 -> 0x8080: 16-bit for the same grey
        assert Image.open(deep).mode.startswith("I")
    else:
        deep = tmp_path / "deep.tif"
        Image.fromarray(v8.astype(np.float32) / 255).save(deep)
        assert Image.open(deep).mode == "F"
    np.testing.assert_array_equal(_shown(deep, 12, 20), _shown(tmp_path / "eight.png", 12, 20))


def test_a_float_image_of_no_agreed_range_is_one_line(tmp_path):
    from PIL import Image

    from attnviz import AttnvizError

    p = tmp_path / "depth.tif"
    Image.fromarray(np.linspace(-5, 900, 40, dtype=np.float32).reshape(4, 10)).save(p)
    with pytest.raises(AttnvizError) as e:
        _shown(p, 4, 10)
    assert str(e.value) == (
        f"image {p}: floating-point pixel values from -5 to 900, no brightness range a viewer agrees on; "
        "save it as an 8- or 16-bit PNG"
    )


def test_an_exif_rotated_photo_is_seen_upright(tmp_path):
    """A phone stores an upright photo sideways with EXIF orientation 6 ("rotate 90° clockwise to show"): the
    model saw it on its side.  The reference is the stored pixels turned by numpy."""
    from PIL import Image

    rng = np.random.default_rng(0)
    stored = rng.integers(0, 255, (12, 20, 3), np.uint8)
    exif = Image.Exif()
    exif[0x0112] = 6
    p = tmp_path / "phone.png"
    Image.fromarray(stored).save(p, exif=exif)
    np.testing.assert_array_equal(_shown(p, 20, 12), np.rot90(stored, k=-1))


def _cli_with_files_up_to(limit: int, argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """``attnviz ARGV`` in a child whose files cannot grow past ``limit`` bytes: a write past it fails as on a full
    disk (Python ignores SIGXFSZ, so the write raises)."""
    import resource

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "attnviz.cli", *argv],
        env=dict(os.environ, PYTHONPATH=str(ROOT), **env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        preexec_fn=small_files,
    )


def test_a_screenshot_onto_a_full_disk_is_one_line(tmp_path):
    """A PNG that cannot be written (a full disk; here the file-size limit, which fails the write the same way) put
    libpng's own "libpng error: Write Error" on the terminal above attnviz's line, which named no reason."""

    model = tmp_path / "model.onnx"
    shutil.copy(ROOT / "models" / "sequence-classification.onnx", model)
    before = sha(model)
    shot = tmp_path / "shot.png"

    argv = ["open", str(model), "--text", "7 2 9", "--screenshot", str(shot)]
    done = _cli_with_files_up_to(20_000, argv, tmp_path, QT_QPA_PLATFORM="offscreen")
    assert done.returncode == 2
    one_line(
        done.stderr,
        f"could not save the screenshot {shot}: cannot write {shot}: File too large; check the folder is writable and "
        "has space",
    )
    assert sha(model) == before and not shot.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]


@pytest.mark.parametrize(
    "data, why",
    [
        ("7 2 9\n1 8 é\n".encode("latin-1"), " line 2: byte 0xE9 (column 5) is not UTF-8; save the file as UTF-8 "),
        ("7 2 9\n1 8 6\n".encode("utf-16"), ": UTF-16 text; save it as UTF-8 (e.g. iconv -f UTF-16 -t UTF-8)"),
    ],
)
def test_align_sentences_that_are_not_utf8_name_the_line_and_the_fix(tmp_path, data, why):
    """align --src said "not UTF-8 text" and no more (no line, no byte, no fix), where corpus --texts says all."""
    model = tmp_path / "translation.onnx"
    shutil.copy(ROOT / "models" / "translation.onnx", model)
    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src.write_bytes(data)
    tgt.write_text("7 2 9\n1 8 6\n")
    before = sha(model, src, tgt)
    out = tmp_path / "align.txt"
    code, err = run_cli("align", model, "--src", src, "--tgt", tgt, "--out", out)
    assert code == 2
    one_line(err, f"--src {src}{why}")
    assert sha(model, src, tgt) == before and not out.exists()


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_sentence(tmp_path):
    """Notepad's mark stuck to the first source word ("\\ufeff7"), a word the tokenizer does not know."""
    from attnviz.core.align import read_lines

    p = tmp_path / "src.txt"
    p.write_bytes(b"\xef\xbb\xbf7 2 9\r\n1 8 6\r\n")
    assert read_lines(p, "--src") == ["7 2 9", "1 8 6"]


# each hostile preprocessor_config.json and the reason its one line must give
HOSTILE_PREPROCESSORS = {
    "list": ([1], "holds list JSON, not an object of settings"),
    "height-of-letters": ({"size": {"height": "abc", "width": 224}}, "size height is 'abc', not pixels in 1..16384"),
    "mean-of-letters": ({"image_mean": "x"}, "image_mean is 'x', not a list of numbers per channel"),
    "std-of-zeros": ({"image_std": [0, 0, 0]}, "image_std [0, 0, 0] holds 0 (every pixel would divide by zero)"),
}


@pytest.fixture(scope="module")
def hostile_preprocessor_exports(optimum_export, tmp_path_factory) -> dict[str, tuple[Path, Path, dict]]:
    """case -> (model folder, --out, the folder's digests before) of a copy of the ViT-GPT2 folder holding that
    case's preprocessor_config.json."""
    root = tmp_path_factory.mktemp("hostile-preprocessors")
    cases = {}
    for name, (pre, _) in HOSTILE_PREPROCESSORS.items():
        folder = root / name / "hf"
        shutil.copytree(optimum_export("vit-gpt2") / "hf", folder)
        (folder / "preprocessor_config.json").write_text(json.dumps(pre))
        cases[name] = (folder, root / name / "export", sha(*folder.iterdir()))
    return cases


@pytest.mark.parametrize("case", list(HOSTILE_PREPROCESSORS))
def test_export_hf_of_a_hostile_preprocessor_config_is_one_line(hostile_preprocessor_exports, case, capfd):
    """``export-hf`` in this process, its stderr read at the descriptor: a fresh interpreter (one for all four, in
    session 22) paid the torch and transformers imports (~4-6 s CPU) again, which the suite's process has made by
    then (runtime/'s exports)."""
    from attnviz.cli import main

    folder, out, before = hostile_preprocessor_exports[case]
    capfd.readouterr()
    code = main(["export-hf", str(folder), "--out", str(out)])
    err = capfd.readouterr().err
    assert code == 2
    one_line(
        err,
        f"preprocessor_config.json: {HOSTILE_PREPROCESSORS[case][1]}; fix {folder / 'preprocessor_config.json'} "
        "(it is what transformers' image processor reads)",
    )
    assert sha(*folder.iterdir()) == before and not out.exists()


@pytest.mark.parametrize("size", ["100000x100000", "0x500"])
def test_open_a_window_size_no_screen_holds_is_one_line(tmp_path, size):
    """--size 100000x100000 printed thousands of Qt lines ("QPainter::begin: Paint device returned engine == 0":
    a 40 GB pixmap) and then "could not write" the screenshot, naming neither the size nor the fix."""
    model = tmp_path / "model.onnx"
    shutil.copy(ROOT / "models" / "sequence-classification.onnx", model)
    shot = tmp_path / "shot.png"
    code, err = run_cli(
        "open", model, "--text", "7 2 9", "--size", size, "--screenshot", shot, env={"QT_QPA_PLATFORM": "offscreen"}
    )
    assert code == 2
    one_line(err, f"--size {size}: give a width and height in 1..16384 pixels, e.g. 1400x900")
    assert not shot.exists()


def test_open_names_an_audio_fifo_as_what_it_is(tmp_path):
    model = tmp_path / "model.onnx"
    shutil.copy(ROOT / "models" / "sequence-classification.onnx", model)
    clip = tmp_path / "clip.wav"
    os.mkfifo(clip)
    code, err = run_cli(
        "open", model, "--audio", clip, "--screenshot", tmp_path / "s.png", env={"QT_QPA_PLATFORM": "offscreen"}
    )
    assert code == 2
    one_line(err, f"--audio {clip}: not a regular file (a pipe, socket or device); give a regular file")


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_eval_of_a_model_that_is_no_file_is_refused_at_once(tmp_path, kind):
    """onnx.load of a FIFO waited for a writer for ever (and /dev/zero never ends): eval reads through the guard."""
    model = tmp_path / "model.onnx"
    if kind == "fifo":
        os.mkfifo(model)
    else:
        model = Path("/dev/zero")
    code, err = run_cli("eval", model, bound_s=60, memory_gb=3.0)  # (a regression reading /dev/zero stops there)
    assert code == 2
    one_line(err, f"model {model}: not a regular file (a pipe, socket or device); give a regular file")


# each case of average_weights in the child below: what it said (its AttnvizError's line), printed as it ends
_AVERAGE = """
import json, sys
from attnviz import AttnvizError
from attnviz.training.average import average_weights
for kind, bad in json.loads(sys.argv[2]):
    try:
        average_weights([sys.argv[1], bad])
        said = "no error"
    except AttnvizError as e:
        said = str(e)
    except Exception as e:  # an internal error: this case's test fails on it, the others still run
        said = f"internal error: {e!r}"
    print(json.dumps([kind, said]), flush=True)
"""
AVERAGE_KINDS = ("folder", "junk", "fifo")  # the FIFO, which hung for ever, last: see averaged_junk


@pytest.fixture(scope="module")
def averaged_junk(tmp_path_factory) -> dict[str, tuple[Path, str | None]]:
    """kind -> (the --weights file that is no checkpoint, what average_weights said of it), the three kinds in ONE
    child under a time bound (each paid its own torch import before): the FIFO case hung for ever and must fail its
    test, not block the suite.  Each case's line is printed as it ends and the FIFO's case runs last, so a hang
    there is killed at the bound and fails the FIFO's test alone (None: nothing said), the lines before it kept."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    root = tmp_path_factory.mktemp("average-junk")
    good = root / "a.safetensors"
    save_file({"model.w": torch.tensor([1.0, 2.0])}, good)
    bads = {}
    for kind in AVERAGE_KINDS:
        bad = root / kind / "b.safetensors"
        bad.parent.mkdir()
        if kind == "fifo":
            os.mkfifo(bad)
        elif kind == "folder":
            bad.mkdir()
        else:
            bad.write_bytes(bytes(range(100)))
        bads[kind] = bad
    argv = [sys.executable, "-c", _AVERAGE, str(good), json.dumps([[k, str(b)] for k, b in bads.items()])]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:  # 120 s for the three: most of it the torch import, which a loaded 2-core machine takes ~60 s for
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        said = out.stdout
    except subprocess.TimeoutExpired as e:  # the lines printed before the hang
        said = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    lines = dict(json.loads(line) for line in said.splitlines() if line.startswith("["))
    return {kind: (bad, lines.get(kind)) for kind, bad in bads.items()}


@pytest.mark.parametrize("kind", ["fifo", "folder", "junk"])
def test_average_weights_that_are_no_checkpoint_are_one_plain_line(averaged_junk, kind):
    """--weights naming a FIFO waited for ever; a folder said "(No such device (os error 19))" and a file of junk
    "(Error while deserializing header: header too small)": safetensors' own words."""
    why = {
        "fifo": "not a regular file (a pipe, socket or device); give a regular file",
        "folder": "is a folder; give a file",
        "junk": "not a safetensors checkpoint (damaged, cut short or another format); pass checkpoint files",
    }[kind]
    bad, said = averaged_junk[kind]
    assert said is not None, f"average_weights still read {bad} after the bound (killed)"
    assert said == f"cannot read weights {bad}: {why}"


def _special(path: Path, kind: str) -> Path:
    """A FIFO, a character device (root only: /dev/null's numbers) or a link to a FIFO at ``path``."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        if os.geteuid() != 0:
            pytest.skip("a device node needs root")
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    else:  # as /dev/stdout is a link to /proc/self/fd/1
        os.mkfifo(path.with_name("pipe"))
        os.symlink(path.with_name("pipe"), path)
    return path


SPECIAL_KINDS = ("fifo", "device", "link to a fifo")
SPECIAL_COMMANDS = ("align", "extract", "figure")


@pytest.fixture(scope="module")
def special_outs(tmp_path_factory) -> dict:
    """(kind, command) -> (--out, its mode before, the result): each command run in a process of its own (forked
    from one interpreter: run_cli_forked, each bounded by 60 s); no device node where this is not root."""
    root = tmp_path_factory.mktemp("special-outs")
    built = {}
    for i, (kind, command) in enumerate((k, c) for k in SPECIAL_KINDS for c in SPECIAL_COMMANDS):
        if kind == "device" and os.geteuid() != 0:
            continue
        folder = root / str(i)
        folder.mkdir()
        texts = folder / "s.txt"
        texts.write_text("7 2 9\n1 8 6\n")
        out = _special(folder / {"align": "a.txt", "extract": "m.npz", "figure": "f.png"}[command], kind)
        model = ROOT / "models" / ("translation.onnx" if command == "align" else "sequence-classification.onnx")
        argv = {
            "align": ["align", model, "--src", texts, "--tgt", texts, "--out", out],
            "extract": ["extract", model, "--text", "7 2", "--out", out],
            "figure": ["figure", model, "--text", "7 2", "--out", out],
        }[command]
        built[kind, command] = (out, os.stat(out).st_mode, argv)
    results = run_cli_forked(*((argv, Path.cwd()) for _, _, argv in built.values()), bound_s=60)
    return {key: (out, mode, r) for (key, (out, mode, _)), r in zip(built.items(), results)}


@pytest.mark.parametrize("kind", SPECIAL_KINDS)
@pytest.mark.parametrize("command", SPECIAL_COMMANDS)
def test_an_out_that_is_a_device_or_pipe_is_never_replaced(special_outs, kind, command):
    """The atomic rename replaces the path it lands on: `attnviz align ... --out /dev/null` run as root turned
    /dev/null into a regular file for every program on the machine.  A device, pipe or socket at --out (or a
    link to one, as /dev/stdout is) is refused and left as it was."""
    if (kind, command) not in special_outs:
        pytest.skip("a device node needs root")
    out, before, result = special_outs[kind, command]
    code, err = bounded(result)
    assert code == 2
    one_line(err, f"cannot write {out}: it is a device, pipe or socket, not a file, and writing would replace it")
    assert os.stat(out).st_mode == before and not stat.S_ISREG(before)


@pytest.mark.parametrize("command", ["corpus", "compare", "ablate"])
def test_a_checkpoint_that_cannot_be_written_is_a_line_of_its_own_after_the_bar(tmp_path, command):
    """A full disk at the first checkpoint: the progress bar was closed only after the failing save, so the line
    came out glued to the bar ("... 18.51item/s]attnviz: error: cannot write ...") and the bar was drawn again
    below it at exit.  Here the file-size limit fails the write as a full disk does."""

    model = ROOT / "models" / "sequence-classification.onnx"
    texts = tmp_path / "t.txt"
    texts.write_text("7 2 9 5\n1 8 6 3\n")
    out = tmp_path / "results"
    argv = {
        "corpus": ["corpus", model, "--texts", texts],
        "compare": ["compare", model, model, "--texts", texts],
        "ablate": ["ablate", model, "--texts", texts, "--all-heads"],
    }[command]

    done = _cli_with_files_up_to(3000, [*map(str, argv), "--out", str(out)], tmp_path)
    assert done.returncode == 2
    lines = [ln for ln in done.stderr.replace("\r", "\n").split("\n") if ln.strip()]
    line = (
        f"attnviz: error: cannot write {out / 'checkpoint.npz'}: File too large; check the folder is writable and "
        "has space"
    )
    assert lines[-1] == line, done.stderr
    assert sum("attnviz: error:" in ln for ln in lines) == 1 and "Traceback" not in done.stderr, done.stderr
