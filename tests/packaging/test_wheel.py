"""The built wheel carries the demo models, their sample inputs and the licence, and opens a demo outside the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# what a build needs; copied so the build never writes build/ or *.egg-info into the checkout
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "LICENSE", "README.md", "attnviz", "models", "resources")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        p = ROOT / name
        if p.is_dir():
            shutil.copytree(p, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(p, src / name)
    out = tmp_path_factory.mktemp("dist")
    # --no-build-isolation: the machine has no index to fetch setuptools from in a clean build env
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    (whl,) = out.glob("attnviz-*.whl")
    return whl


def test_wheel_carries_demos_samples_and_licence(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    demos = sorted(p.name for p in (ROOT / "models").glob("*.onnx"))
    assert demos, "the checkout has no demo models"
    for name in demos:
        info = zipfile.ZipFile(wheel).getinfo(f"attnviz/demos/{name}")
        assert info.file_size == (ROOT / "models" / name).stat().st_size  # the real file, not a pointer
    for p in (ROOT / "resources" / "samples").iterdir():
        assert f"attnviz/demos/resources/samples/{p.name}" in names
    speech = ROOT / "models" / "spoken-digits"  # the speech demo is a folder: every file of it, its clip included
    for p in speech.iterdir() if speech.is_dir() else ():
        info = zipfile.ZipFile(wheel).getinfo(f"attnviz/demos/spoken-digits/{p.name}")
        assert info.file_size == p.stat().st_size
    lic = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    assert lic and b"MIT License" in zipfile.ZipFile(wheel).read(lic[0])
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: MIT" in meta
    assert "Requires-Dist: onnxruntime>=" in meta  # the CPU build by default ...
    assert 'Requires-Dist: onnxruntime-gpu>=1.20; extra == "gpu"' in meta  # ... CUDA as an extra


@pytest.mark.slow
def test_installed_wheel_opens_the_demos_outside_the_checkout(wheel, tmp_path):
    import child_venv

    venv = tmp_path / "venv"
    # sees the test run's packages (numpy, onnxruntime, PySide6) even when the run itself is in a venv; the wheel
    # installed into it comes first on its path, so the checkout's editable attnviz stays out
    # no pip of its own (ensurepip: 4 s of CPU): the running pip installs into it (``pip --python``, pip >= 22.3)
    py = child_venv.create(venv, with_pip=False)
    bindir = py.parent
    r = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    work = tmp_path / "elsewhere"  # cwd outside the checkout, so nothing is imported or found from it
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(QT_QPA_PLATFORM="offscreen", ATTNVIZ_FORCE_CPU="1")
    where = subprocess.run(
        [str(py), "-c", "import attnviz.gui.app as a; print(a.__file__); print(a.demo_model())"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    app_file, demo = where.stdout.split()
    assert Path(app_file).is_relative_to(venv) and Path(demo).is_relative_to(venv), where.stdout
    assert Path(demo).name == "translation.onnx"
    # plain `attnviz` (the bundled demo) and the captioning demo, whose sample image is packaged beside it
    for extra in ([], [str(Path(demo).with_name("captioning.onnx"))]):
        shot = work / f"shot{len(extra)}.png"
        r = subprocess.run(
            [str(bindir / "attnviz"), *extra, "--screenshot", str(shot)],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"saved {shot}" in r.stdout
        from PIL import Image

        img = Image.open(shot)
        assert img.size == (1400, 900) and len(img.convert("RGB").getcolors(1 << 24)) > 50  # a drawn window, not blank
