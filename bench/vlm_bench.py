"""A vision–language model's maps: attnviz (every map) vs a plain onnxruntime pipeline on the same three files
(issue 22, Done means: "time and peak memory of a VLM's maps against plain onnxruntime, target <= 1.10x time").

    python bench/vlm_bench.py [--rounds 7] [--threads 1] [--steps 16 64] [--words 24] [--repeats 2] [--folder DIR]
                              [--inprocess] [--against CHECKOUT [--pairs 2]]

Model: a seeded random-init LLaVA (CLIP-ViT 224 px, patch 16 = 196 image tokens, hidden 256, 4 layers, 4 heads;
Llama hidden 256, 4 layers, 4 heads, vocabulary 1,000), saved with ``save_pretrained`` and exported by
``attnviz export-hf`` (the Hub's three files: vision_encoder / embed_tokens / decoder_model_merged); ``--folder``
reuses an export.  Input: one seeded image (pixel values, the same array for every loop) and a prompt of BOS, the
196 image tokens and ``--words`` caption words.

Rows (each a whole call: the vision encoder runs every time):
- **caption**: teacher-forced on the prompt.  attnviz ``analyze(feeds=...)`` returns every map (3 vision layers -
  vision_feature_layer -2 - and 4 decoder layers); plain runs the vision encoder, the embeddings, the splice, and the
  decoder with an empty cache, logits only;
- **generate N**: greedy, EOS off so that every loop makes exactly N tokens.  attnviz ``analyze(feeds=...,
  generate=N)`` keeps every step's rows and assembles the full maps; plain runs the prompt once, then feeds each
  new token's embedding, the mask, its position and the cache back, ``argmax`` of the last logits.

Time: one process (after a warm-up), rounds interleaved with the order reversed every other round; wall = median
ms, CPU = median CPU ms of this process plus its children (attnviz runs onnxruntime in a crash-isolation child),
read from /proc/*/task/*/schedstat; ratios per round, median.  Memory: each row in a fresh process that opens the
files and runs the call once; peak = VmHWM of the process plus its children (summed: an upper bound), median of
``--repeats`` processes.  Both sides: the same threads per session, no spinning (attnviz's setting).
``--inprocess``: attnviz with crash isolation off (ATTNVIZ_INPROCESS=1, onnxruntime in the caller's process), to
tell the isolation child's round trips from the rest.
``--against CHECKOUT``: the time rows of another checkout's attnviz (its own ``bench/vlm_bench.py``, e.g. main's
worktree) measured in turn with this one's on the same folder, ``--pairs`` times each, the order swapped every
pair (one machine's load shared out evenly); each side's ratios are the median of its runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's attnviz, not an installed one

IMAGE, PATCH, HIDDEN, LAYERS, HEADS, VOCAB = 224, 16, 256, 4, 4, 1000
SPECIALS = ["<pad>", "<unk>", "<s>", "</s>", "<image>"]
BOS, EOS, IMAGE_TOKEN = 2, 3, 4
MEAN, STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]  # CLIP's


# --------------------------------------------------------------------------- the model (torch only here)
def save_source(folder: Path) -> Path:
    import torch
    import transformers as T
    from tokenizers import Tokenizer, models, pre_tokenizers

    torch.manual_seed(0)
    vision = T.CLIPVisionConfig(
        hidden_size=HIDDEN,
        intermediate_size=4 * HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        image_size=IMAGE,
        patch_size=PATCH,
        projection_dim=HIDDEN,
    )
    text = T.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=4 * HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=1024,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=0,
    )
    n = (IMAGE // PATCH) ** 2
    cfg = T.LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=IMAGE_TOKEN,
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        image_seq_length=n,
    )
    T.LlavaForConditionalGeneration(cfg).save_pretrained(str(folder))
    vocab = {w: i for i, w in enumerate(SPECIALS + [f"w{i}" for i in range(VOCAB - len(SPECIALS))])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    T.PreTrainedTokenizerFast(
        tokenizer_object=tk,
        unk_token="<unk>",
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        additional_special_tokens=["<image>"],
    ).save_pretrained(str(folder))
    size = {"height": IMAGE, "width": IMAGE}
    T.CLIPImageProcessor(
        size=size, crop_size=size, do_center_crop=False, image_mean=MEAN, image_std=STD
    ).save_pretrained(str(folder))
    return folder


def export(work: Path) -> Path:
    from attnviz.training.hf_export import export_hf

    src = save_source(work / "tiny-llava-224")
    t0 = time.perf_counter()
    r = export_hf(src, work / "tiny-llava-224-onnx")
    print(
        f"export-hf: {r.sites} maps equal transformers' within {r.max_diff:.1e} at {r.lengths} tokens "
        f"({time.perf_counter() - t0:.1f} s)"
    )
    return r.path


# --------------------------------------------------------------------------- the inputs and the two pipelines
def inputs(words: int) -> tuple[np.ndarray, np.ndarray]:
    px = np.random.default_rng(0).standard_normal((1, 3, IMAGE, IMAGE)).astype(np.float32)
    caption = np.random.default_rng(1).integers(len(SPECIALS), VOCAB, words)
    ids = np.concatenate([[BOS], [IMAGE_TOKEN] * (IMAGE // PATCH) ** 2, caption]).astype(np.int64)[None]
    return px, ids


class Plain:
    """The three files on onnxruntime alone, no maps: what a careful user writes to caption an image."""

    def __init__(self, folder: Path, threads: int):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")  # attnviz's setting: same footing
        onnx_dir = folder / "onnx"
        self.vision, self.embed, self.decoder = (
            ort.InferenceSession(str(onnx_dir / f), so, providers=["CPUExecutionProvider"])
            for f in ("vision_encoder.onnx", "embed_tokens.onnx", "decoder_model_merged.onnx")
        )
        self.past = [i.name for i in self.decoder.get_inputs() if i.name.startswith("past_key_values")]
        self.outs = [o.name for o in self.decoder.get_outputs()]
        shape = self.decoder.get_inputs()[3].shape
        self.heads, self.dim = int(shape[1]), int(shape[3])

    def prompt(self, px: np.ndarray, ids: np.ndarray) -> dict[str, np.ndarray]:
        feats = self.vision.run(None, {"pixel_values": px})[0]
        emb = self.embed.run(None, {"input_ids": ids})[0]
        emb[ids == IMAGE_TOKEN] = feats.reshape(-1, feats.shape[-1])
        t = ids.shape[1]
        feeds = {
            "inputs_embeds": emb,
            "attention_mask": np.ones_like(ids),
            "position_ids": np.arange(t, dtype=np.int64)[None],
            **{p: np.zeros((1, self.heads, 0, self.dim), np.float32) for p in self.past},
        }
        return dict(zip(self.outs, self.decoder.run(self.outs, feeds)))

    def caption(self, px, ids) -> np.ndarray:
        return self.prompt(px, ids)["logits"]

    def generate(self, px, ids, n: int) -> list[int]:
        out = self.prompt(px, ids)
        made = [int(np.argmax(out["logits"][0, -1]))]
        t = ids.shape[1]
        for _ in range(n - 1):
            tok = np.array([[made[-1]]], np.int64)
            feeds = {
                "inputs_embeds": self.embed.run(None, {"input_ids": tok})[0],
                "attention_mask": np.ones((1, t + 1), np.int64),
                "position_ids": np.array([[t]], np.int64),
                **{p: out[p.replace("past_key_values", "present")] for p in self.past},
            }
            out = dict(zip(self.outs, self.decoder.run(self.outs, feeds)))
            made.append(int(np.argmax(out["logits"][0, -1])))
            t += 1
        return made


def open_attnviz(folder: Path, threads: int):
    from attnviz.runtime import open_model

    m = open_model(folder, provider="cpu", threads=threads)
    m.meta["special"] = {k: v for k, v in m.meta["special"].items() if k != "eos"}  # N tokens exactly
    return m


def loops(folder: Path, threads: int, words: int, steps: list[int]) -> dict:
    """Row name -> a callable making one whole call (returns the ids it generated, or the number of maps)."""
    px, ids = inputs(words)
    feeds = {"pixel_values": px, "input_ids": ids, "attention_mask": np.ones_like(ids)}
    plain, m = Plain(folder, threads), open_attnviz(folder, threads)
    out = {
        "caption/attnviz": lambda: len(m.analyze(feeds=feeds).maps),
        "caption/plain": lambda: plain.caption(px, ids).shape[1],
    }
    for n in steps:
        out[f"generate {n}/attnviz"] = lambda n=n: list(m.analyze(feeds=feeds, generate=n).info["generated_ids"])
        out[f"generate {n}/plain"] = lambda n=n: plain.generate(px, ids, n)
    return out


# --------------------------------------------------------------------------- measuring
def cpu_s() -> float:
    """CPU seconds of this process and its children, from /proc/*/task/*/schedstat (nanoseconds, not 10 ms ticks)."""
    import psutil

    ns = 0
    for pid in [os.getpid(), *(c.pid for c in psutil.Process().children(recursive=True))]:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                    ns += int(fh.read().split()[0])
            except OSError:
                pass
    return ns / 1e9


def peak_mb() -> float:
    import psutil

    total = 0.0
    for pid in [os.getpid(), *(c.pid for c in psutil.Process().children(recursive=True))]:
        try:
            for line in open(f"/proc/{pid}/status"):
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1]) / 1024
        except OSError:
            pass
    return total


def time_rows(folder: Path, a) -> None:
    cases = loops(folder, a.threads, a.words, a.steps)
    for go in cases.values():
        go()  # sessions warm, the isolation child started
    wall: dict[str, list[float]] = {k: [] for k in cases}
    cpu: dict[str, list[float]] = {k: [] for k in cases}
    got: dict[str, object] = {}
    keys = list(cases)
    for r in range(a.rounds):
        for k in keys if r % 2 == 0 else keys[::-1]:
            c0, t0 = cpu_s(), time.perf_counter()
            got[k] = cases[k]()
            wall[k].append((time.perf_counter() - t0) * 1e3)
            cpu[k].append((cpu_s() - c0) * 1e3)
    out = {}
    for row in rows(a.steps):
        av, pl = f"{row}/attnviz", f"{row}/plain"
        out[row] = {
            "attnviz_ms": statistics.median(wall[av]),
            "plain_ms": statistics.median(wall[pl]),
            "wall_ratio": statistics.median(np.array(wall[av]) / np.array(wall[pl])),
            "attnviz_cpu_ms": statistics.median(cpu[av]),
            "plain_cpu_ms": statistics.median(cpu[pl]),
            "cpu_ratio": statistics.median(np.array(cpu[av]) / np.array(cpu[pl])),
        }
    for n in a.steps:
        out[f"generate {n}"]["same_tokens"] = got[f"generate {n}/attnviz"] == got[f"generate {n}/plain"]
    out["caption"]["maps"] = got["caption/attnviz"]
    print(json.dumps(out), flush=True)


def memory_row(folder: Path, row: str, a) -> None:
    """One row's side alone in this fresh process: open, run once, report the peak with the result held."""
    px, ids = inputs(a.words)
    feeds = {"pixel_values": px, "input_ids": ids, "attention_mask": np.ones_like(ids)}
    what, side = row.split("/")
    n = int(what.split()[1]) if what.startswith("generate") else 0
    if side == "plain":
        p = Plain(folder, a.threads)
        r = p.generate(px, ids, n) if n else p.caption(px, ids)
    else:
        m = open_attnviz(folder, a.threads)
        r = m.analyze(feeds=feeds, generate=n)
    print(json.dumps({"peak_mb": peak_mb()}), flush=True)  # the result still held
    del r


