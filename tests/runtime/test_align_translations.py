"""``attnviz align`` without ``--tgt``: the model's own translations (greedy, or the best of a beam search) on the
shipped Greek -> English demo, checked against two established paths: ``attnviz extract --generate N [--beams K]``
(the tokens it generates, read from its .npz and decoded by the ``tokenizers`` library itself) and the
teacher-forced ``attnviz align --tgt`` fed the translations file (the links of the same words)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import onnx
import pytest

from attnviz.cli import main

MODEL = Path(__file__).resolve().parents[2] / "models" / "translation.onnx"
LINES = [  # Matthew 7:1, 10:36, 12:9, 5:8 (the bible-alignments test split's shortest verses)
    "Μὴ κρίνετε ἵνα μὴ κριθῆτε",
    "καὶ ἐχθροὶ τοῦ ἀνθρώπου οἱ οἰκιακοὶ αὐτοῦ",
    "Καὶ μεταβὰς ἐκεῖθεν ἦλθεν εἰς τὴν συναγωγὴν αὐτῶν",
    "μακάριοι οἱ καθαροὶ τῇ καρδίᾳ ὅτι αὐτοὶ τὸν θεὸν ὄψονται",
]
EMPTY = "[BOS]"  # a source of the start token alone: the demo chooses EOS first (greedy and beams alike)


@pytest.fixture(scope="module")
def tokenizers_of_demo():
    """The demo's own tokenizers and EOS id, straight from its metadata (not through attnviz)."""
    from tokenizers import Tokenizer

    meta = {p.key: p.value for p in onnx.load(str(MODEL), load_external_data=False).metadata_props}
    src = Tokenizer.from_str(meta["attnviz.tokenizer"])
    tgt = Tokenizer.from_str(meta["attnviz.target_tokenizer"])
    return src, tgt, int(json.loads(meta["attnviz.special"])["eos"])


