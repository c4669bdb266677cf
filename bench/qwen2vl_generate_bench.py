"""Qwen2-VL generation: attnviz (every step's maps, the loop beside the decoder's session writing M-RoPE positions)
against a plain onnxruntime loop on the same three files, and against attnviz's one request per step (the path
Qwen2-VL took before the loop wrote ``[3, B, 1]`` positions).

    python bench/qwen2vl_generate_bench.py [--rounds 7] [--threads 1] [--steps 16 64] [--folder DIR] [--inprocess]

Model: the tests' seeded tiny random-init Qwen2-VL (tests/qwen2vl_models.py: ViT and Qwen2 decoder of hidden 32,
2 layers, 4 heads; the Hub's three files, the decoder If-merged), so a step's compute is small and the rows show
what attnviz adds per token.  Input: the sample image (resources/samples/captioning.png) through attnviz's
Qwen2-VL processor and a short prompt; greedy, EOS off, so that every call makes exactly N tokens.

Rows, each a whole call (the vision tower runs every time):
- **attnviz**: ``analyze(feeds=..., generate=N)``, every step's rows kept and assembled;
- **per step**: the same with ``VLMCache.plan`` returning None (one request to the session per token);
- **plain**: the vision file on the processor's patches, embeddings, splice, the decoder on the prompt with an
  empty cache (M-RoPE positions from attnviz's numpy ``rope_index``), then each token's embedding, the mask, its
  positions (count + rope delta on all three axes) and the cache back, ``argmax`` of the last logits.

Time: one process after a warm-up, rounds interleaved (order reversed every other round); wall and CPU (this
process and its children, /proc schedstat) medians; ratio per round, median; per token: (N2 − N1 rows) / (N2 − N1).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's attnviz, not an installed one
sys.path.insert(0, str(ROOT / "tests"))  # the tests' model builder
sys.path.insert(0, str(ROOT / "bench"))
SAMPLE = ROOT / "resources" / "samples" / "captioning.png"
PROMPT = "<|vision_start|><|image_pad|><|vision_end|>describe the cat"


class Plain:
    """The three files on onnxruntime alone, no maps."""

    def __init__(self, folder: Path, threads: int):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")  # attnviz's setting: same footing
        self.vision, self.embed, self.decoder = (
            ort.InferenceSession(str(folder / "onnx" / f), so, providers=["CPUExecutionProvider"])
            for f in ("vision_encoder.onnx", "embed_tokens.onnx", "decoder_model_merged.onnx")
        )
        self.past = [i for i in self.decoder.get_inputs() if i.name.startswith("past_key_values")]
        self.outs = [o.name for o in self.decoder.get_outputs()]

    def generate(self, px: np.ndarray, ids: np.ndarray, n: int) -> list[int]:
        import qwen2vl_models as qm

        from attnviz.runtime.vlm_families.qwen2vl import patchify, rope_index

        flat, thw = patchify(px[0], qm.PATCH, qm.MERGE, qm.TEMPORAL)
        feats = self.vision.run(None, {"pixel_values": flat, "image_grid_thw": thw})[0]
        emb = self.embed.run(None, {"input_ids": ids})[0]
        emb[ids == qm.IMAGE_TOKEN] = feats
        mask = np.ones_like(ids)
        pos, delta = rope_index(ids, mask, qm.IMAGE_TOKEN, [tuple(thw[0])], qm.MERGE)
        heads, dim = self.past[0].shape[1], self.past[0].shape[3]
        feeds = {
            "inputs_embeds": emb,
            "attention_mask": mask,
            "position_ids": pos,
            **{p.name: np.zeros((1, heads, 0, dim), np.float32) for p in self.past},
            "use_cache_branch": np.zeros(1, bool),
        }
        out = dict(zip(self.outs, self.decoder.run(self.outs, feeds)))
        made = [int(np.argmax(out["logits"][0, -1]))]
        t = ids.shape[1]
        for _ in range(n - 1):
            feeds = {
                "inputs_embeds": self.embed.run(None, {"input_ids": np.array([[made[-1]]], np.int64)})[0],
                "attention_mask": np.ones((1, t + 1), np.int64),
                "position_ids": np.full((3, 1, 1), t + int(delta[0, 0]), np.int64),
                **{p.name: out[p.name.replace("past_key_values", "present")] for p in self.past},
                "use_cache_branch": np.ones(1, bool),
            }
            out = dict(zip(self.outs, self.decoder.run(self.outs, feeds)))
            made.append(int(np.argmax(out["logits"][0, -1])))
            t += 1
        return made


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, nargs=2, default=[16, 64])
    ap.add_argument("--folder", help="a saved tiny Qwen2-VL repository to reuse (default: build one)")
    ap.add_argument("--inprocess", action="store_true", help="attnviz without its crash-isolation child")
    a = ap.parse_args()
    if a.inprocess:
        os.environ["ATTNVIZ_INPROCESS"] = "1"
    import qwen2vl_models as qm
    from vlm_bench import cpu_s

    from attnviz.runtime import builders as bd
    from attnviz.runtime import open_model
    from attnviz.runtime.request import AnalyzeRequest
    from attnviz.runtime.vlm import VLMCache

    folder = Path(a.folder) if a.folder else qm.save_repo(Path(tempfile.mkdtemp()) / "tiny-qwen2-vl")
    m = open_model(folder, provider="cpu", threads=a.threads)
    m.meta["special"] = {k: v for k, v in m.meta["special"].items() if k != "eos"}  # N tokens exactly
    prep = bd.prepare(m, AnalyzeRequest(text=PROMPT, image=str(SAMPLE)))
    px, ids = prep.feeds["pixel_values"], np.asarray(prep.prompts, np.int64)
    feeds = {"pixel_values": px, "input_ids": ids, "attention_mask": np.ones_like(ids)}
    plain = Plain(folder, a.threads)
    looped_plan = VLMCache.plan

    def per_step(n: int) -> list[int]:
        VLMCache.plan = lambda self: None  # type: ignore[method-assign]
        try:
            return list(m.analyze(feeds=feeds, generate=n).info["generated_ids"])
        finally:
            VLMCache.plan = looped_plan  # type: ignore[method-assign]

    cases = {}
    for n in a.steps:
        cases[f"{n}/attnviz"] = lambda n=n: list(m.analyze(feeds=feeds, generate=n).info["generated_ids"])
        cases[f"{n}/per step"] = lambda n=n: per_step(n)
        cases[f"{n}/plain"] = lambda n=n: plain.generate(px, ids, n)
    got = {k: go() for k, go in cases.items()}  # warm-up: sessions, the isolation child
    wall: dict[str, list[float]] = {k: [] for k in cases}
    cpu: dict[str, list[float]] = {k: [] for k in cases}
    keys = list(cases)
    for r in range(a.rounds):
        for k in keys if r % 2 == 0 else keys[::-1]:
            c0, t0 = cpu_s(), time.perf_counter()
            got[k] = cases[k]()
            wall[k].append((time.perf_counter() - t0) * 1e3)
            cpu[k].append((cpu_s() - c0) * 1e3)
    out: dict = {"prompt_tokens": int(ids.shape[1]), "load": os.getloadavg()[0]}
    for n in a.steps:
        out[f"generate {n}"] = {
            "same_tokens": got[f"{n}/attnviz"] == got[f"{n}/plain"] == got[f"{n}/per step"],
            **{f"{side}_cpu_ms": statistics.median(cpu[f"{n}/{side}"]) for side in ("attnviz", "per step", "plain")},
            **{f"{side}_wall_ms": statistics.median(wall[f"{n}/{side}"]) for side in ("attnviz", "per step", "plain")},
            **{
                f"{side}_cpu_ratio": statistics.median(np.array(cpu[f"{n}/{side}"]) / np.array(cpu[f"{n}/plain"]))
                for side in ("attnviz", "per step")
            },
        }
    n1, n2 = a.steps
    out["per token cpu ms"] = {
        side: (out[f"generate {n2}"][f"{side}_cpu_ms"] - out[f"generate {n1}"][f"{side}_cpu_ms"]) / (n2 - n1)
        for side in ("attnviz", "per step", "plain")
    }
    print(json.dumps(out, indent=1), flush=True)


if __name__ == "__main__":
    main()
