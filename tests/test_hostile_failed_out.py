"""A run that fails (a full disk: here the file-size limit, which fails a write the same way) left the --out folder
it had made, empty or holding only partial files: the next run had to be pointed elsewhere (``train`` refused it as
"not empty").  Now a folder the command made is removed again when nothing in it resumes; a checkpoint the same
command resumes from is kept, and the error line says so; a folder the user made, and every file in it, stays."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from test_hostile_sweep21 import _cli_with_files_up_to, sha

from attnviz import AttnvizError
from attnviz.core.writes import KEPT

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "sequence-classification.onnx"


def _inputs(tmp_path: Path) -> tuple[Path, Path]:
    model = tmp_path / "model.onnx"
    shutil.copy(MODEL, model)
    texts = tmp_path / "t.txt"
    texts.write_text("7 2 9 5\n1 8 6 3\n")
    return model, texts


def _argv(command: str, model: Path, texts: Path) -> list[str]:
    return {
        "corpus": ["corpus", model, "--texts", texts],
        "compare": ["compare", model, model, "--texts", texts],
        "ablate": ["ablate", model, "--texts", texts, "--all-heads"],
        "testset": ["testset", "translation-synthetic"],
    }[command]


@pytest.mark.parametrize("command", ["corpus", "compare", "ablate", "testset"])
def test_a_failed_run_removes_the_out_folder_it_made_and_its_parents(tmp_path, command):
    model, texts = _inputs(tmp_path)
    before = sha(model, texts)
    out = tmp_path / "new" / "results"  # two levels made by the command
    done = _cli_with_files_up_to(3000, [*map(str, _argv(command, model, texts)), "--out", str(out)], tmp_path)
    assert done.returncode == 2 and "File too large" in done.stderr, done.stderr
    assert not (tmp_path / "new").exists()  # the folder and the parent it made are gone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "t.txt"] and sha(model, texts) == before


@pytest.mark.parametrize("command", ["corpus", "testset"])
def test_a_failed_run_keeps_the_users_own_folder_and_files(tmp_path, command):
    model, texts = _inputs(tmp_path)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes\n")
    done = _cli_with_files_up_to(3000, [*map(str, _argv(command, model, texts)), "--out", str(out)], tmp_path)
    assert done.returncode == 2 and "File too large" in done.stderr, done.stderr
    assert (out / "notes.txt").read_text() == "my notes\n"
    assert "partial results kept" not in done.stderr  # nothing of this run's to resume


def test_a_failed_training_run_removes_the_folder_it_made(tmp_path):
    out = tmp_path / "run"
    argv = ["train", "sequence-classification", "--preset", "tiny", "--steps", "2", "--quiet", "--out", str(out)]
    done = _cli_with_files_up_to(3000, argv, tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"attnviz: error: cannot write {out}")
    assert not out.exists()  # its config.json alone made the next `train --out run` refuse it as not empty


def test_a_run_that_fails_after_its_checkpoint_keeps_it_says_so_and_the_same_command_resumes(tmp_path, monkeypatch):
    from attnviz.corpus import output
    from attnviz.corpus.run import CorpusConfig, run_corpus

    model, texts = _inputs(tmp_path)
    out = tmp_path / "results"
    cfg = CorpusConfig(model=str(model), out=str(out), texts=str(texts), workers=1, batch_size=1, progress=False)
    written = output.write

    def full_disk(folder, *a, **kw):  # every batch folded and checkpointed; the results cannot be written
        raise AttnvizError(f"cannot write {Path(folder) / 'heads.parquet'}: No space left on device")

    monkeypatch.setattr(output, "write", full_disk)
    with pytest.raises(AttnvizError) as e:
        run_corpus(cfg)
    assert str(e.value) == f"cannot write {out / 'heads.parquet'}: No space left on device; {KEPT.format(out)}"
    assert [p.name for p in out.iterdir()] == ["checkpoint.npz"]
    monkeypatch.setattr(output, "write", written)
    run_corpus(cfg)  # the same command, with space again: the items checkpointed are not run again
    run = json.loads((out / "run.json").read_text())
    assert run["items"] == 2 and run["resumed_from_items"] >= 1
    assert not (out / "checkpoint.npz").exists() and os.path.isfile(out / "heads.parquet")