def rows(steps: list[int]) -> list[str]:
    return ["caption", *(f"generate {n}" for n in steps)]


def child(args: list[str], script: Path | None = None) -> dict:
    """One measuring process: this script (this checkout's attnviz), or another checkout's copy of it."""
    script = script or Path(__file__)
    path = os.pathsep.join(p for p in (str(script.resolve().parents[1]), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path)  # that checkout's attnviz first, not an installed one
    p = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, check=True, env=env)
    return json.loads(p.stdout.strip().splitlines()[-1])


def commit_of(checkout: Path) -> str:
    p = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return p.stdout.strip() or "?"


def against(common: list[str], a) -> None:
    """This checkout and ``a.against`` in turn, ``a.pairs`` times each; per side and row the median ratios."""
    sides = {"this": Path(__file__), "against": Path(a.against) / "bench" / "vlm_bench.py"}
    runs: dict[str, list[dict]] = {k: [] for k in sides}
    for i in range(a.pairs):
        for k in list(sides) if i % 2 == 0 else list(sides)[::-1]:
            runs[k].append(child([*common, "--rounds", str(a.rounds), "--child-time"], sides[k]))
    print(f"{a.pairs} run(s) a side of {a.rounds} interleaved rounds, in turn; medians over runs")
    print("| call | checkout | attnviz CPU | plain CPU | CPU ratio | wall ratio | same tokens |")
    print("|---|---|---:|---:|---:|---:|---|")
    for row in rows(a.steps):
        for k, script in sides.items():
            got = [r[row] for r in runs[k]]
            med = {
                f: statistics.median(g[f] for g in got)
                for f in ("attnviz_cpu_ms", "plain_cpu_ms", "cpu_ratio", "wall_ratio")
            }
            same = "–" if row == "caption" else "yes" if all(g.get("same_tokens") for g in got) else "NO"
            print(
                f"| {row} | {script.resolve().parents[1].name} `{commit_of(script.resolve().parents[1])}` | "
                f"{med['attnviz_cpu_ms']:.1f} ms | {med['plain_cpu_ms']:.1f} ms | {med['cpu_ratio']:.3f}× | "
                f"{med['wall_ratio']:.3f}× | {same} |"
            )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--words", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=2, help="fresh processes per memory row (median)")
    ap.add_argument("--folder", help="an export of this script's model to reuse (default: export one)")
    ap.add_argument("--time-only", action="store_true")
    ap.add_argument("--inprocess", action="store_true", help="attnviz without its crash-isolation child")
    ap.add_argument("--against", metavar="CHECKOUT", help="another checkout's attnviz, measured in turn with this one")
    ap.add_argument("--pairs", type=int, default=2, help="runs a side with --against")
    ap.add_argument("--child-time", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-memory", metavar="ROW", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child_time or a.child_memory:
        folder = Path(a.folder)
        time_rows(folder, a) if a.child_time else memory_row(folder, a.child_memory, a)
        return
    if a.inprocess:
        os.environ["ATTNVIZ_INPROCESS"] = "1"  # inherited by the measuring processes
    # the export imports torch: measuring runs in fresh processes that never do
    folder = Path(a.folder) if a.folder else export(Path(tempfile.mkdtemp(prefix="attnviz-vlm-")))
    common = ["--folder", str(folder), "--threads", str(a.threads), "--words", str(a.words)]
    common += ["--steps", *map(str, a.steps)]
    load0 = os.getloadavg()
    if a.against:
        against(common, a)
        load1 = os.getloadavg()
        print(f"load average {load0[0]:.1f} -> {load1[0]:.1f}; attnviz {'in-process' if a.inprocess else 'isolated'}")
        return
    t = child([*common, "--rounds", str(a.rounds), "--child-time"])
    mem: dict[str, float] = {}
    if not a.time_only:
        for row in (f"{r}/{side}" for r in rows(a.steps) for side in ("plain", "attnviz")):
            mem[row] = statistics.median(child([*common, "--child-memory", row])["peak_mb"] for _ in range(a.repeats))
    load1 = os.getloadavg()
    prompt = 1 + (IMAGE // PATCH) ** 2 + a.words
    print(
        f"LLaVA {IMAGE} px / patch {PATCH}, hidden {HIDDEN}, {LAYERS}+{LAYERS} layers, {HEADS} heads; prompt {prompt} "
        f"tokens; {a.threads} thread(s), CPU; attnviz {'in-process' if a.inprocess else 'with its isolation child'}; "
        f"median of {a.rounds} interleaved rounds; load average {load0[0]:.1f} -> {load1[0]:.1f}"
    )
    print(
        "| call | attnviz wall | plain wall | wall ratio | attnviz CPU | plain CPU | CPU ratio | attnviz peak | "
        "plain peak | same tokens |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for row in rows(a.steps):
        r, label = t[row], f"caption ({t['caption']['maps']} maps)" if row == "caption" else row
        peaks = f"{mem[row + '/attnviz']:.0f} MB | {mem[row + '/plain']:.0f} MB" if mem else "– | –"  # summed VmHWM
        same = "yes" if r.get("same_tokens", True) else "NO"
        print(
            f"| {label} | {r['attnviz_ms']:.1f} ms | {r['plain_ms']:.1f} ms | {r['wall_ratio']:.2f}× | "
            f"{r['attnviz_cpu_ms']:.1f} ms | {r['plain_cpu_ms']:.1f} ms | {r['cpu_ratio']:.2f}× | {peaks} | "
            f"{same if row != 'caption' else '–'} |"
        )


if __name__ == "__main__":
    main()
