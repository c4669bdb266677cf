"""``attnviz corpus REPO --images DIR`` on a whole vision–language Hub folder (corpus/vlm_folder.py): Idefics3's
runs on the folder's vision encoder (the tables of ``attnviz corpus REPO/onnx/vision_encoder.onnx``, bit for bit,
and run.json names that file), said in one line; a family whose vision file does not run alone through its
processor (LLaVA) is one line naming the file to give, exit 2, and nothing written."""

from __future__ import annotations

import shlex
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import vlm_build as vb

from attnviz.cli import main
from attnviz.core.untrusted import read_json

RUN = ["--batch-size", "2", "--workers", "1", "--provider", "cpu", "--no-progress"]


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    d = tmp_path_factory.mktemp("vlm_folder_imgs")
    vb.random_image(d / "wide.png", 40, 100, 0)
    vb.random_image(d / "square.png", 70, 64, 1)
    return d


def test_an_idefics3_folder_runs_its_vision_encoder(idefics3_repo, images, tmp_path, capsys):
    vision = idefics3_repo / "onnx" / "vision_encoder.onnx"
    assert main(["corpus", str(vision), "--images", str(images), "--out", str(tmp_path / "file"), *RUN]) == 0
    capsys.readouterr()
    assert main(["corpus", str(idefics3_repo), "--images", str(images), "--out", str(tmp_path / "folder"), *RUN]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"the corpus runs on its vision encoder, {vision}" in err[0], err
    for name in ("heads.parquet", "examples.parquet"):
        np.testing.assert_equal(
            pq.read_table(tmp_path / "folder" / name).to_pylist(), pq.read_table(tmp_path / "file" / name).to_pylist()
        )
    run = read_json(tmp_path / "folder" / "run.json", "run.json")
    assert run["model"] == str(vision.resolve()) and run["model_kind"] == "vision"


def test_the_onnx_folder_itself_runs_its_vision_encoder(idefics3_repo, images, tmp_path, capsys):
    """``REPO/onnx`` (where the files are) is the same folder, its config.json in the repository above."""
    assert main(["corpus", str(idefics3_repo / "onnx"), "--images", str(images), "--out", str(tmp_path), *RUN]) == 0
    run = read_json(tmp_path / "run.json", "run.json")
    assert run["model"] == str((idefics3_repo / "onnx" / "vision_encoder.onnx").resolve())


def test_a_llava_folder_is_one_line_naming_the_file(llava_repo, images, tmp_path, capsys):
    code = main(["corpus", str(llava_repo), "--images", str(images), "--out", str(tmp_path / "o"), *RUN])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    vision = llava_repo / "onnx" / "vision_encoder.onnx"
    assert "(llava) is a vision–language model" in err[0] and "only for idefics3" in err[0]
    assert err[0].endswith(f"attnviz corpus {shlex.quote(str(vision))} --images {shlex.quote(str(images))}")
    assert not (tmp_path / "o").exists()


def test_a_folder_of_quantized_files_only_names_them(idefics3_repo, images, tmp_path, capsys):
    """No full-precision set, and the corpus has no --variant: the vision files there, to give one."""
    repo = tmp_path / "repo"
    shutil.copytree(idefics3_repo, repo)
    for f in sorted((repo / "onnx").glob("*.onnx")):
        f.rename(f.with_name(f.stem + "_q4.onnx"))
    code = main(["corpus", str(repo), "--images", str(images), "--out", str(tmp_path / "o"), *RUN])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].endswith(
        f"no full-precision vision_encoder.onnx; give the vision encoder to run the corpus on: "
        f"{repo / 'onnx' / 'vision_encoder_q4.onnx'}"
    )
    assert not (tmp_path / "o").exists()


def test_texts_on_a_vlm_folder_are_refused_as_before(idefics3_repo, tmp_path, capsys):
    texts = tmp_path / "t.txt"
    texts.write_text("a cat\n")
    code = main(["corpus", str(idefics3_repo), "--texts", str(texts), "--out", str(tmp_path / "o"), *RUN])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "is a vision-decoder model" in err[0]
