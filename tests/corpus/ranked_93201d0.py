"""corpus/fold.py's ``ranked`` as it was at 93201d0 (session 23's fold23: a partition, then each row's k placed by
counting; rows with a tie or a NaN lexsorted whole), unchanged but for its name: the reference session 24's integer
sort (fold24) is held to in tests/corpus/test_fold_host.py, and the code bench/gpu/corpus_gil.py patches back in
for its "gil24's fold" row."""

import numpy as np


def reference_ranked(key: np.ndarray, ids: np.ndarray, kb: int) -> np.ndarray:
    """Per row of ``key [R, B]`` the columns of its ``kb`` smallest, smallest first, ties to the lower id (then
    the earlier column), NaN last: ``np.lexsort((ids, key), axis=-1)[:, :kb]``, without sorting whole rows.
    ``ids``: each column's ``[B]`` (a batch's items, in batch order), or anything that broadcasts to ``key``.
    Where exactly ``kb`` values lie at or below the row's ``kb``-th smallest (a partition finds it) and no two of
    them are equal, they are its ``kb``, each placed by how many of them are smaller; any other row (a tie, a NaN)
    is sorted whole, as above.  A batch's fold ranks 32 items for the k=5 best of 720 rows (MiniLM)."""
    key = np.ascontiguousarray(key)
    r, b = key.shape
    out = np.empty((r, kb), np.intp)
    if kb < 1:
        return out
    rest = np.ones(r, bool)
    if kb < b:
        kth = np.partition(key, kb - 1, axis=-1)[:, kb - 1 : kb]
        flat = np.flatnonzero(key <= kth)  # row by row, in column order; NaN is never inside
        row, col = np.divmod(flat, b)
        clear = np.bincount(row, minlength=r) == kb
        if not clear.all():
            flat, col = flat[clear[row]], col[clear[row]]
        if flat.size:
            cols = col.reshape(-1, kb)
            v = np.ascontiguousarray(key.ravel()[flat].reshape(-1, kb).T)  # [kb, rows]: numpy's loops run long
            place = np.add.reduce(v[:, None] < v[None], axis=0, dtype=np.intp)  # [kb, rows]: how many are smaller
            place += np.arange(0, cols.size, kb)
            best = np.full(cols.shape, -1, np.intp)
            best.ravel()[place.ravel()] = cols.T.ravel()
            if flat.size == out.size and best.min() >= 0:  # every row clear, no two values equal (the usual)
                return best
            whole = (best >= 0).all(1)  # two equal values take one place and leave another empty: sorted whole
            done = np.flatnonzero(clear)[whole]
            out[done] = best[whole]
            rest[done] = False
    if rest.any():
        some = key[rest]
        out[rest] = np.lexsort((np.broadcast_to(ids, key.shape)[rest], some), axis=-1)[:, :kb]
    return out
