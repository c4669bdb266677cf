"""wav2vec2 on a 10 s and a 60 s clip: `attnviz extract --audio` wall and CPU time and peak memory (session 22).

A random-init model of wav2vec2-base's shape (12 layers, 12 heads, hidden 768, the 512-channel conv stack: 95 M
parameters) exported once with optimum (feature-extraction) in the tests' optimum venv (tests/optimum_env.py), cached
under ~/.cache/attnviz-tests.  Each run is a fresh `python -m attnviz extract` child (what a user types); its wall
time, its CPU time and its peak RSS (``ru_maxrss`` of the finished child and its own children: the isolation child
runs the session) are read from ``os.wait4``.  ``--also-open`` adds the window's path (`analyze` in on-demand mode,
the maps recomputed per head when shown) through the API in a child, for the clips that ``extract`` cannot hold.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python bench/wav2vec2_bench.py --seconds 10 60
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

EXPORT = r"""
import sys
from pathlib import Path
import torch, transformers as T
out = Path(sys.argv[2])
src = out / "hf"
src.mkdir(parents=True, exist_ok=True)
torch.manual_seed(0)
T.Wav2Vec2Model(T.Wav2Vec2Config(layerdrop=0.0)).save_pretrained(src)
T.Wav2Vec2FeatureExtractor().save_pretrained(src)
from optimum.exporters.onnx import main_export
main_export(str(src), output=str(out / "onnx"), task="feature-extraction", do_validation=False)
"""

OPEN = r"""
import sys, time
from attnviz.runtime import open_model
m = open_model(sys.argv[1], provider="cpu")
t = time.perf_counter()
r = m.analyze(audio=sys.argv[2], max_seconds=float(sys.argv[3]))
print(f"{time.perf_counter() - t:.3f} {r.info.get('mode')} {r.maps[-1].shape}")
"""


def base_export() -> Path:
    import hashlib

    import optimum_env

    key = hashlib.sha1((EXPORT + " ".join(optimum_env.PINS)).encode()).hexdigest()[:10]
    out = optimum_env.CACHE / f"bench-wav2vec2-base-{key}"
    if not (out / ".complete").exists():
        optimum_env.run(EXPORT, "base", str(out), timeout=1800)
        (out / ".complete").write_text("base")
    return out / "onnx"


def clip(seconds: float, path: Path) -> None:
    import soundfile as sf

    rate = 16000
    t = np.arange(int(seconds * rate)) / rate
    x = 0.3 * np.sin(2 * np.pi * 220 * t) * (1 + np.sin(2 * np.pi * 0.5 * t)) / 2
    x += np.random.default_rng(0).normal(0, 0.02, len(t))
    sf.write(path, x.astype(np.float32), rate)


def measured(cmd: list[str]) -> tuple[float, float, float, int, str]:
    """wall s, CPU s, peak RSS GB of a child and its children, its exit code and its last output line."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = p.stdout.read() if p.stdout else ""
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    last = out.strip().splitlines()[-1] if out.strip() else ""
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1e6, os.waitstatus_to_exitcode(status), last


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, nargs="+", default=[10.0, 60.0])
    ap.add_argument("--also-open", action="store_true")
    a = ap.parse_args()
    folder = base_export()
    print(f"model {folder} ({sum(f.stat().st_size for f in folder.iterdir()) / 1e6:.0f} MB); load {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as d:
        for s in a.seconds:
            wav = Path(d) / f"clip{s:g}.wav"
            clip(s, wav)
            out = Path(d) / "maps.npz"
            cmd = [sys.executable, "-m", "attnviz", "extract", str(folder), "--audio", str(wav)]
            wall, cpu, rss, rc, last = measured([*cmd, "--max-seconds", f"{s:g}", "--out", str(out)])
            size = out.stat().st_size / 1e9 if out.exists() else 0.0
            print(
                f"extract {s:g} s: wall {wall:.1f} s, CPU {cpu:.1f} s, peak RSS {rss:.2f} GB, rc {rc}, npz {size:.2f} GB"
            )
            print(f"  {last[:300]}  (load {os.getloadavg()[0]:.1f})")
            out.unlink(missing_ok=True)
            if a.also_open:
                wall, cpu, rss, rc, last = measured([sys.executable, "-c", OPEN, str(folder), str(wav), f"{s:g}"])
                print(f"open-path analyze {s:g} s: wall {wall:.1f} s, CPU {cpu:.1f} s, peak RSS {rss:.2f} GB, rc {rc}")
                print(f"  {last[:300]}  (load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
