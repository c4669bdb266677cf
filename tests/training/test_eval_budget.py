"""Finding 8 of issue 9: ``attnviz eval`` trusted the sizes in a model's ``attnviz.config`` metadata (14.9 GiB).

A shipped demo model is copied and its metadata rewritten with absurd sizes; eval must refuse in one line with
exit 2 before building anything of those sizes, naming the ``ATTNVIZ_MAX_*`` variable that raises the cap, and
leave the file's bytes alone.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")

from attnviz.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _with_config(tmp_path: Path, demo: str, model: dict | None = None, train: dict | None = None) -> Path:
    path = tmp_path / f"{demo}.onnx"
    shutil.copy(ROOT / "models" / f"{demo}.onnx", path)
    m = onnx.load(str(path))
    for p in m.metadata_props:
        if p.key == "attnviz.config":
            cfg = json.loads(p.value)
            cfg["model"].update(model or {})
            cfg["train"].update(train or {})
            p.value = json.dumps(cfg)
    onnx.save(m, str(path))
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    "demo, model, train, env",
    [
        ("sequence-classification", {}, {"n_test": 10**9}, "ATTNVIZ_MAX_EXAMPLES"),
        ("sequence-classification", {}, {"n_train": 10**12}, "ATTNVIZ_MAX_EXAMPLES"),
        ("sequence-classification", {"max_len": 10**6}, {}, "ATTNVIZ_MAX_TOKENS"),
        ("sequence-classification", {"n_heads": 4096, "d_model": 4096, "max_len": 2048}, {}, "ATTNVIZ_MAX_EVAL_MB"),
        ("sequence-classification", {"vocab_size": 10**9}, {}, "ATTNVIZ_MAX_EVAL_MB"),
        ("vit-classification", {"image_size": 10**5, "patch_size": 10**5}, {}, "ATTNVIZ_MAX_PIXELS"),
        ("vit-classification", {"patch_size": 1, "image_size": 1024}, {}, "ATTNVIZ_MAX_TOKENS"),
    ],
)
def test_absurd_sizes_refused_before_allocating(tmp_path, capsys, demo, model, train, env):
    path = _with_config(tmp_path, demo, model, train)
    before = _sha(path)
    assert main(["eval", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnviz: error: ") and "\n" not in err, err
    assert env in err and "over the limit" in err
    assert _sha(path) == before


@pytest.mark.parametrize(
    "model, train, named",
    [
        ({"n_heads": 0}, {}, "n_heads=0"),  # would divide by zero in ModelConfig.validate
        ({}, {"n_test": "1e12"}, "n_test='1e12'"),
        ({}, {"n_test": -5}, "n_test=-5"),
        ({"max_len": 16.5}, {}, "max_len=16.5"),
        ({}, {"align_heads": 7}, "malformed"),
    ],
)
def test_malformed_sizes_one_line(tmp_path, capsys, model, train, named):
    path = _with_config(tmp_path, "sequence-classification", model, train)
    before = _sha(path)
    assert main(["eval", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnviz: error: ") and "\n" not in err, err
    assert named in err
    assert _sha(path) == before


def test_limit_raised_by_the_named_variable(tmp_path, capsys, monkeypatch):
    # a cap is a default, not a wall: the variable named in the message lets the check pass (the run then
    # fails on the graph, whose real max_len is 16, or scores; either way it is past the size check)
    path = _with_config(tmp_path, "sequence-classification", train={"n_test": 5, "n_train": 1_500_000})
    assert main(["eval", str(path)]) == 2
    assert "ATTNVIZ_MAX_EXAMPLES=1500005" in capsys.readouterr().err
    monkeypatch.setenv("ATTNVIZ_MAX_EXAMPLES", "1500005")
    from attnviz.training.export import read_config

    _, _, tcfg, _ = read_config(path)
    assert tcfg.n_train == 1_500_000


def test_refusal_allocates_nothing_big(tmp_path):
    """In a child process: the peak resident size of a refused eval stays far below what the metadata asks."""
    path = _with_config(tmp_path, "sequence-classification", {"max_len": 4096, "n_heads": 64}, {"n_test": 10**6})
    code = (
        "import sys\n"
        "from attnviz.cli import main\n"
        f"rc = main(['eval', {str(path)!r}])\n"
        "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')))\n"
        "sys.exit(rc)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "attnviz: error:" in r.stderr
    peak_mb = int(r.stdout.split()[-1]) / 1024  # VmHWM in kB: this process's peak (ru_maxrss counts the parent's)
    # the metadata asks for 10^6 examples x 4097^2 alignment bytes alone (~16 TB); imports are ~0.3 GB
    assert peak_mb < 1024, peak_mb
