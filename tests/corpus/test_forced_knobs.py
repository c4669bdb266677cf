"""The benches' corpus knobs (ATTNVIZ_CORPUS_CHUNK, ATTNVIZ_CORPUS_SESSIONS) read as ATTNVIZ_THREADS reads: unset is
the default, a whole number 1 or more is taken, anything else is one line naming the variable."""

import pytest

from attnviz import AttnvizError
from attnviz.corpus import engines, graph_reduce


@pytest.mark.parametrize(
    ("env", "read", "unset"),
    [("ATTNVIZ_CORPUS_CHUNK", engines._chunk_forced, 0), ("ATTNVIZ_CORPUS_SESSIONS", graph_reduce.sessions_forced, 1)],
)
def test_a_knob_reads_whole_numbers_and_refuses_the_rest(monkeypatch, env, read, unset):
    monkeypatch.delenv(env, raising=False)
    assert read() == unset
    monkeypatch.setenv(env, " 7 ")
    assert read() == 7
    for bad in ("0", "-2", "2.5", "four", "٣"):
        monkeypatch.setenv(env, bad)
        with pytest.raises(AttnvizError, match=rf"^{env}='{bad}': give .* as a whole number, 1 or more, or unset it$"):
            read()
