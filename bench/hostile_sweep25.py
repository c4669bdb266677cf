"""Session 25 hostile-input sweep of the newest surfaces: compare / ablate, vision-language folders, speech
(--audio, --max-seconds), corpus --gold-column / --images / a changed resume folder, hand-edited figure recipes,
--beams, the training backend's run folders, hostile output paths and Ctrl-C mid-run.

Judged as bench/hostile_sweep.py judges (its run_case: exit 2 with one line, no library words, inputs unchanged,
no orphan, no hang).  Run: ``PYTHONPATH=$PWD OMP_NUM_THREADS=1 python bench/hostile_sweep25.py [FILTER]``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostile_sweep as hs
from hostile_sweep import RESULTS, cached, run_case, tree_hashes, wav_header

REPO = hs.REPO


def cli(*argv, cwd=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "attnviz.cli", *map(str, argv)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=600)  # fmt: skip


def more_audio(d: Path) -> dict[str, Path]:
    import soundfile as sf

    d.mkdir(parents=True)
    t = np.arange(16000 * 2) / 16000
    tone = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    out = {}
    sf.write(d / "silent.wav", np.zeros(32000, np.float32), 16000)
    out["silent 2 s"] = d / "silent.wav"
    sf.write(d / "u8.wav", tone, 16000, subtype="PCM_U8")
    out["8-bit"] = d / "u8.wav"
    sf.write(d / "ch6.wav", np.tile(tone[:, None], (1, 6)), 16000)
    out["6 channels"] = d / "ch6.wav"
    nan = np.full(32000, np.nan, np.float32)
    sf.write(d / "allnan.wav", nan, 16000, subtype="FLOAT")
    out["all NaN"] = d / "allnan.wav"
    shutil.copy(REPO / "models" / "sequence-classification.onnx", d / "model.wav")
    out["ONNX named .wav"] = d / "model.wav"
    (d / "hdronly.wav").write_bytes(wav_header(16000, 1, 16, 0))
    out["header only, 0 frames"] = d / "hdronly.wav"
    (d / "trunc.wav").write_bytes(wav_header(16000, 1, 16, 16000)[:30])
    out["truncated header"] = d / "trunc.wav"
    (d / "zero.wav").write_bytes(b"")
    out["zero-byte"] = d / "zero.wav"
    return out


def main() -> None:
    base = Path(tempfile.mkdtemp(prefix="h25sweep-"))
    IN, OUT = base / "in", base / "out"
    IN.mkdir()
    OUT.mkdir()
    models = IN / "models"
    models.mkdir()
    for m in ("sequence-classification", "vit-classification", "captioning", "translation"):
        shutil.copy(REPO / "models" / f"{m}.onnx", models)
    TEXT = models / "sequence-classification.onnx"
    VIT = models / "vit-classification.onnx"
    MT = models / "translation.onnx"
    images = hs.make_images(IN / "img")
    audio = hs.make_audio(IN / "aud")
    audio.update(more_audio(IN / "aud2"))
    texts = hs.make_texts(IN / "txt")
    (IN / "txt" / "big.txt").write_bytes(b"7 " * 5_000_000 + b"\n")
    texts["10 MB single line"] = IN / "txt" / "big.txt"
    # wrong-type model files
    bad = IN / "bad"
    bad.mkdir()
    shutil.copy(images["good"], bad / "png.onnx")
    (bad / "zero.onnx").write_bytes(b"")
    (bad / "trunc.onnx").write_bytes(TEXT.read_bytes()[: TEXT.stat().st_size // 2])
    shutil.copy(audio["good"], bad / "wav.onnx")
    wrong = {"PNG named .onnx": bad / "png.onnx", "zero-byte .onnx": bad / "zero.onnx",
             "truncated .onnx": bad / "trunc.onnx", "WAV named .onnx": bad / "wav.onnx"}  # fmt: skip

    # ---- compare ----------------------------------------------------------------------------------------------
    G = "compare"
    for label, m in wrong.items():
        run_case(G, f"B is a {label}", ["compare", TEXT, m, "--text", "7 2 9 5", "--out", OUT / "c1"], IN)
        run_case(G, f"A is a {label}", ["compare", m, TEXT, "--text", "7 2 9 5", "--out", OUT / "c1"], IN)
    run_case(G, "different layer counts (2 vs 3 enc layers, other tokenizer)",
             ["compare", TEXT, MT, "--text", "7 2 9 5", "--out", OUT / "c2"], IN, expect="clean")  # fmt: skip
    run_case(G, "text model vs image model", ["compare", TEXT, VIT, "--text", "7 2 9 5", "--out", OUT / "c3"], IN)
    run_case(G, "--out is model A", ["compare", TEXT, TEXT, "--text", "7 2 9 5", "--out", TEXT], IN)
    run_case(G, "--out is a FIFO", ["compare", TEXT, TEXT, "--text", "7 2 9 5", "--out", texts["fifo"]], IN)
    run_case(G, "--out is the models folder", ["compare", TEXT, TEXT, "--text", "7 2 9 5", "--out", models], IN,
             expect="clean")  # fmt: skip
    for label in ("invalid UTF-8", "NUL bytes", "10 MB single line", "empty", "only whitespace", "/dev/zero"):
        run_case(G, f"--texts {label}", ["compare", TEXT, TEXT, "--texts", texts[label], "--out", OUT / "c4",
                                         "--no-progress"], IN, expect="clean")  # fmt: skip
    run_case(G, "--variant-a nonexistent", ["compare", TEXT, TEXT, "--variant-a", "q9", "--text", "7", "--out",
                                            OUT / "c5"], IN)  # fmt: skip
    run_case(G, "--top -1", ["compare", TEXT, TEXT, "--text", "7 2", "--top", "-1", "--out", OUT / "c6"], IN,
             expect="clean")  # fmt: skip
    run_case(G, "--top 10^30", ["compare", TEXT, TEXT, "--text", "7 2", "--top", "1" + "0" * 30, "--out", OUT / "c7"],
             IN, expect="clean")  # fmt: skip
    run_case(G, "--figure-head 99:99", ["compare", TEXT, TEXT, "--text", "7 2", "--figure", OUT / "cf.pdf",
                                        "--figure-head", "encoder self 99:99", "--out", OUT / "c8"], IN)  # fmt: skip

    # ---- ablate -----------------------------------------------------------------------------------------------
    G = "ablate"
    for spec in ("encoder self 99:0", "encoder self 0:-1", "encoder self 0:99", "encoder self 0:" + "9" * 40,
                 "decoder cross 0:0", "nonsense", "", "encoder self 0:0,encoder self 0:0", "encoder self 1:0-3",
                 "encoder self 0:1.5", "encoder self -1:0"):  # fmt: skip
        run_case(G, f"--heads {spec!r}", ["ablate", TEXT, "--text", "7 2 9 5", "--heads", spec, "--out", OUT / "a1"],
                 IN, expect="clean")  # fmt: skip
    run_case(G, "--all-heads --texts empty", ["ablate", TEXT, "--all-heads", "--texts", texts["empty"], "--out",
                                              OUT / "a2", "--no-progress"], IN, expect="clean")  # fmt: skip
    run_case(G, "--all-heads --texts invalid UTF-8", ["ablate", TEXT, "--all-heads", "--texts", texts["invalid UTF-8"],
                                                      "--out", OUT / "a3"], IN, expect="clean")  # fmt: skip
    run_case(G, "--out is the model file", ["ablate", TEXT, "--text", "7 2", "--heads", "encoder self 0:0", "--out",
                                            TEXT], IN)  # fmt: skip
    for label, m in wrong.items():
        run_case(G, f"model is a {label}", ["ablate", m, "--text", "7 2", "--all-heads", "--out", OUT / "a4"], IN)
    run_case(G, "--generate -1 on an encoder", ["ablate", TEXT, "--text", "7 2", "--all-heads", "--generate", "-1",
                                                "--out", OUT / "a5"], IN, expect="clean")  # fmt: skip

    # ---- beams ------------------------------------------------------------------------------------------------
    G = "beams"
    src = "μακάριοι"
    for k in ("0", "-1", "1000000", "1" + "0" * 30, "nan"):
        run_case(G, f"--beams {k}", ["extract", MT, "--text", src, "--generate", "3", "--beams", k, "--out",
                                     OUT / "b.npz"], IN, expect="clean")  # fmt: skip
    run_case(G, "--beams 3 without --generate", ["extract", MT, "--text", src, "--beams", "3", "--out", OUT / "b.npz"],
             IN, expect="clean")  # fmt: skip
    run_case(G, "--beams 3 on an encoder", ["extract", TEXT, "--text", "7 2", "--generate", "3", "--beams", "3",
                                            "--out", OUT / "b.npz"], IN, expect="clean")  # fmt: skip
    run_case(G, "--beams 50 --generate 40", ["extract", MT, "--text", src, "--generate", "40", "--beams", "50",
                                             "--out", OUT / "b2.npz"], IN, expect="clean")  # fmt: skip

    # ---- speech -----------------------------------------------------------------------------------------------
    wh = cached("export-whisper-")
    w2 = cached("export-wav2vec2-")
    speech = {}
    if wh:
        speech["whisper"] = IN / "whisper"
        shutil.copytree(wh / "onnx", speech["whisper"])
    if w2:
        speech["wav2vec2"] = IN / "wav2vec2"
        shutil.copytree(w2 / "onnx", speech["wav2vec2"])
    for name, folder in speech.items():
        G = f"audio {name}"
        for label in ("silent 2 s", "8-bit", "6 channels", "all NaN", "ONNX named .wav", "header only, 0 frames",
                      "truncated header", "zero-byte", "1 Hz rate", "0 s", "float NaN", "text named .wav",
                      "40 s (past the window)"):  # fmt: skip
            run_case(G, label, ["extract", folder, "--audio", audio[label], "--out", OUT / f"{name}.npz"], IN,
                     expect="clean")  # fmt: skip
        for s in ("0", "-1", "nan", "inf", "1e308", "1e-30"):
            run_case(G, f"--max-seconds {s}", ["extract", folder, "--audio", audio["good"], "--max-seconds", s,
                                               "--out", OUT / f"{name}.npz"], IN, expect="clean")  # fmt: skip
        run_case(G, "--out is the recording", ["extract", folder, "--audio", audio["good"], "--out", audio["good"]], IN)
        run_case(G, "--audio on a text model", ["extract", TEXT, "--audio", audio["good"], "--out", OUT / "x.npz"], IN)
        run_case(G, "compare whisper vs wav2vec2", ["compare", speech.get("whisper", folder),
                                                    speech.get("wav2vec2", folder), "--audio", audio["good"],
                                                    "--out", OUT / "cw"], IN, expect="clean")  # fmt: skip
    if "whisper" in speech:
        G = "audio corpus"
        ad = IN / "audiodir"
        ad.mkdir()
        for label in ("silent 2 s", "8-bit", "6 channels", "all NaN", "ONNX named .wav", "zero-byte", "good"):
            shutil.copy(audio[label], ad / (label.replace(" ", "_").replace(",", "") + ".wav"))
        run_case(G, "--audio-dir of hostile recordings", ["corpus", speech["whisper"], "--audio-dir", ad, "--out",
                                                          OUT / "ac", "--no-progress"], IN, expect="clean")  # fmt: skip
        gd = IN / "golddir"
        gd.mkdir()
        (gd / "good.tsv").write_bytes(b"hello\t0.0\tnan\n\xff\xfe\tx\ty\n")
        (gd / "silent_2_s.tsv").write_text("a 5 1\n")
        run_case(G, "--gold-dir with bad tsv", ["corpus", speech["whisper"], "--audio-dir", ad, "--gold-dir", gd,
                                                "--out", OUT / "ag", "--no-progress"], IN, expect="clean")  # fmt: skip

    # ---- vision-language folders ------------------------------------------------------------------------------
    vlm_src = next((p / "repo" for p in sorted(hs.CACHE.glob("vlm-vlm_models-*")) if (p / "repo").is_dir()), None)
    if vlm_src:
        G = "vlm"
        vlm = IN / "vlm"
        shutil.copytree(vlm_src, vlm)
        run_case(G, "good", ["extract", vlm, "--image", images["good"], "--text", "<image> hi", "--out", OUT / "v.npz"], IN,
                 expect="clean")  # fmt: skip
        for label in ("1x1", "30000x30000 header", "CMYK jpeg", "16-bit png", "animated gif", "60000x1 strip",
                      "empty file", "text named .png"):  # fmt: skip
            run_case(G, f"image {label}", ["extract", vlm, "--image", images[label], "--text", "<image> hi", "--out",
                                           OUT / "v.npz"], IN, expect="clean")  # fmt: skip
        for f in ("vision_encoder.onnx", "embed_tokens.onnx", "decoder_model_merged.onnx"):
            for how in ("missing", "zero-byte", "PNG", "swapped"):
                v = IN / f"vlm-{f[:6]}-{how}"
                shutil.copytree(vlm_src, v)
                t = v / "onnx" / f
                if how == "missing":
                    t.unlink()
                elif how == "zero-byte":
                    t.write_bytes(b"")
                elif how == "PNG":
                    shutil.copy(images["good"], t)
                else:
                    other = "embed_tokens.onnx" if f != "embed_tokens.onnx" else "vision_encoder.onnx"
                    shutil.copy(v / "onnx" / other, t)
                run_case(G, f"{f} {how}", ["extract", v, "--image", images["good"], "--text", "<image> hi", "--out",
                                           OUT / "v2.npz"], IN)  # fmt: skip
        for key, val in (("image_seq_length", 10**12), ("image_token_index", -5), ("image_token_index", 10**9),
                         ("text_config", []), ("model_type", 7)):  # fmt: skip
            v = IN / f"vlm-cfg-{key}-{str(val)[:8]}"
            shutil.copytree(vlm_src, v)
            cfg = json.loads((v / "config.json").read_text())
            cfg[key] = val
            (v / "config.json").write_text(json.dumps(cfg))
            run_case(G, f"config {key}={val}", ["extract", v, "--image", images["good"], "--text", "<image> hi", "--out",
                                                OUT / "v3.npz"], IN, expect="clean")  # fmt: skip
        v = IN / "vlm-pp"
        shutil.copytree(vlm_src, v)
        (v / "preprocessor_config.json").write_text('{"size": {"height": 0, "width": -3}, "image_mean": "x"}')
        run_case(G, "preprocessor sizes 0/-3", ["extract", v, "--image", images["good"], "--text", "<image> hi", "--out",
                                                OUT / "v4.npz"], IN, expect="clean")  # fmt: skip
        run_case(G, "compare vlm vs text model", ["compare", vlm, TEXT, "--image", images["good"], "--text", "<image> hi",
                                                  "--out", OUT / "vc"], IN, expect="clean")  # fmt: skip
        run_case(G, "ablate vlm head 99", ["ablate", vlm, "--image", images["good"], "--text", "<image> hi", "--heads",
                                           "decoder self 0:99", "--out", OUT / "va"], IN, expect="clean")  # fmt: skip

    # ---- corpus --images --------------------------------------------------------------------------------------
    G = "corpus images"
    idir = IN / "imgdir"
    idir.mkdir()
    for label in ("good", "1x1", "30000x30000 header", "CMYK jpeg", "16-bit png", "animated gif", "empty file",
                  "text named .png", "truncated png"):  # fmt: skip
        shutil.copy(images[label], idir / (label.replace(" ", "_") + Path(images[label]).suffix))
    os.symlink("/etc/passwd", idir / "passwd.png")
    run_case(G, "hostile image folder", ["corpus", VIT, "--images", idir, "--out", OUT / "ci", "--no-progress"], IN,
             expect="clean")  # fmt: skip
    run_case(G, "--images is a file", ["corpus", VIT, "--images", images["good"], "--out", OUT / "ci2"], IN)
    empty_dir = IN / "emptydir"
    empty_dir.mkdir()
    run_case(G, "--images empty folder", ["corpus", VIT, "--images", empty_dir, "--out", OUT / "ci3"], IN)

    # ---- corpus --gold-column ---------------------------------------------------------------------------------
    G = "gold column"
    gdir = IN / "gold"
    gdir.mkdir()
    rows = [{"src": src, "tgt": "blessed", "gold": "0-0"}]
    variants = {
        "column missing": [{"src": src, "tgt": "blessed"}],
        "gold is a number": [{"src": src, "tgt": "blessed", "gold": 7}],
        "gold is a list": [{"src": src, "tgt": "blessed", "gold": [1, 2]}],
        "gold indices past the words": [{"src": src, "tgt": "blessed", "gold": "99-99"}],
        "gold negative": [{"src": src, "tgt": "blessed", "gold": "-1-0"}],
        "gold garbage": [{"src": src, "tgt": "blessed", "gold": "a-b c"}],
        "gold huge int": [{"src": src, "tgt": "blessed", "gold": "0-" + "9" * 5000}],
        "gold superscript digit": [{"src": src, "tgt": "blessed", "gold": "0-\u00b2"}],
        "gold empty": [{"src": src, "tgt": "blessed", "gold": ""}],
        "gold null": [{"src": src, "tgt": "blessed", "gold": None}],
        "good": rows,
    }
    for label, rs in variants.items():
        f = gdir / (label.replace(" ", "_") + ".jsonl")
        f.write_text("".join(json.dumps({"text": r["src"], "pair": r["tgt"], **({"gold": r["gold"]} if "gold" in r
                                         else {})}) + "\n" for r in rs))  # fmt: skip
        run_case(G, label, ["corpus", MT, "--texts", f, "--text-pair-column", "pair", "--gold-column", "gold", "--out",
                            OUT / "g", "--no-progress"], IN, expect="clean")  # fmt: skip
    (gdir / "bad.tsv").write_bytes(b"text\tpair\tgold\n\xff\xfe\tblessed\t0-0\n")
    run_case(G, "tsv non-UTF-8", ["corpus", MT, "--texts", gdir / "bad.tsv", "--text-pair-column", "pair",
                                  "--gold-column", "gold", "--out", OUT / "g2"], IN, expect="clean")  # fmt: skip
    for label, line in (("huge index", "0-" + "9" * 5000), ("superscript digit", "0-\u00b2"), ("NUL", "0-0\x00")):
        gf = gdir / ("align-" + label.replace(" ", "_") + ".txt")
        gf.write_text(line + "\n")
        (gdir / "src.txt").write_text(src + "\n")
        (gdir / "tgt.txt").write_text("blessed\n")
        run_case(G, f"align --gold {label}", ["align", MT, "--src", gdir / "src.txt", "--tgt", gdir / "tgt.txt",
                                              "--gold", gf, "--out", OUT / "al.txt"], IN, expect="clean")  # fmt: skip
    run_case(G, "--gold-column on an encoder", ["corpus", TEXT, "--texts", texts["good"], "--gold-column", "gold",
                                                "--out", OUT / "g3"], IN)  # fmt: skip

    # ---- resume on a changed output folder --------------------------------------------------------------------
    G = "resume"
    corp = IN / "corp.txt"
    corp.write_text("".join(f"{i % 10} {(i * 7) % 10} {(i * 3) % 10}\n" for i in range(400)))
    long_corp = IN / "long.txt"  # long enough that a signal 4 s in lands mid-run
    long_corp.write_text("".join(" ".join(str((i * k) % 10) for k in range(1, 9)) + "\n" for i in range(100000)))
    res = OUT / "res"
    r = cli("corpus", TEXT, "--texts", corp, "--out", res, "--batch-size", "8", "--no-progress")
    print("resume base run rc", r.returncode, r.stderr[-300:])

    def resume_case(label, mutate, argv=None):
        d = OUT / ("res-" + label.replace(" ", "_")[:30])
        shutil.copytree(res, d, symlinks=True)
        mutate(d)
        run_case(G, label, argv or ["corpus", TEXT, "--texts", corp, "--out", d, "--batch-size", "8", "--no-progress"],
                 IN, expect="clean")  # fmt: skip

    resume_case("run.json is []", lambda d: (d / "run.json").write_text("[]"))
    resume_case("run.json truncated", lambda d: (d / "run.json").write_bytes((d / "run.json").read_bytes()[:40]))
    resume_case("heads.parquet zero-byte", lambda d: (d / "heads.parquet").write_bytes(b""))
    resume_case("heads.parquet is a folder", lambda d: ((d / "heads.parquet").unlink(), (d / "heads.parquet").mkdir()))
    resume_case("run.json a symlink to /etc/passwd",
                lambda d: ((d / "run.json").unlink(), os.symlink("/etc/passwd", d / "run.json")))  # fmt: skip
    resume_case("other model's results", lambda d: None, ["corpus", VIT, "--images", idir, "--out", OUT /
                                                          "res-other", "--no-progress"])  # fmt: skip
    resume_case("other corpus", lambda d: None, ["corpus", TEXT, "--texts", texts["good"], "--out", OUT / "res-other2",
                                                 "--no-progress"])  # fmt: skip

    # a checkpoint mid-run: interrupt, change things, resume
    def interrupted(d: Path, sig=signal.SIGINT, after_s=4.0) -> tuple[int | None, list[int]]:
        env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
        p = subprocess.Popen([sys.executable, "-m", "attnviz.cli", "corpus", TEXT, "--texts", long_corp, "--out", d,
                              "--batch-size", "1", "--no-progress"], env=env, start_new_session=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        time.sleep(after_s)
        os.kill(p.pid, sig)
        try:
            _, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            _, err = p.communicate()
        time.sleep(0.5)
        left = hs.session_members(p.pid)
        for q in left:
            os.kill(q, signal.SIGKILL)
        return p.returncode, left, err

    G = "ctrl-c"
    for sig_name, sig in (("SIGINT", signal.SIGINT), ("SIGTERM", signal.SIGTERM), ("SIGKILL", signal.SIGKILL)):
        d = OUT / f"int-{sig_name}"
        shutil.copytree(res, d)
        before = tree_hashes(d)
        rc, left, err = interrupted(d, sig)
        after = tree_hashes(d)
        changed = sorted(Path(k).name for k in before if before.get(k) != after.get(k))
        lines = [ln for ln in err.splitlines() if ln.strip()]
        problems = []
        if left:
            problems.append(f"ORPHANS {left}")
        if any(k.endswith(("heads.parquet", "examples.parquet", "run.json")) and before[k] != after.get(k)
               for k in before):  # fmt: skip
            problems.append(f"good outputs replaced {changed}")
        if "Traceback" in err:
            problems.append("Traceback")
        print(f"{'FAIL' if problems else 'ok  '} [{G}] {sig_name} over good results: rc={rc} {problems} "
              f"{lines[-1][:200] if lines else ''}", flush=True)  # fmt: skip
        RESULTS.append(dict(group=G, label=f"{sig_name} 4 s into a run over good results", rc=rc, problems=problems,
                            line=lines[-1][:300] if lines else "", argv="corpus (interrupted)"))  # fmt: skip
        if sig == signal.SIGINT:
            # resume with a different model into the checkpointed folder
            run_case("resume", "checkpoint of model A, resumed with model B (vit)",
                     ["corpus", MT, "--texts", corp, "--out", d, "--no-progress"], IN, expect="clean")  # fmt: skip
            (d / "checkpoint.npz").exists() and print("  checkpoint present")

    # ---- Ctrl-C mid-run of the other long commands: no orphan, no traceback, earlier outputs whole -------------
    def interrupt_case(label: str, argv: list, outdir: Path, after_s: float = 5.0, sig=signal.SIGINT) -> None:
        flt = sys.argv[1] if len(sys.argv) > 1 else ""
        if flt and flt.lower() not in f"interrupt {label}".lower():
            return
        before = tree_hashes(outdir) if outdir.exists() else {}
        env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
        p = subprocess.Popen([sys.executable, "-m", "attnviz.cli", *map(str, argv)], env=env,
                             start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        time.sleep(after_s)
        running = p.poll() is None
        if running:
            os.kill(p.pid, sig)
        try:
            _, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            _, err = p.communicate()
        time.sleep(1.0)
        left = hs.session_members(p.pid)
        for q in left:
            os.kill(q, signal.SIGKILL)
        after = tree_hashes(outdir) if outdir.exists() else {}
        problems = []
        if not running:
            problems.append("finished before the signal (not a test)")
        if left:
            problems.append(f"ORPHANS {left}")
        if "Traceback" in err:
            problems.append("Traceback")
        replaced = sorted(Path(k).name for k in before if before[k] != after.get(k))
        if replaced:
            problems.append(f"earlier outputs changed {replaced}")
        half = sorted(Path(k).name for k in after if k not in before and ".tmp" in k)
        if half:
            problems.append(f"temp files left {half}")
        lines = [ln for ln in err.splitlines() if ln.strip() and "%|" not in ln]
        print(f"{'FAIL' if problems else 'ok  '} [interrupt] {label}: rc={p.returncode} {problems} "
              f"{lines[-1][:200] if lines else ''}", flush=True)  # fmt: skip
        RESULTS.append(dict(group="interrupt", label=label, rc=p.returncode, problems=problems,
                            line=lines[-1][:300] if lines else "", argv=" ".join(map(str, argv))))  # fmt: skip

    icorp = IN / "icorp.txt"
    icorp.write_text("".join(" ".join(str((i * k) % 10) for k in range(1, 9)) + "\n" for i in range(100000)))
    small = IN / "small.txt"
    small.write_text("".join(" ".join(str((i * k) % 10) for k in range(1, 9)) + "\n" for i in range(50)))
    for sig_name, sig in (("SIGINT", signal.SIGINT), ("SIGTERM", signal.SIGTERM)):
        d = OUT / f"cmp-{sig_name}"
        cli("compare", TEXT, TEXT, "--texts", small, "--out", d, "--no-progress")
        interrupt_case(f"compare --texts, {sig_name} over earlier results",
                       ["compare", TEXT, TEXT, "--texts", icorp, "--out", d, "--no-progress"], d, sig=sig)  # fmt: skip
        d = OUT / f"abl-{sig_name}"
        cli("ablate", TEXT, "--all-heads", "--texts", small, "--out", d, "--no-progress")
        interrupt_case(f"ablate --all-heads --texts, {sig_name} over earlier results",
                       ["ablate", TEXT, "--all-heads", "--texts", icorp, "--out", d, "--no-progress"], d,
                       sig=sig)  # fmt: skip
        d = OUT / f"train-{sig_name}"
        interrupt_case(f"train (demo preset), {sig_name}", ["train", "toy-reverse", "--out", d, "--quiet"], OUT / "nope",
                       after_s=8, sig=sig)  # fmt: skip
        if d.exists():
            run_case("interrupt", f"train resumed after {sig_name}", ["train", "toy-reverse", "--out", d, "--quiet",
                                                                       "--steps", "5"], IN, expect="clean")  # fmt: skip
        d = OUT / f"align-{sig_name}"
        d.mkdir()
        (d / "a.txt").write_text("0-0\n")  # an earlier alignment: an interrupted run must leave it whole
        (IN / f"asrc-{sig_name}.txt").write_text("μακάριοι οἱ πτωχοὶ\n" * 20000)
        interrupt_case(f"align (translations), {sig_name}", ["align", MT, "--src", IN / f"asrc-{sig_name}.txt",
                                                            "--out", d / "a.txt", "--no-progress"], d,
                       sig=sig)  # fmt: skip

    # ---- figure recipes ---------------------------------------------------------------------------------------
    G = "recipe"
    rdir = IN / "rec"
    rdir.mkdir()
    r = cli("figure", TEXT, "--text", "7 2 9 5", "--out", rdir / "f.pdf")
    print("recipe base rc", r.returncode, r.stderr[-300:])
    base_recipe = json.loads((rdir / "f.pdf.recipe.json").read_text())
    (rdir / "f.pdf").unlink()

    def recipe_case(label, edit, expect="clean", raw: bytes | None = None):
        rec = json.loads(json.dumps(base_recipe))
        f = rdir / ("r-" + "".join(c if c.isalnum() else "_" for c in label)[:40] + ".recipe.json")
        if raw is not None:
            f.write_bytes(raw)
        else:
            edit(rec)
            f.write_text(json.dumps(rec))
        run_case(G, label, ["figure", "--recipe", f, "--out", OUT / "rf.pdf"], IN, expect=expect)

    def setp(path, val):
        def edit(rec):
            d = rec
            for k in path[:-1]:
                d = d[k]
            d[path[-1]] = val

        return edit

    recipe_case("good", lambda r: None, expect="ok")
    for path, val in [
        (("view", "layer"), "zero"), (("view", "layer"), 10**30), (("view", "layer"), -1), (("view", "head"), 99),
        (("view", "head"), [0, 1]), (("view", "dpi"), 10**9), (("view", "dpi"), 0), (("view", "dpi"), -5),
        (("view", "font_size"), 1e308), (("view", "font_size"), "big"), (("view", "width_in"), 1e6),
        (("view", "width_in"), float("nan")), (("view", "keep"), 5), (("view", "vmax"), -1), (("view", "cmap"), "nope"),
        (("view", "cmap"), 3), (("view", "view"), "nope"), (("view", "batch"), 99), (("view", "query"), 10**12),
        (("view", "title"), "x" * 1_000_000), (("view", "step"), "1"), (("view", "scale"), None),
        (("inputs", "text"), 42), (("inputs", "text"), "7 " * 500_000), (("inputs", "generate"), 10**12),
        (("inputs", "generate"), -3), (("inputs", "image"), "../../etc/passwd"), (("inputs", "feeds"), "/etc/passwd"),
        (("inputs", "tokenizer"), "../../etc/passwd"), (("inputs", "tokenizer"), "/etc/shadow"),
        (("options", "image_size"), [10**9, 10**9]), (("options", "max_tokens"), -1), (("options", "provider"), "tpu"),
        (("options", "mode"), 5), (("source", "model", "path"), "../../etc/passwd"),
        (("source", "model", "abs_path"), "/etc/passwd"), (("source", "model"), None), (("source", "model", "path"),
        "/dev/zero"), (("source", "model", "sha256"), "0" * 64), (("output", "path"), "../../x.pdf"),
        (("output", "abs_path"), "/etc/x.pdf"), (("output", "format"), "exe"), (("attnviz_recipe",), 99),
        (("attnviz_recipe",), "1"), (("view",), []), (("inputs",), "x"),
    ]:  # fmt: skip
        recipe_case(f"{'.'.join(path)}={str(val)[:30]!s}", setp(path, val))
    recipe_case("not JSON", None, raw=b"{nope")
    recipe_case("zero-byte", None, raw=b"")
    recipe_case("non-UTF-8", None, raw=b'{"attnviz_recipe": 1, "view": {"title": "\xff\xfe"}}')
    recipe_case("nested 100000", None, raw=b"[" * 100000 + b"]" * 100000)
    recipe_case("a list", None, raw=b"[]")
    recipe_case("PNG bytes", None, raw=images["good"].read_bytes())
    link = rdir / "link.recipe.json"
    os.symlink("/etc/passwd", link)
    run_case(G, "recipe is a symlink to /etc/passwd", ["figure", "--recipe", link, "--out", OUT / "rl.pdf"], IN)
    sub = rdir / "sub"
    sub.mkdir()
    os.symlink(TEXT, sub / "model-link.onnx")
    rec = json.loads(json.dumps(base_recipe))
    rec["source"]["model"]["path"] = "model-link.onnx"
    rec["source"]["model"]["abs_path"] = str(sub / "model-link.onnx")
    (sub / "s.recipe.json").write_text(json.dumps(rec))
    run_case(G, "model path a symlink out of the folder", ["figure", "--recipe", sub / "s.recipe.json", "--out",
                                                           OUT / "rs.pdf"], IN, expect="clean")  # fmt: skip
    run_case(G, "--out is the recipe", ["figure", "--recipe", rdir / "r-good.recipe.json", "--out",
                                        rdir / "r-good.recipe.json"], IN)  # fmt: skip
    run_case(G, "--out is the model", ["figure", TEXT, "--text", "7 2", "--out", TEXT], IN)
    run_case(G, "--out is a folder", ["figure", TEXT, "--text", "7 2", "--out", rdir], IN)
    run_case(G, "--recipe-out is the model", ["figure", TEXT, "--text", "7 2", "--out", OUT / "x.pdf",
                                              "--recipe-out", TEXT], IN)  # fmt: skip
    ro = OUT / "ro"
    ro.mkdir()
    os.chmod(ro, 0o555)
    run_case(G, "--out in a read-only folder (root ignores modes)", ["figure", TEXT, "--text", "7 2", "--out",
                                                                     ro / "x.pdf"], IN, expect="clean")  # fmt: skip

    # ---- training run folders ---------------------------------------------------------------------------------
    G = "training"
    tr = OUT / "trainbase"
    r = cli("train", "toy-reverse", "--preset", "tiny", "--out", tr)
    print("train base rc", r.returncode, r.stderr[-300:])
    if r.returncode == 0:

        def train_case(label, mutate, argv_of, expect="clean"):
            d = IN / ("tr-" + "".join(c if c.isalnum() else "_" for c in label)[:30])
            shutil.copytree(tr, d, symlinks=True)
            mutate(d)
            run_case(G, label, argv_of(d), IN, expect=expect)

        def cfg_edit(f):
            def m(d):
                c = json.loads((d / "config.json").read_text())
                f(c)
                (d / "config.json").write_text(json.dumps(c))

            return m

        def avg(d):
            return ["average", d, "--weights", d / "checkpoint.safetensors", d / "checkpoint.safetensors", "--out",
                    OUT / ("avg-" + d.name)]  # fmt: skip

        def ev(d):
            return ["eval", d / "model.onnx"]

        def resume(d):
            return ["train", "toy-reverse", "--preset", "tiny", "--out", d]

        for argv_of, name in ((avg, "average"), (resume, "train again")):
            train_case(f"{name}: checkpoint zero-byte", lambda d: (d / "checkpoint.safetensors").write_bytes(b""),
                       argv_of)  # fmt: skip
            train_case(f"{name}: checkpoint truncated", lambda d: (d / "checkpoint.safetensors").write_bytes(
                (d / "checkpoint.safetensors").read_bytes()[:200]), argv_of)  # fmt: skip
            train_case(
                f"{name}: checkpoint is a PNG",
                lambda d: shutil.copy(images["good"], d / "checkpoint.safetensors"),
                argv_of,
            )
            train_case(f"{name}: checkpoint.json []", lambda d: (d / "checkpoint.json").write_text("[]"), argv_of)
            train_case(f"{name}: config.json not JSON", lambda d: (d / "config.json").write_text("{"), argv_of)
            train_case(f"{name}: config d_model 10^9", cfg_edit(lambda c: c["model"].__setitem__("d_model", 10**9)),
                       argv_of)  # fmt: skip
            train_case(f"{name}: config n_heads 0", cfg_edit(lambda c: c["model"].__setitem__("n_heads", 0)), argv_of)
            train_case(f"{name}: config model a list", cfg_edit(lambda c: c.__setitem__("model", [])), argv_of)
            train_case(f"{name}: config nested 100000", lambda d: (d / "config.json").write_bytes(b"[" * 100000),
                       argv_of)  # fmt: skip
            train_case(f"{name}: checkpoint symlink /etc/passwd", lambda d: ((d / "checkpoint.safetensors").unlink(),
                       os.symlink("/etc/passwd", d / "checkpoint.safetensors")), argv_of)  # fmt: skip
        train_case("eval: metrics.json a folder", lambda d: ((d / "metrics.json").unlink(),
                                                            (d / "metrics.json").mkdir()), ev)  # fmt: skip
        train_case("eval: config.json garbage", lambda d: (d / "config.json").write_text('{"model": 5}'), ev)
        train_case(
            "average: other run's checkpoint",
            lambda d: None,
            lambda d: ["average", d, "--weights", REPO / "models" / "translation.onnx", "--out", OUT / "avx"],
        )
        for k, v in (("d_model", "1000000"), ("n_heads", "0"), ("n_heads", "-1"), ("n_layers", "10000000"),
                     ("lr", '"x"'), ("nope", "1"), ("d_model", "1e400")):  # fmt: skip
            run_case(G, f"train --set {k}={v}", ["train", "toy-reverse", "--preset", "tiny", "--out", OUT / "tset",
                                                  "--set", f"{k}={v}", "--restart"], IN, expect="clean")  # fmt: skip

    print(f"\n{sum(1 for r in RESULTS if r['problems'])} of {len(RESULTS)} cases failed")
    (Path(os.environ.get("SWEEP_JSON", base / "results.json"))).write_text(json.dumps(RESULTS, indent=1))
    print("results:", os.environ.get("SWEEP_JSON", base / "results.json"))


if __name__ == "__main__":
    main()
