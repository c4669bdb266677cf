"""Generation per token: attnviz (every step's maps) vs a plain onnxruntime cache loop vs transformers.

    python bench/generation_plain_bench.py [--rounds 3] [--threads 1] [--steps 64 128 256] [--provider cpu|cuda]

One random-init GPT-2 (default hidden 256, 4 layers, 8 heads, 1,100 positions) exported by optimum-onnx
(``text-generation-with-past``: one file whose ``past_key_values.*`` inputs are fed by its ``present.*`` outputs),
EOS switched off so that every run makes exactly N tokens.  Three loops, greedy, one prompt of 8 tokens:

- **attnviz**: ``model.analyze(feeds, generate=N)`` — the KV-cache loop, every step's attention rows kept and
  assembled into the full maps (what the window and ``attnviz extract --generate`` do);
- **plain**: the loop a careful user writes against onnxruntime alone, no maps: one ``InferenceSession`` on the
  same file (same threads, same provider), ``run`` with the cache fed back, ``argmax`` of the last logits;
- **transformers**: ``generate(do_sample=False, output_attentions=True, return_dict_in_generate=True)`` on the same
  weights with eager attention (torch, same thread count).

Rounds interleave the three; medians; ratios are per token within this run.  The token columns say whether the
three produced the same ids.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))  # this checkout's attnviz, not an installed one


def cpu_s() -> float:
    """CPU seconds of this process and its children alive now (attnviz's sessions run in a child)."""
    import psutil

    me = psutil.Process()
    return time.process_time() + sum(sum(c.cpu_times()[:2]) for c in me.children(recursive=True))


def gpt2_export(folder: Path | None, longest: int, size, prefix: str) -> tuple[Path, Path]:
    """The random-init GPT-2 of these benches, exported by optimum into ``folder`` (a new temporary one when None)
    unless it holds one already: (the folder, its with-past ONNX file)."""
    out = folder or Path(tempfile.mkdtemp(prefix=prefix))
    if not (out / "onnx").is_dir():
        import optimum_env

        # the tests' export script, with room for the longest run (its GPT-2 has 512 positions)
        script = optimum_env.EXPORT_SCRIPT.replace("n_positions=512", f"n_positions={longest + 16}")
        assert script != optimum_env.EXPORT_SCRIPT
        optimum_env.run(script, "gpt2", str(out), *map(str, size))
    onnx_dir = out / "onnx"
    return out, next(p for p in (onnx_dir / "model.onnx", onnx_dir / "decoder_model_merged.onnx") if p.exists())


def plain_loop(path: Path, prompt: np.ndarray, n: int, threads: int, provider: str):
    """A plain onnxruntime greedy loop through the export's cache: returns a callable making N ids."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    # on CUDA exact float32, as attnviz asks for (TF32 off)
    prov = [("CUDAExecutionProvider", {"use_tf32": "0"})] if provider == "cuda" else []
    sess = ort.InferenceSession(str(path), so, providers=[*prov, "CPUExecutionProvider"])
    ins = {i.name: i for i in sess.get_inputs()}
    past = [k for k in ins if k.startswith("past_key_values")]
    outs = [o.name for o in sess.get_outputs()]
    heads, dim = (int(x) for x in ins[past[0]].shape[1:4:2])

    def go() -> list[int]:
        ids = prompt
        feeds = {p: np.zeros((1, heads, 0, dim), np.float32) for p in past}
        mask = np.ones((1, ids.shape[1]), np.int64)
        pos = np.arange(ids.shape[1], dtype=np.int64)[None]
        made: list[int] = []
        for _ in range(n):
            feeds.update(input_ids=ids, attention_mask=mask)
            if "position_ids" in ins:
                feeds["position_ids"] = pos
            got = dict(zip(outs, sess.run(outs, feeds)))
            nxt = int(np.argmax(got["logits"][0, -1]))
            made.append(nxt)
            for p in past:
                feeds[p] = got[p.replace("past_key_values", "present")]
            ids = np.array([[nxt]], np.int64)
            mask = np.ones((1, mask.shape[1] + 1), np.int64)
            pos = np.array([[mask.shape[1] - 1]], np.int64)
        return made

    return go


def plain_iobind_loop(path: Path, prompt: np.ndarray, n: int, threads: int, device: str = "cuda"):
    """The CUDA loop a careful user writes with IO binding: the cache stays on the GPU, only the logits come back."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    prov = [("CUDAExecutionProvider", {"use_tf32": "0"})] if device == "cuda" else ["CPUExecutionProvider"]
    sess = ort.InferenceSession(str(path), so, providers=prov)
    ins = {i.name: i for i in sess.get_inputs()}
    past = [k for k in ins if k.startswith("past_key_values")]
    heads, dim = (int(x) for x in ins[past[0]].shape[1:4:2])

    def go() -> list[int]:
        ids = prompt
        cache = {p: ort.OrtValue.ortvalue_from_numpy(np.zeros((1, heads, 0, dim), np.float32), device, 0) for p in past}
        mask = np.ones((1, ids.shape[1]), np.int64)
        made: list[int] = []
        for _ in range(n):
            b = sess.io_binding()
            b.bind_cpu_input("input_ids", ids)
            b.bind_cpu_input("attention_mask", mask)
            if "position_ids" in ins:
                b.bind_cpu_input("position_ids", np.arange(mask.shape[1] - ids.shape[1], mask.shape[1])[None])
            for p, v in cache.items():
                b.bind_ortvalue_input(p, v)
            b.bind_output("logits", "cpu")
            for p in past:
                b.bind_output(p.replace("past_key_values", "present"), device, 0)
            sess.run_with_iobinding(b)
            outs = dict(zip([o.name for o in sess.get_outputs()], b.get_outputs()))
            nxt = int(np.argmax(outs["logits"].numpy()[0, -1]))
            made.append(nxt)
            cache = {p: outs[p.replace("past_key_values", "present")] for p in past}
            ids = np.array([[nxt]], np.int64)
            mask = np.ones((1, mask.shape[1] + 1), np.int64)
        return made

    return go


def hf_loop(folder: Path, prompt: np.ndarray, n: int, threads: int, device: str = "cpu"):
    import torch
    import transformers as T

    torch.set_num_threads(threads)
    model = T.GPT2LMHeadModel.from_pretrained(folder, attn_implementation="eager").eval().to(device)
    x = torch.from_numpy(prompt).to(device)

    def go() -> list[int]:
        with torch.inference_mode():
            out = model.generate(
                x,
                attention_mask=torch.ones_like(x),
                max_new_tokens=n,
                min_new_tokens=n,
                do_sample=False,
                output_attentions=True,
                return_dict_in_generate=True,
                eos_token_id=None,
                pad_token_id=0,
            )
        return out.sequences[0, x.shape[1] :].tolist()

    return go


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--size", type=int, nargs=3, default=[256, 4, 8], metavar=("HIDDEN", "LAYERS", "HEADS"))
    ap.add_argument("--provider", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--no-hf", action="store_true", help="skip transformers (no torch here)")
    ap.add_argument("--folder", type=Path, help="an export this script made before (holds hf/ and onnx/): reused as is")
    ap.add_argument("--export-only", action="store_true", help="export into --folder and stop (to carry it elsewhere)")
    args = ap.parse_args()
    from attnviz.runtime import open_model

    out, model_file = gpt2_export(args.folder, max(args.steps), args.size, "attnviz-genplain-")
    if args.export_only:
        return
    onnx_dir = out / "onnx"
    m = open_model(onnx_dir, provider=args.provider, threads=args.threads)
    m.meta["special"] = {k: v for k, v in (m.meta.get("special") or {}).items() if k != "eos"}  # N tokens exactly
    prompt = np.random.default_rng(0).integers(3, 99, (1, 8))
    feeds = {"input_ids": prompt, "attention_mask": np.ones_like(prompt)}
    m.analyze(feeds=feeds, generate=4)  # sessions made before any timing (each loop below warms up too)

    print(f"GPT-2 {args.size}, {args.threads} thread(s), provider {args.provider}; per token, median of {args.rounds}")
    print(
        "| new tokens | attnviz (maps) | plain ort (no maps) | transformers (attentions) | attnviz / plain | attnviz / transformers | same tokens |"
    )
    print("|---:|---:|---:|---:|---:|---:|---|")
    for n in args.steps:
        loops = {
            "attnviz": lambda n=n: m.analyze(feeds=feeds, generate=n).info["generated_ids"],
            "plain": plain_loop(model_file, prompt, n, args.threads, args.provider),
        }
        if args.provider == "cuda":
            loops["plain-iobind"] = plain_iobind_loop(model_file, prompt, n, args.threads)
        if not args.no_hf:
            loops["hf"] = hf_loop(out / "hf", prompt, n, args.threads, args.provider)
        for go in loops.values():
            go()  # warm-up
        times: dict[str, list[float]] = {k: [] for k in loops}
        cpu: dict[str, list[float]] = {k: [] for k in loops}
        ids: dict[str, list[int]] = {}
        for r in range(args.rounds):
            order = list(loops) if r % 2 == 0 else list(reversed(loops))
            for k in order:
                c0, t0 = cpu_s(), time.perf_counter()
                ids[k] = list(loops[k]())
                times[k].append(time.perf_counter() - t0)
                cpu[k].append(cpu_s() - c0)
        med = {k: statistics.median(v) / n * 1e3 for k, v in times.items()}
        cpu_ratio = statistics.median(cpu["attnviz"]) / statistics.median(cpu["plain"])
        hf = med.get("hf")
        same = all(v == ids["plain"] for v in ids.values())
        vs_hf = f"{med['attnviz'] / hf:.2f}×" if hf else "–"
        if "plain-iobind" in med:  # the CUDA loop with the cache kept on the GPU: printed beside the table
            print(
                f"  ({n} tokens, plain with IO binding: {med['plain-iobind']:.2f} ms, attnviz / it {med['attnviz'] / med['plain-iobind']:.2f}×)"
            )
        print(
            f"| {n} | {med['attnviz']:.2f} ms | {med['plain']:.2f} ms | {f'{hf:.2f} ms' if hf else '–'} "
            f"| {med['attnviz'] / med['plain']:.2f}× ({cpu_ratio:.2f}× CPU) | {vs_hf} | {'yes' if same else 'NO'} |"
        )


if __name__ == "__main__":
    main()
