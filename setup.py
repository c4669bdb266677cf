"""Ships the demo models as package data without moving them out of ``models/``.

``models/*.onnx`` (+ README, + the speech demo's folder ``models/spoken-digits/``) and ``resources/samples/`` stay where the repository layout puts them; a wheel
build copies them to ``attnviz/demos/`` (samples under ``attnviz/demos/resources/samples/`` so the models'
relative ``attnviz.sample`` paths resolve). An editable install needs no copy: ``attnviz.gui.app.models_dir``
falls back to the checkout's ``models/``. Everything else lives in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# (source folder, glob, destination inside the package)
DEMO_FILES = (
    ("models", "*.onnx", "attnviz/demos"),
    ("models", "README.md", "attnviz/demos"),
    ("models/spoken-digits", "*", "attnviz/demos/spoken-digits"),  # the speech demo is a folder
    ("resources/samples", "*", "attnviz/demos/resources/samples"),
)


class BuildPyWithDemos(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):  # the checkout's models/ is used in place
            return
        for src, pattern, dest in DEMO_FILES:
            out = Path(self.build_lib) / dest
            out.mkdir(parents=True, exist_ok=True)
            for f in sorted((ROOT / src).glob(pattern)):
                if f.is_file():
                    shutil.copy2(f, out / f.name)


setup(cmdclass={"build_py": BuildPyWithDemos})
