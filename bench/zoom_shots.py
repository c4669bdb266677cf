"""Screenshots of the window's Head map of a long map, whole and zoomed (the zoom driven through the view's own
ViewBox, as a mouse wheel or drag-zoom sets it), each taken once the re-pool for that view has drawn.

    xvfb-run -a -s "-screen 0 1600x1000x24" python bench/zoom_shots.py /tmp/long8k.npz /tmp/shots \\
        --region 4000 4100 4000 4100 --region 3000 5048 3000 5048

Writes ``whole.png`` and ``zoom_<k0>_<k1>_<q0>_<q1>.png`` under the folder, and prints each view's runs and the
colour bar's words.  ``--region K0 K1 Q0 Q1``: keys K0..K1 x rows Q0..Q1 (positions).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("npz", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--region", type=float, nargs=4, action="append", default=[], metavar=("K0", "K1", "Q0", "Q1"))
    args = ap.parse_args(argv)

    from PySide6.QtCore import QEventLoop, QRectF, QSettings, QTimer

    from attnviz.core.io import load_npz
    from attnviz.gui.app import make_app
    from attnviz.gui.export import export_widget
    from attnviz.gui.main_window import MainWindow

    app = make_app()
    win = MainWindow(opener=lambda *a, **k: None, settings=QSettings(os.devnull, QSettings.IniFormat))
    win.resize(1600, 1000)
    win.show()
    win._show_result(load_npz(args.npz))
    win.select_view("head")
    hm = win.head_map.heatmap

    def settle(ms: int = 600) -> None:  # let the window lay out, the range settle and the re-pool draw
        loop = QEventLoop()
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

    def shot(name: str) -> None:
        settle()
        words = hm.colorbar.axis.labelText  # (getattr: the script also runs on a tree from before the re-pool)
        print(f"{name}: region {getattr(hm, 'region', None)}, image {hm.image.image.shape}, bar: {words}")
        export_widget(win, args.out / f"{name}.png")

    args.out.mkdir(parents=True, exist_ok=True)
    shot("whole")
    for k0, k1, q0, q1 in args.region:
        hm.vb.setRange(QRectF(k0, q0, k1 - k0, q1 - q0), padding=0)
        shot(f"zoom_{int(k0)}_{int(k1)}_{int(q0)}_{int(q1)}")
    win.close()
    app.quit()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
