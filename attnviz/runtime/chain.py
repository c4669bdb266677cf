"""Several sessions run one after another as one request, later stages fed from earlier stages' outputs.

A vision–language model in the Hub's three-file layout is three runs per call: the vision encoder (pixel values
-> image features), the embeddings (ids -> ``inputs_embeds``), the decoder on the embeddings with the features
written into the image tokens' rows.  With the crash-isolation child (:mod:`attnviz.runtime.host`) three runs
were three round trips, the features and embeddings came out to the caller only to go back in spliced, and each
run's free output slots had aged out by the time the same session ran again, so every call made and mapped them
anew (teacher-forced maps cost 1.32x plain onnxruntime's CPU time, bench/RESULTS.md).  A *chain* is the stages'
fetch lists and feeds, where a feed may be a :class:`~attnviz.runtime.isolation.Spliced`: made from earlier
stages' outputs where the sessions run, so the caller sends one request and reads every stage's outputs back.

Imported by the child (``worker.py``, which must not import onnx or the engine) and by the in-process path
alike: numpy and :mod:`attnviz.runtime.isolation` only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from attnviz import AttnvizError
from attnviz.runtime.isolation import Spliced, Taken
from attnviz.runtime.steps import greedy

Stage = tuple[list[str], dict]  # (the outputs a stage fetches, its feeds: arrays, Spliced or Taken)
# where a generation loop after a chain takes its first token: (stage, logits output, suppressed ids), see first_token
First = tuple[int, str, tuple[int, ...]]


def splice(s: Spliced, outs: list[dict[str, np.ndarray]]) -> np.ndarray:
    """The embeddings with the features in the placeholder rows, in order (LLaVA's masked_scatter, Idefics3's
    inputs_merger), as the feed's dtype; refused in one line where the counts differ or a value is NaN (the
    checks the caller makes of a feed it holds)."""
    base, source = outs[s.base[0]][s.base[1]], outs[s.source[0]][s.source[1]]
    rows = np.asarray(s.rows, bool)
    # [images, tokens, hidden], or [tokens, hidden] (Qwen2-VL's merger: one image's tokens)
    n = int(np.prod(source.shape[:-1])) if source.ndim in (2, 3) else -1
    if int(rows.sum()) != n:
        raise AttnvizError(f"the prompt holds {int(rows.sum())} image tokens and the image gives {n} features; {s.fix}")
    emb = np.array(base, np.float32)  # a copy: the base may view a slot the caller is lent
    emb[rows] = source.reshape(-1, source.shape[-1]).astype(np.float32)
    out = emb.astype(np.dtype(s.dtype), copy=False)
    if np.isnan(out).any():
        raise AttnvizError(f"input {s.name!r} contains NaN values; every map would be NaN — fix the inputs")
    return out


def take(t: Taken, outs: list[dict[str, np.ndarray]]) -> np.ndarray:
    """An earlier stage's output as a later feed, as the feed's dtype (no copy where it already is), refused in
    one line where it holds NaN (the check the caller makes of a feed it holds)."""
    a = outs[t.source[0]][t.source[1]]
    out = a if a.dtype == np.dtype(t.dtype) else a.astype(np.dtype(t.dtype))
    # min propagates NaN: one read and no mask (a Whisper cache is 2 MB: 0.12 against 0.19 ms, read cold)
    if out.dtype.kind == "f" and out.size and np.isnan(out.min()):
        raise AttnvizError(f"input {t.name!r} contains NaN values; every map would be NaN — fix the inputs")
    return out


def resolve(feeds: dict, outs: list[dict[str, np.ndarray]]) -> dict:
    """A stage's feeds with every :class:`Spliced` and :class:`Taken` made from the earlier stages' outputs ``outs``."""
    return {
        k: splice(v, outs) if isinstance(v, Spliced) else take(v, outs) if isinstance(v, Taken) else v
        for k, v in feeds.items()
    }


def reads(feeds: Iterable[dict]) -> set[tuple[int, str]]:
    """The (stage, output) pairs these feeds are made from."""
    out: set[tuple[int, str]] = set()
    for f in feeds:
        for v in f.values():
            if isinstance(v, Spliced):
                out.update((v.base, v.source))
            elif isinstance(v, Taken):
                out.add(v.source)
    return out


def first_token(first: First, outs: list[dict[str, np.ndarray]]) -> int:
    """The token a generation after a chain starts from: the greedy choice on the last row of stage
    ``first[0]``'s output ``first[1]`` (logits ``[B, T, V]`` or ``[B, V]``), never one of ``first[2]`` — what the
    caller chose from the prompt's logits when they came back to it (:func:`attnviz.runtime.generate.with_cache`)."""
    logits = outs[first[0]][first[1]]
    return greedy(logits[0, -1] if logits.ndim == 3 else logits[0], first[2])


def run_local(stages: list[Stage], run: Callable[[int, list[str], dict], list[np.ndarray]]) -> list[list[np.ndarray]]:
    """The stages in this process: ``run(stage index, fetch, feeds)`` runs one stage's session."""
    return run_outs(stages, run)[1]


def run_outs(
    stages: list[Stage], run: Callable[[int, list[str], dict], list[np.ndarray]]
) -> tuple[list[dict[str, np.ndarray]], list[list[np.ndarray]]]:
    """:func:`run_local`, with each stage's outputs by name as well (what a loop after the chain reads)."""
    outs: list[dict[str, np.ndarray]] = []
    got: list[list[np.ndarray]] = []
    for i, (names, feeds) in enumerate(stages):
        values = run(i, names, resolve(feeds, outs))
        outs.append(dict(zip(names, values)))
        got.append(values)
    return outs, got


def run_bound(sess, fetch: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Run with I/O binding: outputs land in onnxruntime-allocated host buffers handed to numpy,
    measured ~5 % faster than ``sess.run`` when 72 MB of maps come back (MiniLM, 512 tokens)."""
    if hasattr(sess, "run_bound"):  # a session in the crash-isolation child binds there
        return sess.run_bound(fetch, feeds)
    io = sess.io_binding()
    for k, v in feeds.items():
        io.bind_cpu_input(k, np.ascontiguousarray(v))
    for n in fetch:
        io.bind_output(n, "cpu")
    sess.run_with_iobinding(io)
    return [o.numpy() for o in io.get_outputs()]
