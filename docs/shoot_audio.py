"""Audio regions in the real window: screenshots and the window's own PDF export.

    xvfb-run -a -s "-screen 0 1920x1080x24" python docs/shoot_audio.py --out /tmp/attnviz-audio [--readme]

Opens the tests' tiny random-init Whisper (tests/optimum_env.py, exported once per machine) at 1400x900 on a 2.6 s
chirp with a pause (written with soundfile), teacher-forced on a five-word transcript; selects layer 1 head 2, the
word "w5" (`audio-word.png`, `audio-word.pdf`), then a click's frame at 1.60 s (`audio-frame.png`,
`audio-frame.pdf`: File ▸ Export view).  The model's weights are random: the curves show the view, not speech.
`--readme` copies the word shot to docs/screenshot-audio-regions.png.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # optimum_env
os.environ.setdefault("QT_QPA_PLATFORM", "xcb")
os.environ.setdefault("OMP_NUM_THREADS", "1")
RATE = 16000


def chirp(path: Path, seconds: float = 2.6) -> Path:
    import numpy as np
    import soundfile as sf

    t = np.arange(int(seconds * RATE)) / RATE
    x = (
        0.5
        * np.sin(2 * np.pi * (150 * t + (3500 - 150) / (2 * seconds) * t**2))
        * (0.6 + 0.4 * np.sin(2.6 * np.pi * t))
    )
    x[int(0.9 * RATE) : int(1.2 * RATE)] = 0.0
    sf.write(path, x.astype(np.float32), RATE)
    return path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--readme", action="store_true")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import optimum_env

    folder = optimum_env.cached_export("whisper") / "onnx"
    wav = chirp(args.out / "chirp.wav")

    from PySide6.QtCore import QEventLoop, QTimer

    from attnviz.gui.app import make_app
    from attnviz.gui.main_window import MainWindow

    app = make_app()

    def wait(until, ms: int = 60000) -> None:
        loop = QEventLoop()
        poll = QTimer()
        poll.timeout.connect(lambda: until() and loop.quit())
        poll.start(50)
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

    def settle(ms: int = 600) -> None:
        wait(lambda: False, ms)

    w = MainWindow(provider="cpu")
    w.resize(1400, 900)
    w.show()
    w.open_path(folder, audio=str(wav), text_pair="w3 w17 w5 w40 w28", generate=0)
    wait(lambda: w.session.result is not None)
    w.select_view("audio")
    w.session.select(mode="head", layer=1, head=2)
    for name, pick in (("audio-word", lambda: w.audio_regions.select_word(5)), ("audio-frame", None)):
        if pick is not None:
            pick()
        else:
            w.audio_regions.select_frame(int(1.6 / 0.02))
        settle()
        w.grab().save(str(args.out / f"{name}.png"))
        pdf = args.out / f"{name}.pdf"
        w.export_view(pdf)
        wait(lambda pdf=pdf: w.last_export == pdf)
    if w.last_error:
        print("error:", w.last_error)
        return 1
    w.close()
    app.processEvents()
    if args.readme:
        shutil.copyfile(args.out / "audio-word.png", ROOT / "docs" / "screenshot-audio-regions.png")
    print("wrote", ", ".join(sorted(p.name for p in args.out.iterdir())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
