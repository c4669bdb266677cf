"""What ``MapAssembler.maps()`` (runtime/generate.py) copies of a generation's maps, old tree against this one.

Each measurement runs in a fresh process whose ``PYTHONPATH`` is one tree (``--old DIR``: e.g.
``git -C /work/main archive HEAD attnviz | tar -x -C DIR``; this worktree otherwise), old and new alternating:

- ``whisper``: the tests' tiny Whisper export (tests/optimum_env.py) generating ``--steps`` tokens on a 2.5 s chirp,
  crash-isolated and in-process (``ATTNVIZ_INPROCESS=1``); the second generation is measured (the first learns the
  shapes the one-request path needs);
- ``gpt2``: the tests' tiny GPT-2 export, ``--gpt2-steps`` tokens from a 3-token prompt (decoder-only: self maps
  that grow with the generation), both modes;
- ``synthetic``: the assembler alone on whisper-large-v3's decoder shapes (20 heads, 1,500 frames, a 4-token prompt,
  ``--tokens`` generated) for ``--layers`` layers: per layer a self and a cross site, the prompt's part and the loop's
  rows as the loop leaves them (this tree: rows reserved ahead for the prompt's).

Reported per run: sites whose map is a new buffer (the loop's rows copied) and those bytes, the tracemalloc peak
over what was held when ``maps()`` began (what assembling allocated), the parent's tracemalloc peak over the
measured generation, ``ru_maxrss``, and a SHA-256 of the ids and every map's bytes (old and new must agree).

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python bench/whisper_assembly_copy.py --old /tmp/asm21_old --rounds 2
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
CACHE = Path.home() / ".cache" / "attnviz-tests"


def _spy(generate, seen: dict) -> None:
    """Wrap MapAssembler.maps: what it allocated beyond what was held, and the sites it copied."""
    assemble = generate.MapAssembler.maps

    def spy(self):
        cur = tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else 0
        if tracemalloc.is_tracing():
            tracemalloc.reset_peak()
        out = assemble(self)
        if tracemalloc.is_tracing():
            seen["assembly_alloc"] = tracemalloc.get_traced_memory()[1] - cur
        copied = [out[i].nbytes for i, parts in self.parts.items() if len(parts) > 1 and not _shares(out[i], parts[-1])]
        seen["copied_sites"], seen["copied_bytes"] = len(copied), sum(copied)
        seen["sites_assembled"] = sum(len(p) > 1 for p in self.parts.values())
        seen["assembled_bytes"] = sum(out[i].nbytes for i, p in self.parts.items() if len(p) > 1)
        return out

    generate.MapAssembler.maps = spy


def _shares(a, b) -> bool:
    import numpy as np

    return bool(np.shares_memory(a, b))


def _digest(ids, arrays) -> str:
    h = hashlib.sha256(json.dumps(list(map(int, ids))).encode())
    for a in arrays:
        h.update(str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def child_model(kind: str, steps: int) -> dict:
    import numpy as np

    sys.path.insert(0, str(HERE / "tests"))
    from one_request import open_without_eos  # the tests' helper: every run makes all its tokens

    from attnviz.runtime import generate

    seen: dict = {}
    _spy(generate, seen)
    if kind == "whisper":
        m = open_without_eos(next(p for p in CACHE.glob("export-whisper-*") if p.is_dir()) / "onnx")
        rate = 16000
        t = np.arange(int(2.5 * rate)) / rate
        clip = (0.5 * np.sin(2 * np.pi * (100 * t + 3900 / 5 * t**2))).astype(np.float32)
        kwargs = dict(audio=clip, generate=steps)
    else:
        m = open_without_eos(next(p for p in CACHE.glob("export-gpt2-*") if p.is_dir()) / "onnx")
        prompt = np.array([[3, 4, 5]])
        kwargs = dict(feeds={"input_ids": prompt, "attention_mask": np.ones_like(prompt)}, generate=steps)
    tracemalloc.start()
    t0 = time.perf_counter()
    first = m.analyze(**kwargs)
    cold = dict(cold_wall=time.perf_counter() - t0, cold_peak=tracemalloc.get_traced_memory()[1])
    cold["cold_assembly_alloc"] = seen.get("assembly_alloc", 0)
    first_digest = _digest(first.info["generated_ids"], [x.array() for x in first.maps])
    del first
    if kind == "whisper":
        m._enc_cache = None
    tracemalloc.reset_peak()
    t0 = time.perf_counter()
    r = m.analyze(**kwargs)
    wall = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    arrays = [x.array() for x in r.maps]
    return dict(
        seen,
        **cold,
        first_digest=first_digest,
        ids=len(r.info["generated_ids"]),
        maps_bytes=sum(a.nbytes for a in arrays),
        peak=peak,
        wall=wall,
        digest=_digest(r.info["generated_ids"], arrays),
    )


def child_synthetic(layers: int, tokens: int) -> dict:
    import numpy as np

    from attnviz.runtime import generate

    seen: dict = {}
    _spy(generate, seen)
    heads, frames, prompt = 20, 1500, 4
    new = "reserved" in inspect.signature(generate.MapAssembler.add).parameters
    rng = np.random.default_rng(0)
    before, loop = {}, {}
    for layer in range(layers):
        for j, keys in ((2 * layer, None), (2 * layer + 1, frames)):  # self, cross
            kp = prompt if keys is None else keys
            before[j] = rng.random((1, heads, prompt, kp), dtype=np.float32)
            kl = prompt + tokens if keys is None else keys
            # the loop's array (this tree: the prompt's rows reserved ahead of its own), filled a head at a time so
            # that making it holds no second copy
            ahead = prompt if new else 0
            rows = np.zeros((1, heads, ahead + tokens, kl), np.float32)
            for h in range(heads):
                rows[0, h, ahead:] = rng.random((tokens, kl), dtype=np.float32)
            loop[j] = rows
    asm = generate.MapAssembler()
    asm.add(before)
    if new:
        asm.add(loop, prompt)
    else:
        asm.add(loop)
    del before, loop
    tracemalloc.start()
    t0 = time.perf_counter()
    out = asm.maps()
    wall = time.perf_counter() - t0
    tracemalloc.stop()
    del asm
    arrays = [out[i] for i in sorted(out)]
    return dict(
        seen,
        maps_bytes=sum(a.nbytes for a in arrays),
        wall=wall,
        digest=_digest([], arrays),
    )


def child(args) -> None:
    if args.child == "synthetic":
        got = child_synthetic(args.layers, args.tokens)
    else:
        got = child_model(args.child, args.steps if args.child == "whisper" else args.gpt2_steps)
    got["maxrss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    got["cpu"] = time.process_time()
    print("RESULT " + json.dumps(got))


def run(tree: Path, kind: str, inprocess: bool, args) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    env.pop("ATTNVIZ_INPROCESS", None)
    if inprocess:
        env["ATTNVIZ_INPROCESS"] = "1"
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        kind,
        "--steps",
        str(args.steps),
        "--gpt2-steps",
        str(args.gpt2_steps),
    ]
    cmd += ["--layers", str(args.layers), "--tokens", str(args.tokens)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, cwd=tree)
    return json.loads(next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))[7:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", type=Path, help="the old tree (holding attnviz/)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--steps", type=int, default=60, help="Whisper's tokens")
    ap.add_argument("--gpt2-steps", type=int, default=500)
    ap.add_argument("--layers", type=int, default=8, help="synthetic: whisper-large-v3 layers (it has 32)")
    ap.add_argument("--tokens", type=int, default=448, help="synthetic: tokens generated")
    ap.add_argument("--kinds", default="whisper,gpt2,synthetic")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    trees = [("old", args.old)] if args.old else []
    trees.append(("new", HERE))
    mib = 2**20
    print(f"load average at start: {os.getloadavg()}")
    for kind in args.kinds.split(","):
        modes = [False] if kind == "synthetic" else [False, True]
        for inprocess in modes:
            label = kind if kind == "synthetic" else f"{kind} {'in-process' if inprocess else 'isolated'}"
            digests = set()
            for rnd in range(args.rounds):
                for name, tree in trees if rnd % 2 == 0 else trees[::-1]:
                    g = run(tree, kind, inprocess, args)
                    digests.add(g["digest"] + g.get("first_digest", ""))
                    print(
                        f"{label:22} {name} r{rnd}: {g['sites_assembled']} sites assembled, "
                        f"{g['copied_sites']} copied ({g['copied_bytes'] / mib:.2f} MiB) of "
                        f"{g['assembled_bytes'] / mib:.2f} MiB assembled; assembly allocated "
                        f"{g.get('assembly_alloc', 0) / mib:.2f} MiB; "
                        + (
                            f"first generation: peak {g['cold_peak'] / mib:.2f} MiB, assembly allocated "
                            f"{g['cold_assembly_alloc'] / mib:.2f} MiB, wall {g['cold_wall']:.3f} s; second: peak "
                            f"{g['peak'] / mib:.2f} MiB; "
                            if "peak" in g
                            else ""
                        )
                        + f"ru_maxrss {g['maxrss'] / mib:.0f} MiB; wall {g['wall']:.3f} s; CPU {g['cpu']:.2f} s; "
                        f"{g['digest']}",
                        flush=True,
                    )
            print(
                f"{label:22} {'same maps and ids bit for bit' if len(digests) == 1 else 'DIFFERENT: ' + str(digests)}"
            )
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
