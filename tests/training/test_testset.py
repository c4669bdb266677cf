"""``attnviz testset``: a translation task's held-out pairs with gold alignments, in the forms the gold tools read."""

import json

import pytest

from attnviz.cli import main
from attnviz.core import align


@pytest.mark.parametrize("task", ["translation-synthetic", "translation"])
def test_the_files_hold_the_held_out_pairs_and_their_links(tmp_path, capsys, task):
    from attnviz.training import data_translation as dt

    if task == "translation":
        pytest.importorskip("bible_alignments", reason="the Bible set comes from bible-alignments (test command)")
        want = dt.split_pairs(dt.load_bible()).test[:40]
    else:
        want = dt.synthetic_split().test[:40]
    out = tmp_path / "held"
    assert main(["testset", task, "--out", str(out), "--max-pairs", "40"]) == 0
    assert capsys.readouterr().out.strip().endswith(f"40 pairs, {sum(len(p.links) for p in want)} gold links")
    src = (out / "test.src").read_text(encoding="utf-8").splitlines()
    tgt = (out / "test.tgt").read_text(encoding="utf-8").splitlines()
    gold = align.read_pharaoh(out / "test.gold")
    rows = [json.loads(x) for x in (out / "test.jsonl").read_text(encoding="utf-8").splitlines()]
    assert src == [" ".join(p.src) for p in want] and tgt == [" ".join(p.tgt) for p in want]
    assert [s for s, _ in gold] == [set(p.links) for p in want] and not any(p for _, p in gold)
    assert [r["text"] for r in rows] == src and [r["en"] for r in rows] == tgt
    assert [align.parse_pharaoh(r["gold"])[0] for r in rows] == [s for s, _ in gold]
    for k, (s, _) in enumerate(gold):  # every index addresses a word of its own sentences
        align.check_gold((s, set()), len(src[k].split()), len(tgt[k].split()))


def test_it_never_replaces_files_and_bad_flags_are_one_line(tmp_path, capsys):
    out = tmp_path / "held"
    out.mkdir()
    (out / "test.gold").write_text("mine")
    assert main(["testset", "translation-synthetic", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already holds test.gold" in err[0]
    assert (out / "test.gold").read_text() == "mine" and sorted(p.name for p in out.iterdir()) == ["test.gold"]
    assert main(["testset", "translation-synthetic", "--out", str(out / "x"), "--max-pairs", "0"]) == 2
    assert "--max-pairs" in capsys.readouterr().err and not (out / "x").exists()
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["testset", "translation-synthetic", "--out", str(f)]) == 2
    assert "is a file" in capsys.readouterr().err and f.read_text() == "x"
