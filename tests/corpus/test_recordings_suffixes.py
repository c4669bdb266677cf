"""``--audio-dir`` (``align-audio``, ``corpus``) reads the sound files the loader reads: the one list of audio
suffixes (runtime.audio.AUDIO_SUFFIXES, which the window's open dialog and a drop on it read too), not a copy of
its own.  Checked by changing that list: a suffix added to it is found in the folder, one taken out is not, and the
refusal of a folder without recordings names the list's suffixes."""

from __future__ import annotations

import pytest

from attnviz import AttnvizError
from attnviz.corpus.align_audio import recordings


def test_the_audio_dir_reads_the_loaders_suffixes(tmp_path, monkeypatch):
    import attnviz.runtime.audio as audio

    for name in ("b.WAV", "a.flac", "c.ogg", "d.mp3", "e.txt"):
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in recordings(tmp_path)] == ["a.flac", "b.WAV", "c.ogg"]
    monkeypatch.setattr(audio, "AUDIO_SUFFIXES", (".wav", ".mp3"))
    assert [p.name for p in recordings(tmp_path)] == ["b.WAV", "d.mp3"]
    (tmp_path / "sub").mkdir()
    with pytest.raises(AttnvizError, match=r"no \.wav or \.mp3 files; give the folder of recordings"):
        recordings(tmp_path / "sub")


def test_the_window_offers_the_same_suffixes():
    pytest.importorskip("PySide6")
    from attnviz.gui.widgets.input_panel import AUDIO_FILTER
    from attnviz.runtime.audio import AUDIO_SUFFIXES

    offered = AUDIO_FILTER.split(";;")[0].partition("(")[2].rstrip(")").split()
    assert offered == [f"*{s}" for s in AUDIO_SUFFIXES]
