"""Robustness sweep: the architectures researchers export with Hugging Face optimum, opened with attnviz and
compared map by map with transformers' own eager ``output_attentions``.

    python bench/optimum_zoo.py [--archs bert llama ...] [--variants eager cli ...] [--out DIR] [--reuse]

Per architecture, inside the optimum venv (tests/optimum_env.py; bench/optimum_zoo_venv.py): a tiny random-init
model (hidden 32, 2 layers, 4 heads; GQA archs 2 KV heads), transformers' eager attentions on a fixed batch of 2
(row 1 right-padded) and the optimum exports per variant (see optimum_zoo_venv.py: ``cli`` is plain optimum-cli,
``eager`` a model loaded eager handed to onnx_export_from_model).  Then, here, attnviz opens each export folder
and every map is compared with the reference on the real (unpadded) query/key positions.  Not part of the test
suite: it takes minutes.  Verdicts: ok / no sites (attnviz said so in one line) / wrong count / mismatch /
crash (an exception that is not attnviz's one-line error) / export failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))  # this checkout's attnviz, not whichever one is installed
sys.path.insert(0, str(Path(__file__).resolve().parent))

TOL = 5e-4
VENV_SCRIPT = Path(__file__).with_name("optimum_zoo_venv.py")
FAMILIES = {  # arch -> family, in the order researchers most often reach for them
    **dict.fromkeys(("bert", "roberta", "distilbert", "albert", "electra", "xlm-roberta", "deberta-v2"), "encoder"),
    **dict.fromkeys(("llama", "mistral", "qwen2", "gpt-neox", "opt", "bloom", "falcon", "phi"), "decoder"),
    **dict.fromkeys(("bart", "mbart", "t5", "pegasus"), "seq2seq"),
    **dict.fromkeys(("vit", "deit", "swin", "beit"), "vision"),
}
ZOO22 = {  # session 22: the architectures optimum-onnx 0.1 exports beyond those 23, most used first
    **dict.fromkeys(
        ("gpt2", "gemma", "gemma2", "gemma3_text", "phi3", "qwen3", "gptj", "codegen", "gpt_bigcode", "gpt_neo"),
        "decoder",
    ),
    **dict.fromkeys(("granite", "olmo", "olmo2", "mpt"), "decoder"),
    **dict.fromkeys(
        ("modernbert", "mobilebert", "mpnet", "roformer", "camembert", "convbert", "deberta", "xlm", "flaubert"),
        "encoder",
    ),
    "nystromformer": "encoder",
    **dict.fromkeys(("marian", "m2m_100", "blenderbot", "blenderbot-small", "mt5", "longt5"), "seq2seq"),
    **dict.fromkeys(("dinov2", "yolos", "data2vec-vision", "segformer"), "vision"),
}
ZOO22.update(  # second round: newer decoders, sparse/local encoders, vision without output_attentions
    {
        **dict.fromkeys(
            ("gpt_oss", "cohere", "smollm3", "qwen3_moe", "deepseek_v3", "nemotron", "helium", "glm", "arcee"),
            "decoder",
        ),
        **dict.fromkeys(("longformer", "big_bird", "esm", "squeezebert", "rembert", "megatron-bert"), "encoder"),
        "bigbird_pegasus": "seq2seq",
        **dict.fromkeys(("swinv2", "pvt", "levit", "mobilevit"), "vision"),
    }
)
FAMILIES.update(ZOO22)


@dataclass
class Row:
    arch: str
    variant: str
    task: str = ""
    sites: str = ""
    diff: str = ""
    verdict: str = ""

    def cells(self) -> list[str]:
        return [self.arch, self.variant, self.task, self.sites, self.diff, self.verdict]


def expected_labels(family: str, n_layers: int = 2) -> list[tuple[str, str, int]]:
    if family == "seq2seq":
        return [("encoder", "self", i) for i in range(n_layers)] + [
            x for i in range(n_layers) for x in (("decoder", "self", i), ("decoder", "cross", i))
        ]
    stack = "decoder" if family == "decoder" else "encoder"
    return [(stack, "self", i) for i in range(n_layers)]


def attnviz_feeds(family: str, ref: dict) -> dict[str, np.ndarray]:
    return {k[5:]: v for k, v in ref.items() if k.startswith("feed_")}


def real_masks(family: str, ref: dict, label: tuple[str, str, int]):
    """(query mask [B,Tq], key mask [B,Tk]) of real positions for one site, or None (vision: every position)."""
    if family == "vision":
        return None
    enc = ref["feed_attention_mask"].astype(bool)
    if family != "seq2seq":
        return enc, enc
    dec = np.ones(ref["feed_decoder_input_ids"].shape, bool)
    stack, kind, _ = label
    if stack == "encoder":
        return enc, enc
    return (dec, enc) if kind == "cross" else (dec, dec)


def compare(got: np.ndarray, want: np.ndarray, masks) -> float:
    if got.shape != want.shape:
        raise ValueError(f"shape {got.shape} vs transformers {want.shape}")
    if masks is None:
        return float(np.abs(got - want).max())
    q, k = masks
    worst = 0.0
    for b in range(got.shape[0]):
        d = np.abs(got[b][:, q[b]][:, :, k[b]] - want[b][:, q[b]][:, :, k[b]])
        worst = max(worst, float(d.max()))
    return worst


def windows_on_grid(w: np.ndarray, batch: int, shift: int) -> np.ndarray:
    """Swin-style ``[B*windows, H, N, N]`` (a hooked block's windows) as the ``[B, H, T, T]`` map over the patch
    grid: the grid rolled by -shift as torch.roll rolls the patches, cut into windows row-major, each window's
    weights put where its patches came from (tests/runtime/test_optimum_zoo.py does the same by hand)."""
    per_image = w.shape[0] // batch
    n, per_row = int(round(w.shape[-1] ** 0.5)), int(round(per_image**0.5))
    side = n * per_row
    rolled = np.roll(np.arange(side * side).reshape(side, side), (-shift, -shift), axis=(0, 1))
    out = np.zeros((batch, w.shape[1], side * side, side * side), w.dtype)
    for b in range(batch):
        for k in range(per_image):
            r, c = divmod(k, per_row)
            pos = rolled[r * n : (r + 1) * n, c * n : (c + 1) * n].ravel()
            out[b][:, pos[:, None], pos[None, :]] = w[b * per_image + k]
    return out


def local_on_keys(a: np.ndarray, window: int) -> np.ndarray:
    """Longformer's local ``[B, H, T, window+1]`` (key i - window/2 + c at column c) as ``[B, H, T, T]``."""
    b, h, t, _ = a.shape
    out = np.zeros((b, h, t, t), a.dtype)
    for i in range(t):
        for c in range(window + 1):
            j = i - window // 2 + c
            if 0 <= j < t:
                out[:, :, i, j] = a[:, :, i, c]
    return out


def as_map(arch: str, r: np.ndarray, i: int, batch: int) -> np.ndarray:
    """A reference in attnviz's ``[B, H, Tq, Tk]`` where transformers returns another layout."""
    if arch in ("swin", "swinv2") and r.shape[0] != batch:  # windows; odd blocks shifted
        side = int(round((r.shape[0] // batch) ** 0.5 * r.shape[-1] ** 0.5))
        window = int(round(r.shape[-1] ** 0.5))
        return windows_on_grid(r, batch, window // 2 if i % 2 and side > window else 0)
    if arch == "longformer":
        return local_on_keys(r, r.shape[-1] - 1)
    if arch == "squeezebert":  # its output_attentions are the scores, mask added, before the softmax
        e = np.exp(r - r.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    return r


def graph_note(folder: Path) -> str:
    """How many Softmax nodes the export's files hold (If branches of merged decoders included): an sdpa export
    from the legacy exporter keeps one per layer too, a fused-kernel export none."""
    import onnx

    count = 0
    for f in sorted(folder.glob("*.onnx")):
        m = onnx.load(str(f), load_external_data=False)
        nodes = list(m.graph.node)
        nodes += [x for n in m.graph.node for a in n.attribute if a.HasField("g") for x in a.g.node]
        count += sum(n.op_type == "Softmax" for n in nodes)
    return f"{count} Softmax in {len(list(folder.glob('*.onnx')))} files"


def check(arch: str, variant: str, out: Path) -> Row:
    from attnviz import AttnvizError
    from attnviz.runtime import open_model

    family = FAMILIES[arch]
    info = json.loads((out / f"{variant}.json").read_text())
    row = Row(arch, variant, info["task"] + (f" [{info.get('attn_loaded')}]" if info.get("attn_loaded") else ""))
    if "error" in info:
        row.verdict = f"export failed: {info['error']}"
        return row
    folder = out / f"onnx-{variant}"
    note = graph_note(folder)
    ref = dict(np.load(out / "ref.npz"))
    refs = [ref[k] for k in sorted(ref) if k.startswith("ref_")]
    refs = [as_map(arch, r, i, 2) for i, r in enumerate(refs)]
    want = expected_labels(family, 2 if family == "seq2seq" else len(refs))  # LeViT: 5 attentions in 3 stages
    try:
        m = open_model(folder, provider="cpu")
        r = m.analyze(feeds=attnviz_feeds(family, ref))
    except AttnvizError as e:
        row.verdict = (
            f"no sites ({note}): {str(e)[:160]}"
            if "no attention" in str(e).lower()
            else f"refused ({note}): {str(e)[:160]}"
        )
        return row
    except Exception as e:
        tb = traceback.extract_tb(e.__traceback__)[-1]
        row.verdict = (
            f"crash: {type(e).__name__}: {str(e).splitlines()[0][:140]} @ {Path(tb.filename).name}:{tb.lineno}"
        )
        return row
    got = [(s.stack, s.kind, s.layer) for s in r.sites]
    row.sites = f"{len(got)}: " + ", ".join(s.label for s in r.sites)
    if len(got) != len(refs):
        row.verdict = f"wrong count ({note}): {len(got)} sites, transformers has {len(refs)}"
        return row
    # how far heads differ from their mean on real positions, the least over sites: far above TOL means a map
    # from the wrong head or layer could not pass
    spread = min(
        compare(w, np.broadcast_to(w.mean(1, keepdims=True), w.shape), real_masks(family, ref, lab))
        for w, lab in zip(refs, want)
        if w.ndim == 4  # LongT5's local attention comes back in blocks [B, blocks, H, L, 3L]: no [q, k] map
    )
    diffs = []
    try:
        for mp, w, lab in zip(r.maps, refs, want):
            diffs.append(compare(mp.array(), w, real_masks(family, ref, lab)))
    except ValueError as e:
        row.verdict = f"mismatch ({note}): {e}"
        return row
    worst = max(diffs)
    row.diff = f"{worst:.1e} (heads differ {spread:.2f})"
    if got != want:
        row.verdict = f"wrong labels ({note}): want {[f'{a} {b} L{c}' for a, b, c in want]}"
    elif worst > TOL:
        bad = [f"{s.label}={d:.2g}" for s, d in zip(r.sites, diffs) if d > TOL]
        row.verdict = f"mismatch ({note}): {', '.join(bad)}"
    else:
        row.verdict = f"ok ({note})"
    if "left_000" in ref:
        row.verdict += "; " + left_padding(m, ref)
    if "gen_ids" in ref:
        row.verdict += "; " + generation(m, family, ref)
    return row


def left_padding(m, ref: dict) -> str:
    """The same decoder on a left-padded batch (row 1 starts with two pads), real positions compared."""
    feeds = {k[9:]: v for k, v in ref.items() if k.startswith("leftfeed_")}
    refs = [ref[k] for k in sorted(ref) if k.startswith("left_")]
    mask = feeds["attention_mask"].astype(bool)
    try:
        r = m.analyze(feeds=feeds)
        worst = max(compare(a.array(), w, (mask, mask)) for a, w in zip(r.maps, refs))
    except Exception as e:
        return f"left-padded: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
    return f"left-padded {'ok' if worst <= TOL else 'MISMATCH'} ({worst:.1e})"


def generation(m, family: str, ref: dict) -> str:
    """attnviz's greedy generation from the unpadded row against transformers' ``generate``."""
    from attnviz import AttnvizError

    want = [int(t) for t in ref["gen_ids"]]
    f = {k: v[:1] for k, v in attnviz_feeds(family, ref).items()}
    if family == "seq2seq":
        f["decoder_input_ids"] = np.array([[want[0]]])  # the decoder start token transformers used
    try:
        r = m.analyze(feeds=f, generate=len(want) - (1 if family == "seq2seq" else f["input_ids"].shape[1]))
    except AttnvizError as e:
        return f"generate refused: {str(e)[:140]}"
    except Exception as e:
        tb = traceback.extract_tb(e.__traceback__)[-1]
        return (
            f"generate crash: {type(e).__name__}: {str(e).splitlines()[0][:120]} @ {Path(tb.filename).name}:{tb.lineno}"
        )
    head = [int(t) for t in f["decoder_input_ids" if family == "seq2seq" else "input_ids"][0]]
    got = head + [int(t) for t in r.info["generated_ids"]]
    how = r.info.get("generation", "?")
    return (
        f"generate ok ({how})"
        if got == want[: len(got)] and len(got) > len(head)
        else f"generate MISMATCH ({how}): {got} vs {want}"
    )


def export(arch: str, variants: list[str], out: Path, reuse: bool) -> None:
    import optimum_env

    todo = [v for v in variants if not (reuse and (out / f"{v}.json").exists())]
    if todo:
        optimum_env.run(VENV_SCRIPT.read_text(), arch, str(out), *todo, timeout=1800)


def table(rows: list[Row]) -> str:
    head = ["arch", "variant", "task [attn optimum loaded]", "sites found", "max abs diff", "verdict"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in r.cells()) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--archs", nargs="+", default=list(FAMILIES), choices=list(FAMILIES), metavar="ARCH")
    ap.add_argument(
        "--variants", nargs="+", default=["eager", "cli"], choices=["eager", "cli", "cfg-eager", "eager-nopast"]
    )
    ap.add_argument("--out", type=Path, default=Path("/tmp/attnviz-optimum-zoo"))
    ap.add_argument("--reuse", action="store_true", help="keep exports already in --out (re-check only)")
    a = ap.parse_args(argv)
    rows = []
    for arch in a.archs:
        out = a.out / arch
        t0 = time.perf_counter()
        variants = [v for v in a.variants if not (v == "eager-nopast" and FAMILIES[arch] in ("encoder", "vision"))]
        try:
            export(arch, variants, out, a.reuse)
        except Exception as e:
            rows.append(
                Row(arch, ",".join(variants), verdict=f"venv step failed: {str(e).strip().splitlines()[-1][:200]}")
            )
            print(rows[-1].cells(), flush=True)
            continue
        for v in variants:
            rows.append(check(arch, v, out))
            print(" | ".join(rows[-1].cells()), f"({time.perf_counter() - t0:.0f} s)", flush=True)
    text = table(rows)
    print(text)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "table.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
