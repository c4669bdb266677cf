"""The README's "Comparing and ablating heads" images, regenerated from the shipped translation demo.

    python docs/shoot_compare_ablate.py                        # docs/figure-compare.png (+ .pdf beside it in --work)
    xvfb-run -a -s "-screen 0 1400x900x24" python docs/shoot_compare_ablate.py --window   # + screenshot-ablation.png

1. An int8 copy of models/translation.onnx (onnxruntime.quantization.quantize_dynamic) into --work, then
   ``attnviz compare`` of the two on the README's verse with ``--figure``: the head whose JS divergence is largest,
   as A | B | A − B (docs/figure-compare.png; the PDF goes to --work).  The commands are printed as run.
2. ``--window``: the real window (xcb under Xvfb) on the same verse generating 8 words, decoder cross 2:1 switched
   off through its Overview context menu, grabbed with the "Heads switched off" panel (docs/screenshot-ablation.png).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "models" / "translation.onnx"
GREEK = "μακάριοι οἱ πτωχοὶ τῷ πνεύματι"
ENGLISH = "Blessed are the poor in spirit"


def attnviz(*argv: str) -> str:
    """Run ``attnviz ARGV`` from this checkout, printing the command as a user would type it and its output."""
    print("$ attnviz " + " ".join(shlex.quote(a) for a in argv))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "attnviz.cli", *argv], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    print(out, end="")
    return out


def compare_figure(work: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    q = work / "translation_int8.onnx"
    quantize_dynamic(str(DEMO), str(q), weight_type=QuantType.QInt8)
    print(f"quantize_dynamic('models/translation.onnx', '{q}')")
    common = ["--text", GREEK, "--text-pair", ENGLISH, "--provider", "cpu"]
    attnviz(
        "compare",
        "models/translation.onnx",
        str(q),
        *common,
        "--out",
        str(work / "cmp"),
        "--figure",
        str(work / "figure-compare.pdf"),
    )
    attnviz(
        "compare",
        "models/translation.onnx",
        str(q),
        *common,
        "--out",
        str(work / "cmp"),
        "--figure",
        "docs/figure-compare.png",
    )
    subprocess.run(
        ["pdftoppm", "-png", "-r", "120", str(work / "figure-compare.pdf"), str(work / "pdf-page")], check=False
    )


def ablation_window(out: Path) -> None:
    os.environ.setdefault("QT_QPA_PLATFORM", "xcb")
    sys.path.insert(0, str(ROOT))
    from PySide6.QtCore import QSettings, Qt
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    from attnviz.gui.ablation import OFF_TEXT
    from attnviz.gui.main_window import MainWindow

    app = QApplication.instance() or QApplication(sys.argv)
    with tempfile.TemporaryDirectory() as d:
        w = MainWindow(settings=QSettings(str(Path(d) / "s.ini"), QSettings.Format.IniFormat))
        w.resize(1400, 900)
        w.show()

        def wait(done, seconds=120.0):
            t0 = time.monotonic()
            while not done():
                app.processEvents()
                time.sleep(0.02)
                if time.monotonic() - t0 > seconds:
                    raise SystemExit("the window did not get there in time")

        shown: list[int] = []
        w.result_shown.connect(lambda: shown.append(1))
        # the README's relative path, so the sidebar's file row shows no checkout's folder
        os.chdir(ROOT)
        w.open_path(str(DEMO.relative_to(ROOT)), text=GREEK, generate=8)
        wait(lambda: shown)
        cross = next(i for i, b in enumerate(w.session.blocks) if (b.stack, b.kind) == ("decoder", "cross"))
        ov = w.overview
        wait(lambda: bool(ov.cells))
        pos = ov.widget_pos_of(cross, 2, 1)
        QTest.mouseClick(ov.glw.viewport(), Qt.MouseButton.RightButton, Qt.KeyboardModifier.NoModifier, pos)
        wait(lambda: w.ablation.menu is not None and w.ablation.menu.isVisible())
        next(a for a in w.ablation.menu.actions() if a.text() == OFF_TEXT).trigger()
        wait(lambda: w.session.ablation_outcome is not None and bool(w.session.ablation_outcome.off))
        for _ in range(30):
            app.processEvents()
            time.sleep(0.03)
        w.grab().save(str(out))
        print("\n".join(w.session.ablation_outcome.lines()))
        print("saved", out)
        w.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, help="folder for the int8 copy, the results and the PDF (default: a temp one)")
    p.add_argument("--window", action="store_true", help="also take docs/screenshot-ablation.png (needs X: Xvfb)")
    args = p.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="attnviz-compare-"))
    work.mkdir(parents=True, exist_ok=True)
    compare_figure(work)
    if args.window:
        ablation_window(ROOT / "docs" / "screenshot-ablation.png")


if __name__ == "__main__":
    main()