def _extract_ids(line: str, steps: int, beams: int, out: Path, capsys) -> list[int]:
    """The ids ``attnviz extract --generate`` generates for ``line`` (with --beams: the best hypothesis')."""
    import numpy as np

    extra = ["--beams", str(beams)] if beams > 1 else []
    argv = ["extract", str(MODEL), "--text", line, "--generate", str(steps), *extra, "--provider", "cpu"]
    assert main([*argv, "--out", str(out)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    with np.load(out) as z:
        info = json.loads(str(z["info"])) if "info" in z else None
    assert info is not None
    return [int(t) for t in (info["beams"][0]["ids"] if beams > 1 else info["generated_ids"])]


@pytest.mark.parametrize("beams", [1, 3])
def test_translations_are_the_generation_and_links_the_teacher_forced_ones(tmp_path, capsys, tokenizers_of_demo, beams):
    src_tok, tgt_tok, eos = tokenizers_of_demo
    lines = [*LINES[:2], EMPTY, *LINES[2:]]
    src = tmp_path / "nt.src"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "nt.align"
    # greedy: the default length (2 x the source tokens + 10: these verses end well within it); beams: --generate 30
    extra = ["--beams", str(beams), "--generate", "30"] if beams > 1 else []
    argv = ["align", str(MODEL), "--src", str(src), "--out", str(out), "--no-progress", "--provider", "cpu"]
    assert main([*argv, *extra]) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    trans = tmp_path / "nt.align.translations.txt"
    assert f"wrote {trans}" in printed
    got = trans.read_text(encoding="utf-8").split("\n")
    links = out.read_text().split("\n")
    assert got[-1] == links[-1] == "" and len(got) == len(links) == len(lines) + 1  # one line each, newline-ended

    # (a) each line: what extract generates for it, decoded by the tokenizer, split into words
    for k, line in enumerate(lines):
        steps = 30 if beams > 1 else 2 * len(src_tok.encode(line).ids) + 10
        ids = _extract_ids(line, steps, beams, tmp_path / f"m{k}.npz", capsys)
        assert ids and ids[-1] == eos, ids  # these verses end within the steps
        pieces = ids[:-1]
        words = tgt_tok.decode(pieces, skip_special_tokens=False).split()
        assert got[k] == " ".join(words)
        if line == EMPTY:
            assert not pieces and got[k] == links[k] == ""  # EOS at once: an empty line in both files
            continue
        # the words are the generated pieces themselves: encoding them gives back exactly those ids
        assert tgt_tok.encode(words, is_pretokenized=True, add_special_tokens=False).ids == pieces

    # (b) the links: those the teacher-forced path computes for the translations file fed back as --tgt as it is
    # (its empty line, the EOS at once, an empty alignment line there too)
    forced = tmp_path / "forced.align"
    argv = ["align", str(MODEL), "--src", str(src), "--tgt", str(trans), "--out", str(forced), "--provider", "cpu"]
    assert main(argv) == 0, capsys.readouterr().err
    assert links == forced.read_text().split("\n")
    assert all(links[k] for k, line in enumerate(lines) if line != EMPTY)  # every translated line has links


def test_a_translation_cut_short_is_said_and_aligned_as_its_words(tmp_path, capsys):
    """--generate 4: no verse ends; each one's last piece was never read back (no row of its own), so its words run
    teacher-forced, and the links are again those of ``--tgt`` fed the translations."""
    src = tmp_path / "a.src"
    src.write_text("\n".join(LINES[:2]) + "\n", encoding="utf-8")
    out, forced = tmp_path / "a.txt", tmp_path / "forced.txt"
    argv = ["align", str(MODEL), "--src", str(src), "--out", str(out), "--generate", "4", "--no-progress"]
    assert main(argv) == 0, capsys.readouterr().err
    assert "2 translations stopped at the step limit before ending" in capsys.readouterr().out
    trans = tmp_path / "a.translations.txt"
    assert all(1 <= len(t.split()) <= 4 for t in trans.read_text(encoding="utf-8").splitlines())
    assert main(["align", str(MODEL), "--src", str(src), "--tgt", str(trans), "--out", str(forced)]) == 0
    assert out.read_text() == forced.read_text()


def test_a_translation_as_long_as_the_positions_allow_is_still_aligned(tmp_path, capsys, tokenizers_of_demo):
    """A source that makes the demo repeat itself to its 128 positions: --generate 1000 stops at 127 steps (the
    teacher-forced run of a translation cut short reads [start] + its pieces: 128), not at an error."""
    _, tgt_tok, _ = tokenizers_of_demo
    src = tmp_path / "a.src"
    src.write_text(" ".join(["καὶ ὁ θεὸς"] * 40) + "\n", encoding="utf-8")
    out = tmp_path / "a.txt"
    argv = ["align", str(MODEL), "--src", str(src), "--out", str(out), "--generate", "1000", "--no-progress"]
    assert main(argv) == 0, capsys.readouterr().err
    assert "127 steps are all the model's positions (and the step cap) allow" in capsys.readouterr().out
    words = (tmp_path / "a.translations.txt").read_text(encoding="utf-8").split()
    assert len(tgt_tok.encode(words, is_pretokenized=True, add_special_tokens=False).ids) == 127
    assert len(out.read_text().split()) == len(words)  # one link a word (none is punctuation-skipped here)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--gold", "{gold}"], "--gold scores alignments of given targets; give --tgt FILE with it"),
        (["--beams", "0"], "--beams 0: give a number of beams from 1 to 64"),
        (["--generate", "0"], "--generate 0: give at least 1 new token a translation"),
        (["--generate", "5000"], "--generate: 5,000 steps is over the limit"),
        (["--tgt", "{src}", "--translations", "{tmp}/t.txt"], "--translations is for the model's own translations"),
        (["--tgt", "{src}", "--beams", "2"], "--beams is for the model's own translations"),
        (["--translations", "{tmp}/o.txt"], "the same file as --out"),
        (["--translations", "{src}"], "would overwrite an input file"),
        (["--translations", "{tmp}/no/t.txt"], "folder"),
        (["--translations", "{tmp}/fifo"], "cannot write {tmp}/fifo: it is a device, pipe or socket"),
    ],
)
def test_refusals_are_one_line_and_write_nothing(tmp_path, capsys, extra, message):
    src = tmp_path / "a.src"
    src.write_text(LINES[0] + "\n", encoding="utf-8")
    gold = tmp_path / "a.gold"
    gold.write_text("0-0\n")
    os.mkfifo(tmp_path / "fifo")  # a pipe as --translations: refused before the translating, --out not written
    message = message.format(tmp=tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    extra = [a.format(gold=gold, src=src, tmp=tmp_path) for a in extra]
    rc = main(["align", str(MODEL), "--src", str(src), "--out", str(tmp_path / "o.txt"), *extra])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("attnviz: error: ") and message in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert src.read_text(encoding="utf-8") == LINES[0] + "\n"


TARGETS = ["Do not judge , so that you are not judged", "and a man 's enemies are his household"]


@pytest.mark.parametrize("given_targets", [False, True])
def test_an_empty_line_gives_an_empty_alignment_line_and_runs_nothing(tmp_path, capsys, monkeypatch, given_targets):
    """A blank line (a parallel corpus's, or a translation that was EOS at once fed back as --tgt) gives an empty
    alignment line, as fast_align and awesome-align write one: the files keep one line per --src line, every other
    line is what the same pairs without the blank ones give, the blank pairs never run, and a note names them."""
    from attnviz.runtime.align import Aligner

    ran = []
    for name in ("run", "translate"):  # the real methods, counted
        real = getattr(Aligner, name)
        monkeypatch.setattr(Aligner, name, lambda self, *a, _real=real, **k: ran.append(1) or _real(self, *a, **k))

    def align(src_lines, tgt_lines, tag):
        src, out = tmp_path / f"{tag}.src", tmp_path / f"{tag}.align"
        src.write_text("".join(f"{x}\n" for x in src_lines), encoding="utf-8")
        extra = ["--no-progress"]
        if tgt_lines is not None:
            (tmp_path / f"{tag}.tgt").write_text("".join(f"{x}\n" for x in tgt_lines), encoding="utf-8")
            extra = ["--tgt", str(tmp_path / f"{tag}.tgt")]
        ran.clear()
        assert main(["align", str(MODEL), "--src", str(src), "--out", str(out), *extra]) == 0
        err = capsys.readouterr().err
        files = [out] if tgt_lines is not None else [out, tmp_path / f"{tag}.align.translations.txt"]
        return [f.read_text(encoding="utf-8").split("\n") for f in files], len(ran), err

    if given_targets:  # line 2's target and line 3's source blank (a space or two is blank too)
        src_lines, tgt_lines, blank = [LINES[0], LINES[1], "  "], [TARGETS[0], "", TARGETS[1]], [1, 2]
    else:
        src_lines, tgt_lines, blank = [LINES[0], "", LINES[1]], None, [1]
    keep = [k for k in range(3) if k not in blank]
    got, runs, err = align(src_lines, tgt_lines, "blank")
    want, _, _ = align([src_lines[k] for k in keep], None if tgt_lines is None else [tgt_lines[k] for k in keep], "w")
    assert runs == len(keep)  # the blank pairs never ran
    for g, w in zip(got, want):
        assert len(g) == 4 and g[-1] == ""  # three lines, newline-ended
        assert [g[k] for k in blank] == [""] * len(blank)
        assert [g[k] for k in keep] == w[:-1] and all(w[:-1])
    lines = ", ".join(str(k + 1) for k in blank)
    assert f"attnviz: note: {len(blank)} line{'s' if len(blank) > 1 else ''} ({lines}) had an empty source" in err


def test_a_blank_pairs_gold_line_must_be_blank(tmp_path, capsys):
    """--gold with a blank pair: its gold line empty, the AER is that of the other pairs (a link there points past
    the words: one line naming it)."""
    src, tgt, gold, out = (tmp_path / n for n in ("a.src", "a.tgt", "a.gold", "a.align"))
    src.write_text(f"{LINES[0]}\n{LINES[1]}\n", encoding="utf-8")
    tgt.write_text(f"{TARGETS[0]}\n\n", encoding="utf-8")
    argv = ["align", str(MODEL), "--src", str(src), "--tgt", str(tgt), "--gold", str(gold), "--out", str(out)]
    gold.write_text("0-0 1-1\n0-0\n")
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == (
        "attnviz: error: --gold line 2: link 0-0 points past the sentence (7 source, 0 target words)"
    )
    assert not out.exists()
    gold.write_text("0-0 1-1\n\n")
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert out.read_text().split("\n")[1:] == ["", ""] and "(1 pair, 2 sure links)" in printed
