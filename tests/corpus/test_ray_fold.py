"""The Ray engine's driver folds the partial files streamed (ray_engine._keys / Pieces / _fold): the fold keys
first, then the batches' arrays one row group at a time in fold order.  No Ray cluster: the partial files are
written here with the module's own row writer (``partial_row``) and pyarrow, as Ray Data's ``write_parquet`` writes
them, in several files and several row groups each, out of fold order."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from attnviz import AttnvizError
from attnviz.corpus import ray_engine as re
from attnviz.corpus.fold import Partial

NH, S, KB = 2, 3, 2
KEYS = ("first_length", "first_item")


def _partial(rng) -> Partial:
    return Partial(
        -1,
        int(rng.integers(1, 9)),
        int(rng.integers(10, 99)),
        rng.normal(size=(NH, S)),
        rng.integers(0, 50, size=(NH, S)),
        rng.normal(size=(S, NH, KB)),
        rng.integers(0, 1000, size=(S, NH, KB)),
        rng.integers(0, S, size=(S, NH, KB)),
        rng.integers(0, S, size=(S, NH, KB)),
    )


@pytest.fixture
def written(tmp_path):
    """11 batches in 3 files of row groups of 2 rows, the files' order and each file's rows shuffled against the
    fold order; returns (the store, the partials in fold order as made here, each batch's named texts)."""
    rng = np.random.default_rng(7)
    keys = [(int(length), int(item)) for length, item in zip(rng.integers(3, 9, 11), rng.permutation(500)[:11])]
    made = {k: _partial(rng) for k in keys}
    texts = {k: {k[1]: (f"text {k[1]}", None)} for k in keys}
    folder = tmp_path / re.PARTIALS
    folder.mkdir()
    shuffled = [keys[i] for i in rng.permutation(len(keys))]
    for f, part in enumerate((shuffled[:5], shuffled[5:9], shuffled[9:])):
        rows = [re.partial_row(made[k], k[0], k[1], texts[k], [k[1], k[1] + 1]) for k in part]
        pq.write_table(pa.Table.from_pylist(rows), folder / f"{2 - f}.parquet", row_group_size=2)
    ordered = sorted(keys)
    return re.PartialsStore(folder, "x"), [made[k] for k in ordered], [texts[k] for k in ordered]


def _same(a: Partial, b: Partial) -> bool:
    arrays = ("sums", "counts", "top_value", "top_item", "top_row", "top_col")
    return (a.batch_id, a.items, a.tokens) == (b.batch_id, b.items, b.tokens) and all(
        getattr(a, x).tobytes() == getattr(b, x).tobytes() and getattr(a, x).shape == getattr(b, x).shape
        for x in arrays
    )


def _whole_table_fold(files) -> list[Partial]:
    """The driver's fold before: every file read whole, concatenated, sorted by the keys, each row converted."""
    table = pa.concat_tables([pq.read_table(f) for f in files])
    cols = [table.column(k).to_pylist() for k in KEYS]
    order = sorted(range(table.num_rows), key=lambda i: tuple(c[i] for c in cols))
    return [re.partial_from_row(table.slice(i, 1).to_pylist()[0], b) for b, i in enumerate(order)]


def test_streamed_fold_equals_the_whole_tables_and_holds_one_row_group(written, monkeypatch):
    store, made, texts = written
    whole = _whole_table_fold(store.files())

    def whole_read(*a, **k):
        raise AssertionError("the streamed fold read a whole file")

    monkeypatch.setattr(pq, "read_table", whole_read)
    keys = re._keys(store.files(), KEYS)
    pieces = re.Pieces(store.files())
    named: list[dict] = []
    got = list(re._fold(store, keys, lambda row: named.append(json.loads(row["texts"])), pieces))

    assert len(got) == len(whole) == len(made) == 11
    for b, (g, w, m) in enumerate(zip(got, whole, made)):
        assert g.batch_id == b
        assert _same(g, w)  # the fold before this one: the same partials, bit for bit
        m.batch_id = b
        assert _same(g, m)  # the partials as made here, in the fold order sorted here
    assert named == [{str(i): [t, p] for i, (t, p) in x.items()} for x in texts]
    # 11 rows in 6 row groups (files of 5, 4 and 2 rows): never more than one group's 2 rows held; every group
    # read, again where the fold order comes back to it
    assert pieces.most_rows == 2 < len(made)
    assert 6 <= pieces.loads <= len(made)
    assert not store.folder.exists()  # folded: the files are removed


def test_interrupted_fold_keeps_the_files_and_an_unreadable_one_is_one_line(written):
    store, made, _ = written
    fold = re._fold(store, re._keys(store.files(), KEYS))
    next(fold)
    with pytest.raises(KeyboardInterrupt):  # a Ctrl-C while the fold runs: the next run resumes from the files
        fold.throw(KeyboardInterrupt)
    assert len(store.files()) == 3

    keys = re._keys(store.files(), KEYS)
    last = store.files()[keys[-1].file]
    last.write_bytes(last.read_bytes()[:100])  # cut short after the keys were read
    with pytest.raises(AttnvizError, match=r"a partial result could not be read back .*run again") as e:
        list(re._fold(store, keys))
    assert "\n" not in str(e.value)
    assert not store.folder.exists()
