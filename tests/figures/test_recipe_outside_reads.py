"""A recipe reads no file outside its folder that is not of its entry's kind, and refuses it before opening it: a
recipe naming /etc/passwd or /proc/self/environ as its model had it hashed (read whole), then refused as "changed"
(and told whether it exists).  The reads are watched by an audit hook (``open`` events, every open of a file by
Python or ``os.open``) in a fresh interpreter running the command: the refusals come with no open of the file named.
The ordinary recipe, its maps file in another folder, is still drawn."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from figure_data import text_result

from attnviz.cli import main
from attnviz.core.io import save_npz

REPO = Path(__file__).resolve().parents[2]

# the commands in one interpreter, each one's opens of a path holding "secret" recorded by an audit hook
_WATCHED = """
import io, json, sys, contextlib
opened = []
def hook(event, args):
    if event == "open" and args and "secret" in str(args[0]):
        opened.append(str(args[0]))
sys.addaudithook(hook)
from attnviz.cli import main
out = []
for argv in json.loads(sys.argv[1]):
    del opened[:]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(argv)
    out.append([code, err.getvalue(), list(opened)])
print(json.dumps(out))
"""


def _watched(*argvs) -> list[tuple[int, str, list[str]]]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    done = subprocess.run(
        [sys.executable, "-c", _WATCHED, json.dumps([list(map(str, a)) for a in argvs])],
        env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return [tuple(x) for x in json.loads(done.stdout.strip().splitlines()[-1])]


def test_outside_names_of_another_kind_are_refused_unopened(tmp_path):
    outside, rec = tmp_path / "elsewhere", tmp_path / "figs"
    outside.mkdir()
    rec.mkdir()
    maps = save_npz(text_result(), outside / "m.npz")
    assert main(["figure", "--maps", str(maps), "--out", str(rec / "f.png")]) == 0
    written = json.loads((rec / "f.png.recipe.json").read_text())
    assert written["source"]["maps"]["path"] == "../elsewhere/m.npz"  # the ordinary recipe names a file elsewhere
    secret = outside / "secret"
    secret.write_bytes(b"not yours")
    (outside / "secret.txt").write_bytes(b"not yours")
    (rec / "img.png").symlink_to(outside / "secret")  # a name of the right kind, inside: its target is not
    sha = __import__("hashlib").sha256(b"not yours").hexdigest()

    def edited(name: str, section: str, key: str, entry: dict) -> Path:
        r = json.loads(json.dumps(written))
        r[section][key] = entry
        p = rec / name
        p.write_text(json.dumps(r))
        return p

    cases = {
        "absolute": edited("a.json", "source", "maps", {"path": str(secret), "sha256": sha}),
        "relative": edited("b.json", "inputs", "tokenizer", {"path": "../elsewhere/secret.txt", "sha256": sha}),
        "fallback": edited("c.json", "source", "maps", {"path": "gone.npz", "abs_path": str(secret), "sha256": sha}),
        "link": edited("d.json", "inputs", "image", {"path": "img.png", "sha256": sha}),
        "ordinary": rec / "f.png.recipe.json",
    }
    got = dict(zip(cases, _watched(*(["figure", "--recipe", p, "--out", rec / f"{k}.png"] for k, p in cases.items()))))
    for name in ("absolute", "relative", "fallback", "link"):
        code, err, opened = got[name]
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and opened == [], (name, got[name])
        assert "outside the recipe's folder and not" in lines[0] and "a recipe reads no other file" in lines[0]
        assert not (rec / f"{name}.png").exists()
    assert "names " + str(secret) in got["absolute"][1] and "(.npz)" in got["absolute"][1]
    assert "inputs.tokenizer names " in got["relative"][1] and "(.json)" in got["relative"][1]
    assert "source.maps names " + str(secret) in got["fallback"][1]  # path names nothing: its abs_path is checked
    assert "inputs.image names " in got["link"][1]  # where the link leads counts, not its name
    code, err, opened = got["ordinary"]
    assert code == 0 and (rec / "ordinary.png").is_file(), err


def test_the_watch_sees_a_read():
    """The audit hook sees what the recipe's hashing does to a file it reads (the measurement can fail)."""
    code = (
        "import sys; seen = []\n"
        "sys.addaudithook(lambda e, a: seen.append(str(a[0])) if e == 'open' and a and 'secret' in str(a[0]) else None)\n"
        "from attnviz.figures.recipe import file_sha256\n"
        "file_sha256(sys.argv[1]); print(seen)"
    )
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "secret.bin"
        p.write_bytes(b"x")
        env = dict(os.environ, PYTHONPATH=str(REPO))
        done = subprocess.run([sys.executable, "-c", code, str(p)], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert str(p) in done.stdout
