"""Session 21 hostile-input sweep: every subcommand against bad images, sounds, texts, model folders and outputs.

Each case runs ``python -m attnviz.cli ARGV`` in its own session under a timeout and is judged on:
  * exit code 2 with exactly one ``attnviz: error: ...`` line on stderr (or 0 where the input is odd but valid),
  * no ``Traceback`` and no library words (``onnxruntime``, ``libsndfile``, ``PIL.``) on stderr,
  * every file under the inputs folder byte-identical after the run (sha256),
  * no process left in the run's session after it exits (an orphan).

Run: ``PYTHONPATH=$PWD OMP_NUM_THREADS=1 python bench/hostile_sweep.py [FILTER]`` (root: it mounts a 64 KiB tmpfs
for the full-disk cases and a read-only one for read-only outputs, and unmounts them at the end).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("ATTNVIZ_TEST_CACHE", Path.home() / ".cache" / "attnviz-tests"))
TIMEOUT_S = float(os.environ.get("SWEEP_TIMEOUT_S", 120))
LIB_WORDS = ("Traceback", "internal error", "onnxruntime", "PIL.", "Error opening", "[ONNXRuntimeError]", "numpy.")
PROGRESS = ("corpus:", "compare:", "ablate:")  # tqdm progress lines on stderr (the runs do not pass --no-progress)


def cached(prefix: str) -> Path | None:
    hits = sorted(p for p in CACHE.glob(prefix + "*") if p.is_dir() and (p / ".complete").exists())
    return hits[-1] if hits else None


# -- inputs ----------------------------------------------------------------------------------------------------
def make_images(d: Path) -> dict[str, Path]:
    from PIL import Image

    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    rgb = Image.fromarray(rng.integers(0, 255, (40, 40, 3), np.uint8))
    out = {}
    rgb.save(d / "good.png")
    out["good"] = d / "good.png"
    full = (d / "good.png").read_bytes()
    (d / "trunc.png").write_bytes(full[: len(full) // 2])
    out["truncated png"] = d / "trunc.png"
    rgb.save(d / "good.jpg", quality=90)
    (d / "trunc.jpg").write_bytes((d / "good.jpg").read_bytes()[:300])
    out["truncated jpeg"] = d / "trunc.jpg"
    # a PNG header claiming 30000x30000 with one tiny IDAT: the bomb is in the header
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", 30000, 30000, 8, 2, 0, 0, 0)
    bomb = (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 100)) + chunk(b"IEND", b"")
    )
    (d / "bomb.png").write_bytes(bomb)
    out["30000x30000 header"] = d / "bomb.png"
    rgb.convert("CMYK").save(d / "cmyk.jpg")
    out["CMYK jpeg"] = d / "cmyk.jpg"
    Image.fromarray((rng.integers(0, 65535, (40, 40))).astype(np.uint16)).save(d / "i16.png")
    out["16-bit png"] = d / "i16.png"
    rgb.convert("P").save(d / "pal.png")
    out["palette png"] = d / "pal.png"
    rgb.convert("LA").save(d / "la.png")
    out["LA png"] = d / "la.png"
    frames = [rgb.convert("P"), Image.new("RGB", (40, 40), "red").convert("P")]
    frames[0].save(d / "anim.gif", save_all=True, append_images=frames[1:], duration=100, loop=0)
    out["animated gif"] = d / "anim.gif"
    rgb.save(d / "anim.webp", save_all=True, append_images=[Image.new("RGB", (40, 40), "blue")], duration=100)
    out["animated webp"] = d / "anim.webp"
    Image.new("RGB", (1, 1), "white").save(d / "one.png")
    out["1x1"] = d / "one.png"
    ex = Image.Exif()
    ex[0x0112] = 6  # rotate 90
    rgb.crop((0, 0, 40, 20)).save(d / "exif.jpg", exif=ex)
    out["EXIF-rotated jpeg"] = d / "exif.jpg"
    (d / "text.png").write_text("this is not an image\n")
    out["text named .png"] = d / "text.png"
    (d / "folder.png").mkdir()
    out["folder named x.png"] = d / "folder.png"
    Image.fromarray(rng.random((40, 40)).astype(np.float32), mode="F").save(d / "float.tif")
    out["float32 tiff"] = d / "float.tif"
    rgb.convert("1").save(d / "bilevel.png")
    out["1-bit png"] = d / "bilevel.png"
    Image.new("RGBA", (40, 40), (0, 0, 0, 0)).save(d / "transparent.png")
    out["transparent RGBA"] = d / "transparent.png"
    Image.new("RGB", (60000, 1), "white").save(d / "long.png")
    out["60000x1 strip"] = d / "long.png"
    (d / "empty.png").write_bytes(b"")
    out["empty file"] = d / "empty.png"
    os.mkfifo(d / "fifo.png")
    out["fifo"] = d / "fifo.png"
    return out


def wav_header(rate: int, channels: int, bits: int, n_frames: int, fmt: int = 1) -> bytes:
    block = channels * bits // 8
    data = n_frames * block
    return (
        b"RIFF" + struct.pack("<I", (36 + data) & 0xFFFFFFFF) + b"WAVE"
        + b"fmt " + struct.pack("<IHHIIHH", 16, fmt, channels, rate, rate * block, block, bits)
        + b"data" + struct.pack("<I", data & 0xFFFFFFFF)
    )  # fmt: skip


def make_audio(d: Path) -> dict[str, Path]:
    import soundfile as sf

    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    t = np.arange(16000 * 2) / 16000
    tone = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    out = {}
    sf.write(d / "good.wav", tone, 16000)
    out["good"] = d / "good.wav"
    sf.write(d / "empty.wav", np.zeros(0, np.float32), 16000)
    out["0 s"] = d / "empty.wav"
    # 8 h at 16 kHz, 16-bit mono declared; 1 s of data present
    (d / "8h.wav").write_bytes(
        wav_header(16000, 1, 16, 16000 * 3600 * 8) + (tone[:16000] * 32767).astype("<i2").tobytes()
    )
    out["8 h header, 1 s of data"] = d / "8h.wav"
    (d / "1hz.wav").write_bytes(wav_header(1, 1, 16, 4) + np.array([1000, -1000, 500, 0], "<i2").tobytes())
    out["1 Hz rate"] = d / "1hz.wav"
    sf.write(d / "ch8.wav", np.tile(tone[:, None], (1, 8)), 16000)
    out["8 channels"] = d / "ch8.wav"
    good = (d / "good.wav").read_bytes()
    (d / "corrupt.wav").write_bytes(good[:8] + b"JUNK" + good[12:])
    out["corrupt header"] = d / "corrupt.wav"
    nan = tone.copy()
    nan[100] = np.nan
    sf.write(d / "nan.wav", nan, 16000, subtype="FLOAT")
    out["float NaN"] = d / "nan.wav"
    inf = tone.copy()
    inf[5] = np.inf
    sf.write(d / "inf.wav", inf, 16000, subtype="FLOAT")
    out["float inf"] = d / "inf.wav"
    loud = tone * 1e30
    sf.write(d / "loud.wav", loud, 16000, subtype="FLOAT")
    out["float 1e30 samples"] = d / "loud.wav"
    sf.write(d / "good.flac", tone, 16000)
    out["flac"] = d / "good.flac"
    sf.write(d / "good.ogg", tone, 16000, format="OGG", subtype="VORBIS")
    out["ogg vorbis"] = d / "good.ogg"
    try:
        sf.write(d / "good.mp3", tone, 16000, format="MP3")
        out["mp3"] = d / "good.mp3"
    except Exception:
        pass
    sf.write(d / "44k.wav", np.sin(2 * np.pi * 440 * np.arange(44100) / 44100).astype(np.float32) * 0.3, 44100)
    out["44.1 kHz"] = d / "44k.wav"
    sf.write(d / "long.wav", (rng.standard_normal(16000 * 40) * 0.1).astype(np.float32), 16000)
    out["40 s (past the window)"] = d / "long.wav"
    (d / "rate0.wav").write_bytes(wav_header(0, 1, 16, 100) + b"\0\1" * 100)
    out["0 Hz rate header"] = d / "rate0.wav"
    (d / "text.wav").write_text("not a sound\n")
    out["text named .wav"] = d / "text.wav"
    os.mkfifo(d / "fifo.wav")
    out["fifo"] = d / "fifo.wav"
    return out


def make_texts(d: Path) -> dict[str, Path]:
    d.mkdir(parents=True)
    out = {}
    (d / "good.txt").write_text("7 2 9 5\n1 8 6 3\n")
    out["good"] = d / "good.txt"
    (d / "nul.txt").write_bytes(b"7 2\x00 9 5\n1\x00\x00 8\n")
    out["NUL bytes"] = d / "nul.txt"
    (d / "oneline.txt").write_bytes(b"7 " * 500_000 + b"\n")
    out["1 MB single line"] = d / "oneline.txt"
    (d / "ws.txt").write_bytes(b"   \n\t\n  \n")
    out["only whitespace"] = d / "ws.txt"
    (d / "bad.txt").write_bytes(b"7 2 \xff\xfe 9\n\xc3\x28 1\n")
    out["invalid UTF-8"] = d / "bad.txt"
    (d / "u16.txt").write_bytes("7 2 9 5\n1 8 6 3\n".encode("utf-16"))
    out["UTF-16 with BOM"] = d / "u16.txt"
    (d / "u8bom.txt").write_bytes("\ufeff7 2 9 5\n1 8 6 3\n".encode())
    out["UTF-8 with BOM"] = d / "u8bom.txt"
    (d / "empty.txt").write_bytes(b"")
    out["empty"] = d / "empty.txt"
    (d / "crlf.txt").write_bytes(b"7 2 9 5\r\n1 8 6 3\r\n")
    out["CRLF"] = d / "crlf.txt"
    os.mkfifo(d / "fifo.txt")
    out["fifo"] = d / "fifo.txt"
    out["/dev/zero"] = Path("/dev/zero")
    return out


# -- runs ------------------------------------------------------------------------------------------------------
def tree_hashes(root: Path) -> dict[str, str]:
    h = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = Path(dirpath, f)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                h[str(p)] = "link:" + os.readlink(p)
            elif stat.S_ISREG(st.st_mode):
                try:
                    h[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
                except PermissionError:
                    h[str(p)] = "unreadable"
    return h


def session_members(sid: int) -> list[int]:
    out = []
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            fields = Path(f"/proc/{e}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":  # field 6 of stat is the session id
            out.append(int(e))
    return out


RESULTS: list[dict] = []


def run_case(group, label, argv, inputs_root: Path, expect="error", words=(), cwd=None, env=None, stdin=None):
    """expect: 'error' (exit 2, one line), 'ok' (exit 0), 'clean' (0 or a clean exit 2)."""
    flt = sys.argv[1] if len(sys.argv) > 1 else ""
    if flt and flt.lower() not in f"{group} {label}".lower():
        return
    before = tree_hashes(inputs_root)
    e = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", QT_QPA_PLATFORM="offscreen", **(env or {}))
    t0 = time.monotonic()
    p = subprocess.Popen(
        [sys.executable, "-m", "attnviz.cli", *map(str, argv)],
        env=e, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=stdin or subprocess.DEVNULL,
        start_new_session=True, text=True, errors="replace",
    )  # fmt: skip
    problems = []
    try:
        so, se = p.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        so, se = p.communicate()
        problems.append(f"HANG (>{TIMEOUT_S:.0f} s)")
    wall = time.monotonic() - t0
    time.sleep(0.3)
    left = session_members(p.pid)
    if left:
        problems.append(f"ORPHANS {left}")
        for q in left:
            try:
                os.kill(q, signal.SIGKILL)
            except OSError:
                pass
    rc = p.returncode
    lines = [ln for ln in se.splitlines() if ln.strip() and not (ln.startswith(PROGRESS) and "%|" in ln)]
    if not problems:
        if expect == "report" and rc == 1 and not se.strip():
            pass  # inspect's report of a graph with no attention: printed on stdout, exit 1 (as grep finds nothing)
        elif expect == "ok" and rc != 0:
            problems.append(f"rc {rc} (expected 0)")
        elif expect == "error" and rc != 2:
            problems.append(f"rc {rc} (expected 2)")
        elif rc not in (0, 2):
            problems.append(f"rc {rc}")
        if rc == 2 and (len(lines) != 1 or not lines[0].startswith("attnviz: error:")):
            problems.append(f"{len(lines)} stderr lines")
        for w in LIB_WORDS:
            if w in se:
                problems.append(f"library words {w!r}")
        for w in words:
            if rc == 2 and w.lower() not in se.lower():
                problems.append(f"line lacks {w!r}")
        if rc == 2 and "no such file" in se:  # said of a path that is there (a FIFO, a folder): the wrong reason
            named = [a for a in map(str, argv) if a.startswith("/") and os.path.lexists(a) and a in se]
            if named:
                problems.append(f"'no such file' of {named[0]}, which exists")
    after = tree_hashes(inputs_root)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    if changed:
        problems.append(f"INPUT CHANGED {changed[:3]}")
    rec = dict(group=group, label=label, rc=rc, wall=round(wall, 1), line=(lines[-1] if lines else "")[:300],
               stderr=se[-1500:],
               problems=problems, argv=" ".join(map(str, argv)))  # fmt: skip
    RESULTS.append(rec)
    mark = "FAIL" if problems else "ok  "
    print(
        f"{mark} [{group}] {label}: rc={rc} {wall:.1f}s  {'; '.join(problems)}\n       {rec['line'][:220]}", flush=True
    )
    if problems and len(lines) > 1:
        print("       stderr tail: " + " | ".join(lines[-6:])[:900], flush=True)


def main() -> None:
    base = Path(tempfile.mkdtemp(prefix="h21sweep-"))
    IN = base / "in"
    OUT = base / "out"
    IN.mkdir()
    OUT.mkdir()
    models = IN / "models"
    models.mkdir()
    for m in ("sequence-classification", "vit-classification", "captioning", "translation"):
        shutil.copy(REPO / "models" / f"{m}.onnx", models)
    TEXT = models / "sequence-classification.onnx"
    VIT = models / "vit-classification.onnx"
    CAP = models / "captioning.onnx"
    MT = models / "translation.onnx"
    wh = cached("export-whisper-")
    WHISPER = None
    if wh:
        WHISPER = IN / "whisper"
        shutil.copytree(wh / "onnx", WHISPER)
    bert = cached("export-bert-")
    BERT = None
    if bert:
        BERT = IN / "bert"
        shutil.copytree(bert / "onnx", BERT)
    imgs = make_images(IN / "img")
    auds = make_audio(IN / "aud")
    texts = make_texts(IN / "txt")

    def o(name):
        p = OUT / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()
        return p

    # -- images through every command that takes one
    for label, path in imgs.items():
        ok = label in {"good", "CMYK jpeg", "16-bit png", "palette png", "LA png", "animated gif", "animated webp",
                       "1x1", "EXIF-rotated jpeg", "float32 tiff", "1-bit png", "transparent RGBA", "60000x1 strip"}  # fmt: skip
        exp = "clean" if ok else "error"
        run_case("image/extract", label, ["extract", VIT, "--image", path, "--out", o("x.npz")], IN, exp)
        run_case(
            "image/figure", label, ["figure", VIT, "--image", path, "--view", "image", "--out", o("f.png")], IN, exp
        )
        if label in {"good", "truncated png", "30000x30000 header", "text named .png", "16-bit png", "fifo"}:
            run_case("image/caption-extract", label, ["extract", CAP, "--image", path, "--out", o("c.npz")], IN, exp)
            run_case("image/compare", label, ["compare", VIT, VIT, "--image", path, "--out", o("cmp")], IN, exp)
            run_case(
                "image/ablate",
                label,
                ["ablate", VIT, "--image", path, "--heads", "encoder self 0:0", "--out", o("abl")],
                IN,
                exp,
            )
            run_case("image/open", label, ["open", VIT, "--image", path, "--screenshot", o("s.png")], IN, exp)
    # a corpus folder holding every hostile image at once
    corpus_imgs = IN / "imgdir"
    corpus_imgs.mkdir()
    for label, path in imgs.items():
        if path.is_file() and label != "fifo":
            shutil.copy(path, corpus_imgs / path.name)
    run_case(
        "image/corpus",
        "folder of every image",
        ["corpus", VIT, "--images", corpus_imgs, "--out", o("corp")],
        IN,
        "clean",
    )

    # -- audio
    if WHISPER:
        for label, path in auds.items():
            ok = label in {
                "good",
                "8 channels",
                "flac",
                "ogg vorbis",
                "mp3",
                "44.1 kHz",
                "1 Hz rate",
                "float 1e30 samples",
                "8 h header, 1 s of data",  # (libsndfile reads the 1 s that is there)
            }
            exp = "clean" if ok else "error"
            run_case("audio/extract", label, ["extract", WHISPER, "--audio", path, "--out", o("a.npz")], IN, exp)
            if label in {"good", "8 h header, 1 s of data", "corrupt header", "float NaN", "0 s", "fifo", "1 Hz rate"}:
                run_case(
                    "audio/align-audio", label, ["align-audio", WHISPER, "--audio", path, "--out", o("w.tsv")], IN, exp
                )
                run_case("audio/figure", label, ["figure", WHISPER, "--audio", path, "--out", o("a.png")], IN, exp)
        run_case("audio/extract", "40 s with --max-seconds 5", ["extract", WHISPER, "--audio", auds["40 s (past the window)"],
                 "--max-seconds", "5", "--out", o("a.npz")], IN, "clean")  # fmt: skip
        audir = IN / "auddir"
        audir.mkdir()
        for path in auds.values():
            if path.is_file():
                shutil.copy(path, audir / path.name)
        run_case(
            "audio/corpus",
            "folder of every clip",
            ["corpus", WHISPER, "--audio-dir", audir, "--out", o("ac")],
            IN,
            "clean",
        )

    # -- texts
    for label, path in texts.items():
        exp = "clean"
        if label in {"fifo", "/dev/zero", "empty", "only whitespace"}:
            exp = "error"
        run_case("text/corpus", label, ["corpus", TEXT, "--texts", path, "--out", o("tc")], IN, exp)
        run_case("text/compare", label, ["compare", TEXT, TEXT, "--texts", path, "--out", o("tcmp")], IN, exp)
        run_case(
            "text/ablate",
            label,
            ["ablate", TEXT, "--texts", path, "--heads", "encoder self 0:0", "--out", o("tab")],
            IN,
            exp,
        )
        run_case(
            "text/align", label, ["align", MT, "--src", path, "--tgt", texts["good"], "--out", o("al.txt")], IN, exp
        )
        if BERT:
            run_case(
                "text/bert-corpus", label, ["corpus", BERT / "model.onnx", "--texts", path, "--out", o("bc")], IN, exp
            )
    big = texts["1 MB single line"].read_text()
    run_case(
        "text/extract", "1 MB --text", ["extract", TEXT, "--text", big[:100_000], "--out", o("t.npz")], IN, "clean"
    )
    run_case("text/extract", "NUL in --text", ["extract", TEXT, "--text", "7 2\x019", "--out", o("t.npz")], IN, "clean")
    run_case("text/extract", "whitespace --text", ["extract", TEXT, "--text", "   ", "--out", o("t.npz")], IN, "error")
    if BERT:
        run_case("text/bert-extract", "surrogate --text", ["extract", BERT / "model.onnx", "--text", "a \udcff b",
                 "--out", o("t.npz")], IN, "clean")  # fmt: skip
        run_case("text/bert-extract", "RTL + combining", ["extract", BERT / "model.onnx", "--text", "\u202e\u0301" * 50,
                 "--out", o("t.npz")], IN, "clean")  # fmt: skip

    # -- model folders
    if BERT:
        hostile_configs = {
            "config.json a list": ("config.json", "[1, 2, 3]"),
            "config.json a string": ("config.json", '"bert"'),
            "config.json huge numbers": ("config.json", json.dumps({"model_type": "bert", "max_position_embeddings": 10**30,
                                                                    "num_attention_heads": 10**20, "hidden_size": -5})),
            "config.json negative sizes": ("config.json", json.dumps({"model_type": "bert", "num_attention_heads": -4,
                                                                      "num_hidden_layers": -1})),
            "config.json heads 0": ("config.json", json.dumps({"model_type": "bert", "num_attention_heads": 0})),
            "config.json float heads": ("config.json", json.dumps({"model_type": "bert", "num_attention_heads": 2.5})),
            "config.json NaN": ("config.json", '{"model_type": "bert", "max_position_embeddings": NaN}'),
            "config.json id2label list": ("config.json", json.dumps({"model_type": "bert", "id2label": [1, 2]})),
            "tokenizer.json a list": ("tokenizer.json", "[]"),
            "tokenizer.json a number": ("tokenizer.json", "1e400"),
            "tokenizer.json model a list": ("tokenizer.json", json.dumps({"model": [], "version": "1.0"})),
            "tokenizer_config.json a list": ("tokenizer_config.json", "[1]"),
            "tokenizer_config.json model_max_length -1": ("tokenizer_config.json", json.dumps({"model_max_length": -1})),
            "tokenizer_config.json model_max_length 1e30": ("tokenizer_config.json", json.dumps({"model_max_length": 1e30})),
            "special_tokens_map.json a list": ("special_tokens_map.json", "[1]"),
            "special_tokens_map.json cls a dict of list": ("special_tokens_map.json", json.dumps({"cls_token": [1]})),
        }  # fmt: skip
        for label, (fname, text) in hostile_configs.items():
            folder = IN / ("bert-" + label.replace(" ", "_").replace(".", "_"))
            shutil.copytree(BERT, folder)
            (folder / fname).write_text(text)
            m = folder / "model.onnx"
            run_case(
                "folder/bert",
                label + " / extract",
                ["extract", m, "--text", "hello world", "--out", o("b.npz")],
                IN,
                "clean",
            )
            run_case("folder/bert", label + " / inspect", ["inspect", m], IN, "clean")
            run_case(
                "folder/bert",
                label + " / corpus",
                ["corpus", m, "--texts", texts["good"], "--out", o("bc")],
                IN,
                "clean",
            )
    if WHISPER:
        hostile_pre = {
            "preprocessor a list": "[1]",
            "sampling_rate 0": json.dumps({"feature_extractor_type": "WhisperFeatureExtractor", "sampling_rate": 0}),
            "sampling_rate 1e12": json.dumps({"feature_extractor_type": "WhisperFeatureExtractor", "sampling_rate": 1e12}),
            "n_samples 1e12": json.dumps({"feature_extractor_type": "WhisperFeatureExtractor", "n_samples": 10**12}),
            "hop_length 1": json.dumps({"feature_extractor_type": "WhisperFeatureExtractor", "hop_length": 1}),
            "n_fft 1e9": json.dumps({"feature_extractor_type": "WhisperFeatureExtractor", "n_fft": 10**9}),
            "n_fft 1": json.dumps({"feature_extractor_type": "WhisperFeatureExtractor", "n_fft": 1}),
            "feature_size 1e6": json.dumps({"feature_extractor_type": "WhisperFeatureExtractor", "feature_size": 10**6}),
            "chunk_length 0.001": json.dumps({"feature_extractor_type": "WhisperFeatureExtractor", "chunk_length": 0.001}),
            "hop larger than window": json.dumps({"feature_extractor_type": "WhisperFeatureExtractor", "hop_length": 10**6}),
            "n_fft larger than window": json.dumps({"feature_extractor_type": "WhisperFeatureExtractor", "n_fft": 10**6,
                                                    "n_samples": 1000}),
            "mel_filters a string": json.dumps({"feature_extractor_type": "WhisperFeatureExtractor", "mel_filters": "x"}),
            "mel_filters ragged": json.dumps({"feature_extractor_type": "WhisperFeatureExtractor", "mel_filters": [[1], [1, 2]]}),
            "type a list": json.dumps({"feature_extractor_type": [1]}),
        }  # fmt: skip
        for label, text in hostile_pre.items():
            folder = IN / ("wh-" + label.replace(" ", "_").replace(".", "_"))
            shutil.copytree(WHISPER, folder)
            (folder / "preprocessor_config.json").write_text(text)
            run_case(
                "folder/whisper", label, ["extract", folder, "--audio", auds["good"], "--out", o("a.npz")], IN, "error"
            )
        for label, (fname, text) in {
            "generation_config a list": ("generation_config.json", "[1]"),
            "generation_config alignment_heads strings": ("generation_config.json", json.dumps({"alignment_heads": [["a", "b"]]})),
            "generation_config alignment_heads out of range": ("generation_config.json", json.dumps({"alignment_heads": [[99, 99]]})),
            "generation_config decoder_start huge": ("generation_config.json", json.dumps({"decoder_start_token_id": 10**20})),
            "config.json d_model 0": ("config.json", json.dumps({"model_type": "whisper", "d_model": 0})),
        }.items():  # fmt: skip
            folder = IN / ("wh-" + label.replace(" ", "_").replace(".", "_"))
            shutil.copytree(WHISPER, folder)
            (folder / fname).write_text(text)
            run_case(
                "folder/whisper",
                label,
                ["align-audio", folder, "--audio", auds["good"], "--out", o("w.tsv")],
                IN,
                "clean",
            )
    # vit with a hostile preprocessor_config.json beside it
    vit_pre = {
        "pre a list": "[1]",
        "image size 0": json.dumps({"size": {"height": 0, "width": 0}}),
        "image size -3": json.dumps({"size": -3}),
        "image size 1e6": json.dumps({"size": {"height": 10**6, "width": 10**6}}),
        "image_mean wrong length": json.dumps({"image_mean": [0.5]*7}),
        "image_std 0": json.dumps({"image_std": [0, 0, 0]}),
        "image_mean strings": json.dumps({"image_mean": ["a", "b", "c"]}),
        "rescale_factor NaN": '{"rescale_factor": NaN}',
        "crop_size huge": json.dumps({"do_center_crop": True, "crop_size": {"height": 10**7, "width": 10**7}}),
    }  # fmt: skip
    for label, text in vit_pre.items():
        folder = IN / ("vit-" + label.replace(" ", "_").replace(".", "_"))
        folder.mkdir()
        shutil.copy(VIT, folder / "model.onnx")
        (folder / "preprocessor_config.json").write_text(text)
        run_case(
            "folder/vit",
            label,
            ["extract", folder / "model.onnx", "--image", imgs["good"], "--out", o("v.npz")],
            IN,
            "clean",
        )
    # patch size larger than the image: --image-size smaller than the patch
    run_case(
        "folder/vit",
        "--image-size 1 1",
        ["extract", VIT, "--image", imgs["good"], "--image-size", "1", "1", "--out", o("v.npz")],
        IN,
        "error",
    )
    run_case(
        "folder/vit",
        "--image-size 0 0",
        ["extract", VIT, "--image", imgs["good"], "--image-size", "0", "0", "--out", o("v.npz")],
        IN,
        "error",
    )
    run_case("folder/vit", "--image-size 99999 99999", ["extract", VIT, "--image", imgs["good"], "--image-size", "99999",
             "99999", "--out", o("v.npz")], IN, "error")  # fmt: skip

    # external data, symlinks, unreadable files
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    sys.path.insert(0, str(REPO / "tests"))
    from onnx_builders import tiny_text_model

    tdir = IN / "tiny"
    tdir.mkdir()
    tiny = tiny_text_model(tdir / "model.onnx")
    ids = np.array([[1, 3, 4, 5, 6, 7, 2]], np.int64)
    np.savez(IN / "feeds.npz", input_ids=ids)
    secret = IN / "secret.bin"
    secret.write_bytes(np.random.default_rng(1).random(4096).astype(np.float32).tobytes())

    def with_external(name: str, location: str) -> Path:
        m = onnx.load(str(tiny))
        w = next(t for t in m.graph.initializer if t.name == "Wq0")
        arr = numpy_helper.to_array(w)
        w.ClearField("raw_data")
        del w.float_data[:]
        w.data_location = TensorProto.EXTERNAL
        for k, v in {"location": location, "offset": "0", "length": str(arr.nbytes)}.items():
            w.external_data.add(key=k, value=v)
        f = IN / name
        f.mkdir()
        onnx.save(m, str(f / "model.onnx"))
        return f / "model.onnx"

    for label, loc in {
        "external data absolute": str(secret),
        "external data ../": "../secret.bin",
        "external data /dev/zero": "/dev/zero",
        "external data a folder": ".",
        "external data missing": "gone.bin",
    }.items():
        m = with_external("ext-" + label.split()[-1].strip("./").replace("/", "_") + str(len(loc)), loc)
        run_case(
            "model/external",
            label + " / extract",
            ["extract", m, "--inputs", IN / "feeds.npz", "--out", o("e.npz")],
            IN,
            "error",
        )
        run_case("model/external", label + " / inspect", ["inspect", m], IN, "error")
    f = IN / "ext-link"
    f.mkdir()
    m = onnx.load(str(tiny))
    onnx.save(m, str(f / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True, location="w.bin",
              size_threshold=0)  # fmt: skip
    (f / "w.bin").unlink()
    os.symlink(secret, f / "w.bin")
    run_case("model/external", "external data file a symlink out of the folder", ["extract", f / "model.onnx", "--inputs",
             IN / "feeds.npz", "--out", o("e.npz")], IN, "error")  # fmt: skip
    ml = IN / "modellink"
    ml.mkdir()
    os.symlink(tiny, ml / "model.onnx")
    run_case("model/link", "model.onnx a symlink to another folder", ["extract", ml / "model.onnx", "--inputs",
             IN / "feeds.npz", "--out", o("e.npz")], IN, "clean")  # fmt: skip
    if BERT:
        bl = IN / "bert-toklink"
        shutil.copytree(BERT, bl)
        (bl / "tokenizer.json").unlink()
        os.symlink(BERT / "tokenizer.json", bl / "tokenizer.json")
        run_case("model/link", "tokenizer.json a symlink out of the folder", ["extract", bl / "model.onnx", "--text", "hi",
                 "--out", o("e.npz")], IN, "clean")  # fmt: skip
    # an unreadable file (root reads anything: only meaningful unprivileged)
    ur = IN / "unreadable"
    shutil.copytree(tdir, ur)
    os.chmod(ur / "model.onnx", 0)
    run_case("model/perm", f"chmod 000 model (as uid {os.getuid()})", ["inspect", ur / "model.onnx"], IN, "clean")
    os.chmod(ur / "model.onnx", 0o644)

    # graphs whose attention is int64 / bool, and a 0-sized dimension
    def softmax_graph(name: str, cast_to: int | None, zero_dim=False) -> Path:
        T = 0 if zero_dim else 4
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, "T", "T"] if not zero_dim else [1, 0, 4, 4])
        nodes = [helper.make_node("Softmax", ["x"], ["attn"], axis=-1, name="layers.0/self_attn/Softmax")]
        out_t = TensorProto.FLOAT
        last = "attn"
        if cast_to is not None:
            nodes.append(helper.make_node("Cast", ["attn"], ["attn_c"], to=cast_to))
            last, out_t = "attn_c", cast_to
        nodes.append(helper.make_node("MatMul", ["x", "x"], ["y0"]))
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
        nodes.append(helper.make_node("Identity", ["y0"], ["y"]))
        outs = [y, helper.make_tensor_value_info(last, out_t, None)]
        g = helper.make_graph(nodes, name, [x], outs)
        mdl = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        p = IN / f"{name}.onnx"
        onnx.save(mdl, str(p))
        feeds = IN / f"{name}.npz"
        np.savez(feeds, x=np.random.default_rng(0).random((1, 0 if zero_dim else 2, 4, 4)).astype(np.float32))
        _ = T
        return p

    for label, (ct, zd) in {"attention int64": (TensorProto.INT64, False), "attention bool": (TensorProto.BOOL, False),
                            "0-sized head axis": (None, True)}.items():  # fmt: skip
        p = softmax_graph(label.replace(" ", "_").replace("-", "_"), ct, zd)
        feeds = p.with_suffix(".npz")
        run_case(
            "model/graph", label + " / extract", ["extract", p, "--inputs", feeds, "--out", o("g.npz")], IN, "clean"
        )
        run_case("model/graph", label + " / inspect", ["inspect", p], IN, "report")
        run_case("model/graph", label + " / figure", ["figure", p, "--inputs", feeds, "--out", o("g.png")], IN, "clean")
        run_case(
            "model/graph",
            label + " / ablate",
            ["ablate", p, "--inputs", feeds, "--heads", "encoder self 0:0", "--out", o("ga")],
            IN,
            "clean",
        )

    # -- outputs
    ro = base / "ro"
    full = base / "full"
    ro.mkdir()
    full.mkdir()
    mounted = []
    if os.geteuid() == 0:
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,nr_inodes=64", "tmpfs", str(full)]).returncode == 0:
            mounted.append(full)
            fd = os.open(full / "filler", os.O_WRONLY | os.O_CREAT)  # every block taken: a 30-byte file fails too
            try:
                while os.write(fd, b"\0" * 4096):
                    pass
            except OSError:
                pass
            os.close(fd)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(ro)]).returncode == 0:
            mounted.append(ro)
    else:
        os.chmod(ro, 0o555)
    try:
        outs = {
            "extract": lambda d: ["extract", TEXT, "--text", "7 2 9", "--out", d / "x.npz"],
            "figure": lambda d: ["figure", TEXT, "--text", "7 2 9", "--out", d / "f.pdf"],
            "figure png": lambda d: ["figure", VIT, "--image", imgs["good"], "--view", "image", "--out", d / "f.png"],
            "corpus": lambda d: ["corpus", TEXT, "--texts", texts["good"], "--out", d / "c"],
            "compare": lambda d: ["compare", TEXT, TEXT, "--text", "7 2 9", "--out", d / "c"],
            "ablate": lambda d: ["ablate", TEXT, "--text", "7 2 9", "--heads", "encoder self 0:0", "--out", d / "a"],
            "align": lambda d: ["align", MT, "--src", texts["good"], "--tgt", texts["good"], "--out", d / "a.txt"],
            "train": lambda d: [
                "train",
                "sequence-classification",
                "--preset",
                "tiny",
                "--steps",
                "2",
                "--out",
                d / "t",
            ],
            "testset": lambda d: ["testset", "translation", "--max-pairs", "3", "--out", d / "ts"],
            "open screenshot": lambda d: ["open", TEXT, "--text", "7 2 9", "--screenshot", d / "s.png"],
        }
        if WHISPER:
            outs["align-audio"] = lambda d: ["align-audio", WHISPER, "--audio", auds["good"], "--out", d / "w.tsv"]
        for name, argv in outs.items():
            if ro in mounted or os.geteuid() != 0:
                run_case("out/read-only", name, argv(ro), IN, "error", words=(str(ro),))
            if full in mounted:
                run_case("out/full disk", name, argv(full), IN, "error")
                litter = sorted(p.name for p in full.iterdir() if p.name != "filler")
                if litter:  # an atomic write that failed must leave no temp file behind (nor a half folder)
                    RESULTS[-1]["problems"].append(f"LEFT ON THE FULL DISK {litter}")
                    print(f"FAIL [out/full disk] {name}: left {litter}", flush=True)
                for p in full.iterdir():
                    if p.name != "filler":
                        shutil.rmtree(p) if p.is_dir() else p.unlink()
        # --out equal to an input, and a symlink to one
        run_case(
            "out/onto-input", "extract --out the model", ["extract", TEXT, "--text", "7 2", "--out", TEXT], IN, "error"
        )
        run_case(
            "out/onto-input",
            "figure --out the image",
            ["figure", VIT, "--image", imgs["good"], "--out", imgs["good"]],
            IN,
            "error",
        )
        run_case(
            "out/onto-input",
            "align --out the src",
            ["align", MT, "--src", texts["good"], "--tgt", texts["good"], "--out", texts["good"]],
            IN,
            "error",
        )
        lk = OUT / "link.npz"
        for p in (lk,):
            if p.is_symlink() or p.exists():
                p.unlink()
        os.symlink(IN / "feeds.npz", lk)
        run_case("out/onto-input", "extract --out a symlink to its feeds", ["extract", tiny, "--inputs", IN / "feeds.npz",
                 "--out", lk], IN, "error")  # fmt: skip
        lk2 = OUT / "img-link.png"
        os.symlink(imgs["good"], lk2)
        run_case("out/onto-input", "figure --out a symlink to its image", ["figure", VIT, "--image", imgs["good"],
                 "--view", "image", "--out", lk2], IN, "error")  # fmt: skip
        lk3 = OUT / "someone-else.pdf"
        os.symlink(IN / "secret.bin", lk3)
        run_case("out/onto-input", "figure --out a symlink to a file outside the inputs", ["figure", TEXT, "--text", "7 2",
                 "--out", lk3], IN, "clean")  # fmt: skip
        # a device, a FIFO and a link to a FIFO at --out: never the machine's own /dev (an atomic rename lands on
        # the path itself: as root it would replace /dev/null), a copy of /dev/null's node in the sandbox instead
        dev = base / "dev"
        dev.mkdir()
        for name, ext in (("align", ".txt"), ("extract", ".npz"), ("figure", ".png"), ("align-audio", ".tsv")):
            targets = {"fifo": dev / f"fifo-{name}{ext}", "link to a fifo": dev / f"link-{name}{ext}"}
            os.mkfifo(targets["fifo"])
            os.symlink(targets["fifo"], targets["link to a fifo"])
            if os.geteuid() == 0:
                targets["device (1,3)"] = dev / f"null-{name}{ext}"
                os.mknod(targets["device (1,3)"], 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            for kind, target in targets.items():
                argv = {
                    "align": ["align", MT, "--src", texts["good"], "--tgt", texts["good"], "--out", target],
                    "extract": ["extract", TEXT, "--text", "7 2", "--out", target],
                    "figure": ["figure", TEXT, "--text", "7 2", "--out", target],
                    "align-audio": ["align-audio", WHISPER, "--audio", auds["good"], "--out", target],
                }[name]
                if name == "align-audio" and not WHISPER:
                    continue
                mode = os.stat(target).st_mode
                run_case("out/dev", f"{name} --out a {kind}", argv, IN, "error")
                if os.stat(target).st_mode != mode:
                    RESULTS[-1]["problems"].append(f"REPLACED {target}")
                    print(f"FAIL [out/dev] {name} --out a {kind}: replaced it", flush=True)
    finally:
        for m in mounted:
            subprocess.run(["umount", str(m)])

    # -- feeds with a 0-sized axis, a ViT export with dynamic sides given a side smaller than its patch
    np.savez(IN / "zero-tokens.npz", input_ids=np.zeros((1, 0), np.int64))
    np.savez(IN / "zero-batch.npz", input_ids=np.zeros((0, 5), np.int64))
    for label, feeds in {"0 tokens": IN / "zero-tokens.npz", "batch of 0": IN / "zero-batch.npz"}.items():
        run_case(
            "model/zero",
            label + " / extract",
            ["extract", tiny, "--inputs", feeds, "--out", o("z.npz")],
            IN,
            "clean" if label == "0 tokens" else "error",  # (0 tokens: [1, 2, 0, 0] maps; figure and open refuse them)
        )
        run_case(
            "model/zero", label + " / figure", ["figure", tiny, "--inputs", feeds, "--out", o("z.png")], IN, "error"
        )
    hfvit = next(iter(sorted(CACHE.glob("hf-vit_legacy_eager_17-*/*.onnx"))), None)
    if hfvit:
        shutil.copy(hfvit, models / "hf-vit.onnx")
        for sz in (("4", "4"), ("1", "1")):
            run_case("folder/vit", f"dynamic ViT --image-size {' '.join(sz)} (under one patch)", ["extract",
                     models / "hf-vit.onnx", "--image", imgs["good"], "--image-size", *sz, "--out", o("v.npz")], IN,
                     "error")  # fmt: skip
    run_case(
        "misc/compare",
        "a text model against a ViT",
        ["compare", TEXT, VIT, "--text", "7 2", "--out", o("cmp")],
        IN,
        "error",
    )
    # -- train sizes no machine holds, export-hf of a hostile image processor file
    for st in (f"n_layers={10**30}", "d_model=1000000", f"max_len={10**12}", f"vocab_size={10**15}"):
        run_case("misc/train", "--set " + st[:30], ["train", "sequence-classification", "--preset", "tiny", "--steps", "2",
                 "--set", st, "--quiet", "--out", o("tr")], IN, "error")  # fmt: skip
    vg = cached("export-vit-gpt2-")
    if vg:
        for label, pre in {"list": "[1]", "size 'abc'": json.dumps({"size": {"height": "abc", "width": 2}}),
                           "image_std 0": json.dumps({"image_std": [0, 0, 0]})}.items():  # fmt: skip
            f = IN / ("hf-" + label.replace(" ", "_").replace("'", ""))
            shutil.copytree(vg / "hf", f)
            (f / "preprocessor_config.json").write_text(pre)
            run_case("misc/export-hf", "preprocessor_config " + label, ["export-hf", f, "--out", o("eh")], IN, "error")
    if WHISPER:
        (IN / "latin1.txt").write_bytes("caf\xe9 au lait\n".encode("latin-1"))
        run_case("audio/align-audio", "latin-1 --transcript", ["align-audio", WHISPER, "--audio", auds["good"],
                 "--transcript", IN / "latin1.txt", "--out", o("w.tsv")], IN, "error")  # fmt: skip
        for label in ("8 channels", "corrupt header", "fifo", "float NaN"):
            run_case("audio/open", label, ["open", WHISPER, "--audio", auds[label], "--screenshot", o("s.png")], IN,
                     "clean" if label == "8 channels" else "error")  # fmt: skip
    if BERT:
        for d in sorted(IN.glob("bert-config_json_a_*")):
            run_case("folder/bert", d.name + " / open", ["open", d / "model.onnx", "--text", "hello", "--screenshot",
                     o("s.png")], IN, "clean")  # fmt: skip

    # -- eval / export-hf / average on odd inputs
    run_case("misc/eval", "eval a text file", ["eval", texts["good"]], IN, "error")
    run_case("misc/eval", "eval the bundled vit (from attnviz train)", ["eval", VIT], IN, "clean")
    run_case("misc/export-hf", "export-hf an image", ["export-hf", imgs["good"], "--out", o("eh")], IN, "error")
    if BERT:
        run_case("misc/export-hf", "export-hf an ONNX folder", ["export-hf", BERT, "--out", o("eh")], IN, "error")
    run_case("misc/average", "average on a fifo", ["average", texts["fifo"], "--weights", texts["fifo"]], IN, "error")
    run_case("misc/inspect", "inspect /dev/zero", ["inspect", "/dev/zero"], IN, "error")
    run_case("misc/inspect", "inspect a fifo", ["inspect", texts["fifo"]], IN, "error")
    run_case("misc/inspect", "inspect a png", ["inspect", imgs["good"]], IN, "error")

    n_fail = sum(bool(r["problems"]) for r in RESULTS)
    print(f"\n{len(RESULTS)} cases, {n_fail} failing; inputs in {IN}")
    (base / "results.json").write_text(json.dumps(RESULTS, indent=1))
    print(base / "results.json")


if __name__ == "__main__":
    main()
