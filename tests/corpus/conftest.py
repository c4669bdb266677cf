import sys
from pathlib import Path

try:
    import resource
except ImportError:  # Windows: no core files to keep out
    resource = None  # type: ignore[assignment]

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from planted import corpus_lines, planted_model

HERE = Path(__file__).parent


@pytest.fixture(autouse=True)
def _no_core_files_from_children():
    """CI (.ci/run) turns core dumps on to catch a crash of the test process, and children inherit that: Ray's
    workers abort (SIGABRT) as the cluster stops, and each wrote a 1.3 GB core file into the clone (the fresh-clone
    suite took 17 min instead of 11).  The processes this folder's tests start (Ray's, the corpus's worker pools)
    get none; the test process's own limit is back after each test."""
    if resource is None:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))


@pytest.fixture
def ray_local():
    """One local Ray cluster (2 CPUs) for this folder's Ray tests: started by the first that asks (seconds of
    start-up each time) and kept for the next, shut down when the run leaves the folder (pytest_runtest_teardown)."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():  # as --engine ray starts its own (without the head processes it never uses)
        from attnviz.corpus.ray_engine import start_local

        start_local(num_cpus=2)
    return ray


def pytest_runtest_teardown(item, nextitem):
    """The last test of this folder stops the shared cluster: its processes must not idle through the other
    folders' tests (some count processes and memory)."""
    ray = sys.modules.get("ray")
    if (nextitem is None or nextitem.path.parent != HERE) and ray is not None and ray.is_initialized():
        ray.shutdown()


@pytest.fixture(scope="session")
def planted(tmp_path_factory):
    """(model path, corpus .txt path) of the planted-roles encoder."""
    d = tmp_path_factory.mktemp("planted")
    texts = d / "corpus.txt"
    texts.write_text("\n".join(corpus_lines(40)) + "\n")
    return planted_model(d / "planted.onnx"), texts


@pytest.fixture(scope="session")
def bible(tmp_path_factory):
    """12 held-out Greek -> English verses (the shipped translation demo's own data), as .jsonl."""
    import json

    from attnviz.training import data_translation as dt

    pairs = [p for p in dt.split_pairs(dt.load_bible()).test if len(p.src) <= 14][:12]
    f = tmp_path_factory.mktemp("bible") / "verses.jsonl"
    f.write_text(
        "".join(json.dumps({"text": " ".join(p.src), "en": p.tgt_text or " ".join(p.tgt)}) + "\n" for p in pairs)
    )
    return f


@pytest.fixture(scope="session")
def bible_gold(tmp_path_factory):
    """16 held-out verses with their gold alignments, twice: ``pairs.jsonl`` (text, en, gold: the sentences as
    whitespace-separated words) and the ``set.src`` / ``set.tgt`` / ``set.gold`` files ``attnviz align`` reads.
    Every fifth sure link of every third verse is written as possible (``i?j``), and every fourth verse gets one
    extra possible link, so that P ⊋ S is exercised (the Bible set itself has sure links only)."""
    import json

    from attnviz.training import data_translation as dt

    pairs = [p for p in dt.split_pairs(dt.load_bible()).test if len(p.src) <= 16][:16]
    d = tmp_path_factory.mktemp("bible_gold")
    lines = []
    for k, p in enumerate(pairs):
        links = sorted(p.links)
        cells = [f"{i}{'?' if k % 3 == 0 and n % 5 == 0 else '-'}{j}" for n, (i, j) in enumerate(links)]
        if k % 4 == 0:
            extra = next(  # not to a punctuation word: this gold set never links one (the skip rule stays on)
                (i, j)
                for i in range(len(p.src))
                for j in range(len(p.tgt))
                if (i, j) not in p.links and any(c.isalnum() for c in p.tgt[j])
            )
            cells.append(f"{extra[0]}?{extra[1]}")
        lines.append(" ".join(cells))
    (d / "set.src").write_text("".join(" ".join(p.src) + "\n" for p in pairs))
    (d / "set.tgt").write_text("".join(" ".join(p.tgt) + "\n" for p in pairs))
    (d / "set.gold").write_text("".join(g + "\n" for g in lines))
    (d / "pairs.jsonl").write_text(
        "".join(
            json.dumps({"text": " ".join(p.src), "en": " ".join(p.tgt), "gold": g}) + "\n" for p, g in zip(pairs, lines)
        )
    )
    return d
