"""A site's attention as an array or recomputed per head: the probabilities normalised to ``[B, H, Tq, Tk]``,
one site kept as Q and Kᵀ with its graph's epilogue (on-demand memory mode), onnxruntime's packed Attention
recomputed from its inputs, and a site whose Q and Kᵀ stay on their device (:class:`KeptMap`).  numpy only,
besides the sessions a :class:`RecomputeMap` and a :class:`KeptMap` are handed."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

from attnviz import AttnvizError
from attnviz.runtime import kept  # a head model's input names


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    x = x.astype(np.float32)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(x - m)
    s = e.sum(axis=axis, keepdims=True)
    out = np.divide(e, s, out=np.zeros_like(e), where=s > 0)  # a row masked everywhere: zeros
    # a NaN score (a NaN scale) makes its row NaN, not zeros, so analyze.refuse_non_finite sees it
    return np.where(np.isnan(s), np.float32(np.nan), out) if np.isnan(s).any() else out


def to_bhqk(a: np.ndarray, batch: int) -> np.ndarray:
    """Normalise a probability tensor to ``[B, H, Tq, Tk]`` float32."""
    a = np.asarray(a)
    if a.ndim == 4:
        out = a
    elif a.ndim == 3:
        out = a.reshape(batch, a.shape[0] // batch, *a.shape[1:]) if a.shape[0] % batch == 0 else a[None]
    elif a.ndim == 2:
        out = a[None, None]
    elif a.ndim == 5:  # grouped heads [B, Hkv, G, Tq, Tk]
        out = a.reshape(a.shape[0], a.shape[1] * a.shape[2], *a.shape[3:])
    else:
        raise AttnvizError(f"attention tensor has unexpected rank {a.ndim} (shape {a.shape})")
    if out.shape[0] != batch and out.shape[0] == 1:
        out = np.broadcast_to(out, (batch, *out.shape[1:]))
    if out.dtype == np.float32 and out.flags.c_contiguous:
        return out  # the very array (numpy may hand back a view of an unpickled one): its NaN/Inf note holds
    return np.ascontiguousarray(out, dtype=np.float32)


class RecomputeMap:
    """One site kept as Q and Kᵀ; a head's probabilities are recomputed through the graph's own epilogue."""

    def __init__(
        self,
        q: np.ndarray,
        k: np.ndarray,
        side: dict[str, np.ndarray],
        epi_session,
        qk_name: str,
        batch: int,
        matmul_attrs: Mapping,
    ):
        q = np.asarray(q)
        k = np.asarray(k)
        if q.ndim == 3:
            q = q.reshape(batch, -1, *q.shape[1:])
        if k.ndim == 3:
            k = k.reshape(batch, -1, *k.shape[1:])
        if matmul_attrs.get("transA"):
            q = np.swapaxes(q, -1, -2)
        if matmul_attrs.get("transB"):
            k = np.swapaxes(k, -1, -2)
        self.q, self.k = q, k
        self.alpha = float(matmul_attrs.get("alpha", 1.0))
        # side inputs (masks, biases) broadcast right-aligned against [B, H, Tq, Tk]: make them 4-D to slice
        self.side = {n: v.reshape((1,) * (4 - v.ndim) + v.shape) if v.ndim < 4 else v for n, v in side.items()}
        self.sess = epi_session
        self.qk_name = qk_name
        self.batch = batch
        heads = max(q.shape[1], k.shape[1])
        self.shape = (batch, int(heads), int(q.shape[-2]), int(k.shape[-1]))
        self.out_name = epi_session.get_outputs()[0].name

    CHUNK_ELEMS = 1 << 22  # rows per epilogue call so that one chunk of scores is ~16 MB

    def head(self, b: int, h: int) -> np.ndarray:
        qh = self.q[b if self.q.shape[0] > 1 else 0, h if self.q.shape[1] > 1 else 0]
        kh = self.k[b if self.k.shape[0] > 1 else 0, h * self.k.shape[1] // self.shape[1]]
        tq, tk = self.shape[2], self.shape[3]
        side = {}
        for name, v in self.side.items():
            if v.ndim == 4:
                v = v[b : b + 1] if v.shape[0] == self.batch and self.batch > 1 else v[:1]
                v = v[:, h : h + 1] if v.shape[1] == self.shape[1] and self.shape[1] > 1 else v[:, :1]
            side[name] = v
        out = np.empty((tq, tk), np.float32)
        step = max(1, self.CHUNK_ELEMS // max(tk, 1))
        # one buffer for every chunk's scores: a new 16 MB array a chunk was page-faulted in anew each time (at
        # 4,096 tokens the four chunks' products took 58 ms of CPU, one reused buffer's 26)
        dtype = np.result_type(qh.dtype, kh.dtype)
        buf = np.empty((min(step, tq), tk), dtype)
        # softmax is per row: the epilogue runs on row blocks, so a head never needs more than ~3 chunks at once
        for r0 in range(0, tq, step):
            r1 = min(tq, r0 + step)
            scores = np.matmul(qh[r0:r1], kh, out=buf[: r1 - r0])
            if self.alpha != 1.0:
                scores *= self.alpha
            feeds = {self.qk_name: scores[None, None].astype(self.q.dtype, copy=False)}
            for name, v in side.items():
                feeds[name] = v[:, :, r0:r1] if v.ndim == 4 and v.shape[2] == tq and tq > 1 else v
            out[r0:r1] = np.asarray(self.sess.run([self.out_name], feeds)[0], np.float32).reshape(r1 - r0, tk)
        return out

    def array(self) -> np.ndarray:
        return np.stack([np.stack([self.head(b, h) for h in range(self.shape[1])]) for b in range(self.shape[0])])

    @property
    def nbytes(self) -> int:
        return self.q.nbytes + self.k.nbytes


class KeptMap:
    """One site kept as Q and Kᵀ where onnxruntime wrote them (:mod:`attnviz.runtime.kept`: a CUDA session's GPU): a
    head's rows are computed there by the site's head model (:func:`attnviz.runtime.graph.head_model`, the same
    steps as :class:`RecomputeMap`'s) and only those rows come back.  ``q``/``k``: the kept values (``dtype``,
    ``shape``); ``head_session``: the head model's session beside them (``run_kept``); ``pool_session``: its
    pooling twin's (None: the overview pools on the host), which returns every head's thumbnail at once.

    Every head of a batch row (:meth:`heads`, :meth:`array`) and every head's thumbnail (:meth:`pooled`) come from
    one request a site where :data:`SITE_ELEMS` allows, not one a head: a request is a round trip to the device
    (and to the isolation child), 72 of them for a 6 × 12 model's overview."""

    # rows per head-model call: one call a head up to 4,096 tokens (64 MB of float32 scores, on the device)
    CHUNK_ELEMS = 1 << 24
    # scores per call when several heads are asked at once: every head of a 12-head site up to 2,048 tokens
    # (256 MB of float32 scores on the device, and as much again for the probabilities, brought back by array())
    SITE_ELEMS = 1 << 26

    def __init__(
        self, q, k, side: dict[str, np.ndarray], head_session, batch: int, matmul_attrs: Mapping, pool_session=None
    ):
        self.q, self.k = q, k
        trans = (bool(matmul_attrs.get("transA")), bool(matmul_attrs.get("transB")))
        self.qbh, self.kbh, self.shape, self.fixed = _kept_layout(tuple(q.shape), tuple(k.shape), batch, *trans)
        # host arrays sliced here, as RecomputeMap slices them; values kept beside Q and Kᵀ (a mask: runtime/kept.py)
        # are bound whole and sliced by the head model, from the index feeds kept.side_feeds makes
        self.side = {
            n: v.reshape((1,) * (4 - v.ndim) + v.shape) if v.ndim < 4 else v
            for n, v in side.items()
            if isinstance(v, np.ndarray)
        }
        self.side_kept = {n: v for n, v in side.items() if not isinstance(v, np.ndarray)}
        self.sess = head_session
        self.pool = pool_session
        self.batch = batch
        self._outs: dict[int, tuple[str, str]] = {}  # a session's output and dtype, read on its first request

    def _out(self, sess) -> tuple[str, str]:
        """``sess``'s output name and dtype, asked of it on its first request (it is made then: model.LazySession)."""
        got = self._outs.get(id(sess))
        if got is None:
            out = sess.get_outputs()[0]
            got = self._outs[id(sess)] = (out.name, kept.tensor_dtype(out.type))
        return got

    def _feeds(self, b: int, h0: int, h1: int) -> tuple[dict, dict, dict]:
        """Heads ``h0:h1`` of batch row ``b``: the head model's feeds, the kept values bound as they are, and the
        side inputs sliced as :class:`RecomputeMap` slices them (rows still to slice)."""
        (qb, qh), (kb, kh) = self.qbh, self.kbh
        heads = self.shape[1]
        hs = np.arange(h0, h1, dtype=np.int64)
        feeds = dict(self.fixed)
        feeds[kept.Q_INDEX] = (b if qb > 1 else 0) * qh + (hs if qh > 1 else np.zeros_like(hs))
        feeds[kept.K_INDEX] = (b if kb > 1 else 0) * kh + hs * kh // heads
        side = {}
        for name, v in self.side.items():
            if v.ndim == 4:
                v = v[b : b + 1] if v.shape[0] == self.batch and self.batch > 1 else v[:1]
                v = v[:, h0:h1] if v.shape[1] == heads and heads > 1 else v[:, :1]
            side[name] = v
        values = {}
        for name, v in self.side_kept.items():
            values[kept.side_input(name, "value")] = v
            feeds.update(kept.side_feeds(name, v.shape, self.batch, heads, self.shape[2], b, h0, h1))
        for name, v in ((kept.Q, self.q), (kept.K, self.k)):
            if isinstance(v, np.ndarray):  # one of them a host array (a model output, never kept): fed as it is
                feeds[name] = v
            else:
                values[name] = v
        return feeds, values, side

    def _request(self, sess, feeds: dict, values: dict, side: dict, r0: int, r1: int, shape: tuple) -> np.ndarray:
        """One request of ``sess`` for query rows ``r0:r1`` (``shape``: what its output will be)."""
        tq, tk = self.shape[2], self.shape[3]
        feeds[kept.ROWS] = np.arange(r0, r1, dtype=np.int64)
        feeds[kept.SCORES_SHAPE] = np.array([1, len(feeds[kept.Q_INDEX]), r1 - r0, tk], np.int64)
        for name, v in side.items():
            feeds[name] = v[:, :, r0:r1] if v.ndim == 4 and v.shape[2] == tq and tq > 1 else v
        for name, v in self.side_kept.items():
            feeds[kept.side_input(name, "rows")] = kept.side_rows(v.shape, tq, r0, r1)
        out_name, out_dtype = self._out(sess)
        got = sess.run_kept([out_name], feeds, values, {out_name: (out_dtype, shape)})[0]
        return np.asarray(got, np.float32).reshape(shape)

    def _rows(self, b: int, h0: int, h1: int, step: int) -> np.ndarray:
        """``[h1 - h0, Tq, Tk]``: heads ``h0:h1``'s rows, ``step`` rows a request."""
        _, _, tq, tk = self.shape
        n = h1 - h0
        feeds, values, side = self._feeds(b, h0, h1)
        out = None if step >= tq else np.empty((n, tq, tk), np.float32)
        for r0 in range(0, tq, step):
            r1 = min(tq, r0 + step)
            rows = self._request(self.sess, feeds, values, side, r0, r1, (1, n, r1 - r0, tk))
            if out is None:
                return rows.reshape(n, tq, tk)  # one call: the rows as they came back (a slot lent, on the child)
            out[:, r0:r1] = rows.reshape(n, r1 - r0, tk)
        assert out is not None
        return out

    def head(self, b: int, h: int) -> np.ndarray:
        return self._rows(b, h, h + 1, max(1, self.CHUNK_ELEMS // max(self.shape[3], 1)))[0]

    def _per_request(self) -> int:
        """Heads a request when several are asked (1: each head alone, in :data:`CHUNK_ELEMS` row blocks)."""
        return max(1, self.SITE_ELEMS // max(self.shape[2] * self.shape[3], 1))

    def heads(self, b: int) -> np.ndarray:
        """``[H, Tq, Tk]``: every head of batch row ``b``, as few requests as :data:`SITE_ELEMS` allows."""
        heads, tq = self.shape[1], self.shape[2]
        n = self._per_request()
        if n == 1:
            return np.stack([self.head(b, h) for h in range(heads)])
        if n >= heads:
            return self._rows(b, 0, heads, tq)
        return np.concatenate([self._rows(b, h0, min(heads, h0 + n), tq) for h0 in range(0, heads, n)])

    def array(self) -> np.ndarray:
        return np.stack([self.heads(b) for b in range(self.shape[0])])

    def pooled(self, b: int, n_q: int, n_k: int, max_side: int) -> np.ndarray | None:
        """``[H, <=max_side, <=max_side]``: every head of batch row ``b`` over its first ``n_q`` query rows and
        ``n_k`` keys, max-pooled on the device as :func:`attnviz.core.view.downsample` pools (the very maxima:
        the same numbers as pooling :meth:`head`'s on the host), one request a site where :data:`SITE_ELEMS`
        allows (then heads a request, then row blocks of whole runs).  None without a pooling session."""
        if self.pool is None:
            return None
        heads, tk = self.shape[1], self.shape[3]
        fq, fk = -(-n_q // max_side), -(-n_k // max_side)
        n = min(heads, max(1, self.SITE_ELEMS // max(n_q * tk, 1)))
        whole = n > 1 or n_q * tk <= self.SITE_ELEMS
        step = n_q if whole else max(fq, self.SITE_ELEMS // max(tk, 1) // fq * fq)
        out = []
        for h0 in range(0, heads, n):
            h1 = min(heads, h0 + n)
            feeds, values, side = self._feeds(b, h0, h1)
            blocks = []
            for r0 in range(0, n_q, step):
                r1 = min(n_q, r0 + step)
                feeds.update(kept.pool_feeds(h1 - h0, r1 - r0, n_k, fq, fk))
                shape = (h1 - h0, -(-(r1 - r0) // fq), -(-n_k // fk))
                # a copy: kept with the result (the overview's cache), it must not hold the child's slot
                blocks.append(np.array(self._request(self.pool, feeds, values, side, r0, r1, shape)))
            out.append(blocks[0] if len(blocks) == 1 else np.concatenate(blocks, axis=1))
        return out[0] if len(out) == 1 else np.concatenate(out)

    @property
    def nbytes(self) -> int:
        return self.q.nbytes + self.k.nbytes  # held on their device (a result kept keeps them)


Layout = tuple[tuple[int, int], tuple[int, int], tuple[int, int, int, int], Mapping[str, np.ndarray]]


@functools.lru_cache(maxsize=256)
def _kept_layout(qs: tuple, ks: tuple, batch: int, trans_a: bool, trans_b: bool) -> Layout:
    """What a :class:`KeptMap` reads off its Q and Kᵀ shapes, its batch and its QK node's transposes: Q's and Kᵀ's
    (batch, heads) as the head model indexes them, the map's ``[B, H, Tq, Tk]``, and the head model's fixed shape
    feeds.  Kept per shapes: every site of a run has the same, and every run of a length again (an on-demand run
    made them for each of a dozen sites, ~4 us each, measured).  The feeds are shared by the maps of those shapes,
    so read-only: a request copies the dict and adds its own."""
    # rank 3 is [B·H, ., .] (RecomputeMap reshapes it to [B, H, ., .]); the head model indexes the flat axis
    qbh = (batch, qs[0] // batch) if len(qs) == 3 else (qs[0], qs[1])
    kbh = (batch, ks[0] // batch) if len(ks) == 3 else (ks[0], ks[1])
    tq = qs[-1] if trans_a else qs[-2]
    tk = ks[-2] if trans_b else ks[-1]
    fixed = {
        kept.Q_SHAPE: np.array([-1, qs[-2], qs[-1]], np.int64),
        kept.K_SHAPE: np.array([-1, ks[-2], ks[-1]], np.int64),
    }
    for v in fixed.values():
        v.setflags(write=False)
    return qbh, kbh, (batch, int(max(qbh[1], kbh[1])), int(tq), int(tk)), MappingProxyType(fixed)


class PackedMap:
    """onnxruntime's packed com.microsoft.Attention: probabilities recomputed from X and the QKV weights."""

    def __init__(
        self, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, heads: int, mask: np.ndarray | None, extra: dict
    ):
        b, t, _ = x.shape
        sizes = extra.get("qkv_hidden_sizes") or [w.shape[1] // 3] * 3
        qw, kw = w[:, : sizes[0]], w[:, sizes[0] : sizes[0] + sizes[1]]
        q = x @ qw
        k = x @ kw
        if bias is not None:
            q = q + bias[: sizes[0]]
            k = k + bias[sizes[0] : sizes[0] + sizes[1]]
        d = sizes[0] // heads
        self.q = q.reshape(b, t, heads, d).transpose(0, 2, 1, 3)  # (B, H, T, d)
        self.k = k.reshape(b, t, heads, sizes[1] // heads).transpose(0, 2, 1, 3)
        self.scale = extra.get("scale") or 1.0 / np.sqrt(d)
        fill = extra.get("mask_filter_value", -10000.0)
        bias_add = np.zeros((b, 1, t, t), np.float32)
        if mask is not None:
            mask = np.asarray(mask)
            if mask.ndim == 2:  # [B, T] 1 = keep
                bias_add += ((1 - mask.astype(np.float32)) * fill)[:, None, None, :]
            elif mask.ndim == 1:  # [B] right-padded lengths (or [2B] end/start)
                lens = mask[:b]
                keep = np.arange(t)[None, :] < lens[:, None]
                bias_add += np.where(keep, 0.0, fill)[:, None, None, :]
            elif mask.ndim == 3:
                bias_add += ((1 - mask.astype(np.float32)) * fill)[:, None]
        if extra.get("unidirectional"):
            bias_add = bias_add + np.triu(np.full((t, t), fill, np.float32), 1)[None, None]
        self.bias = bias_add
        self.shape = (b, heads, t, t)

    def head(self, b: int, h: int) -> np.ndarray:
        s = (self.q[b, h] @ self.k[b, h].T) * self.scale + self.bias[b, 0]
        return softmax(s)

    def array(self) -> np.ndarray:
        return np.stack([np.stack([self.head(b, h) for h in range(self.shape[1])]) for b in range(self.shape[0])])
