"""What ``MapAssembler.maps()`` (runtime/generate.py) copies of a Whisper generation: the sites whose prompt part
and loop rows are copied into one new buffer, their bytes, and the parent's tracemalloc peak over the generation.

    PYTHONPATH=$PWD python bench/whisper_assembly_copy.py ~/.cache/attnviz-tests/export-whisper-*/onnx 60
    ATTNVIZ_INPROCESS=1 PYTHONPATH=$PWD python bench/whisper_assembly_copy.py FOLDER 60

FOLDER: an optimum Whisper export (the tests build a tiny random-init one: tests/optimum_env.py); the second
generation is measured (the first learns the shapes the one-request path needs).
"""

from __future__ import annotations

import os
import sys
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from one_request import open_without_eos  # the tests' helper: every run makes all its tokens

from attnviz.runtime import generate


def main() -> None:
    folder, steps = sys.argv[1], int(sys.argv[2])
    m = open_without_eos(folder)
    rate = 16000
    t = np.arange(int(2.5 * rate)) / rate
    clip = (0.5 * np.sin(2 * np.pi * (100 * t + 3900 / 5 * t**2))).astype(np.float32)
    copied: list[tuple[int, int]] = []
    assemble = generate.MapAssembler.maps

    def spy(self):
        out = assemble(self)
        copied.extend((i, out[i].nbytes) for i, parts in self.parts.items() if len(parts) > 1)
        return out

    generate.MapAssembler.maps = spy  # type: ignore[method-assign]
    m.analyze(audio=clip, generate=steps)
    m._enc_cache = None
    copied.clear()
    tracemalloc.start()
    r = m.analyze(audio=clip, generate=steps)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    cross = [i for i, s in enumerate(r.sites) if s.kind == "cross"]
    print("in-process" if os.environ.get("ATTNVIZ_INPROCESS") else "isolated", len(r.info["generated_ids"]), "ids")
    print("cross sites", [(r.sites[i].label, r.maps[i].shape) for i in cross])
    print(
        f"cross maps {sum(r.maps[i].nbytes for i in cross) / 2**10:.0f} KiB, all maps "
        f"{sum(x.nbytes for x in r.maps) / 2**10:.0f} KiB; assembled (copied) {len(copied)} sites, "
        f"{sum(n for _, n in copied) / 2**10:.0f} KiB; parent tracemalloc peak {peak / 2**10:.0f} KiB"
    )


if __name__ == "__main__":
    main()
