"""Per-head statistics that help find interesting heads."""

from __future__ import annotations

import numpy as np

from attnviz.core.attention import Block
from attnviz.core.frames import FramesMap

# name -> (column title, help text); the GUI table and the CLI read this
STAT_COLUMNS = {
    "entropy": ("entropy", "mean row entropy in bits (low = focused)"),
    "distance": ("mean dist.", "mean |query - key| distance weighted by attention"),
    "prev": ("prev. token", "mean mass on the previous token (query i -> key i-1)"),
    "first": (
        "first token",
        "mean mass on key position 0 (CLS/BOS sink), of each row rescaled to 1: at an attention-sink site (rows "
        "summing to less than 1) its share of what the sink left, not of the whole row; that is sink_share ('sink "
        "share' in Head stats)",
    ),
    "special": ("special", "mean mass on special tokens"),
    "diag": ("diagonal", "mean mass on the same position (query i -> key i)"),
    "max": ("max weight", "mean of each row's largest weight"),
}
# every column above is of each row rescaled to sum to 1; this one, shown only where some head's rows sum to less
# (attention sinks), is how much of the row there was before the rescale: a head that gives most of its mass to
# its sink otherwise looks like any other head.  The rescale is the choice for every row statistic (the Head stats
# and a corpus run's alike): "broad" (entropy / log2 of the keys) and the masses compare heads of models with and
# without sinks only as distributions over the keys; the sink's share is said beside them, not folded in
RESCALED = "each row rescaled to sum to 1 over the keys: where the head looks when it looks at a token"
ROW_SUM_COLUMN = {
    "row_sum": (
        "row sum",
        "mean sum of a row's weights over the keys before the statistics rescale it "
        "to 1: below 1, the head's attention sink took the rest (its entropy and masses are of what "
        "is left)",
    )
}
ROW_SUM_SHOWN_BELOW = 0.99  # float16 softmax rows sum to 1 within ~1e-3: only a sink's missing mass is shown
# beside "first" where "row sum" is shown: the corpus's sink_share (:data:`SINK_SHARE_HELP`) of one input's heads,
# the first key's share of the whole row as the softmax left it.  Where every row sums to 1 it is "first" to the
# last digit, so the table leaves it out there as it leaves out "row sum"
SINK_SHARE_COLUMN = {
    "sink_share": (
        "sink share",
        "mean share of each row's whole weight on key position 0 (the first key: [CLS] / BOS) before the statistics "
        "rescale the row to 1, as a corpus run's sink_share: the first key's part of all the head's attention "
        "('first token' is its part of what the sink left)",
    )
}


def with_sink_columns(shown: dict[str, tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """``shown`` (:func:`stat_columns`) for a block where some head's rows sum to less than 1: "sink share" just
    after "first" (its rescaled twin; at the end where a context has no "first") and "row sum" last."""
    out: dict[str, tuple[str, str]] = {}
    for key, col in shown.items():
        out[key] = col
        if key == "first":
            out.update(SINK_SHARE_COLUMN)
    return {**out, **SINK_SHARE_COLUMN, **ROW_SUM_COLUMN}


# what the position-based columns measure where the keys are not the query's own tokens.  Cross-attention over
# text: another sentence, so "diagonal" is the monotone diagonal (kept: translation is roughly monotone).
# Cross-attention over image patches: caption word i against patch i means nothing, so those columns are left out.
# Self-attention over image patches: positions are patches in raster order.
STAT_CONTEXT_HELP: dict[str, dict[str, str | None]] = {
    "cross": {
        "diag": "mean mass on source position i for target position i: the monotone diagonal of two sentences",
        "prev": "mean mass on source position i-1 for target position i (two sentences: no previous token; the "
        "monotone diagonal shifted by one)",
        "distance": "mean |target position - source position| weighted by attention (0 = the monotone diagonal)",
    },
    "cross-image": {"diag": None, "prev": None, "distance": None},  # word i vs patch i: no meaning, left out
    # a vision tower's frames (tiles, the global image, images of a prompt): each frame's patches in raster order
    "frames": {
        "diag": "mean mass on the query patch itself",
        "prev": "mean mass on the patch before in raster order within the frame (the left neighbour; at a row "
        "start, the last patch of the row above; a frame's first patch has none)",
        "distance": "mean |i - j| between patches of a frame in raster order (vertical neighbours are a row's "
        "width apart), not the distance on the image",
        "first": "mean mass on each frame's first patch (the top-left patch of its tile, of the global image or of "
        "its image; a vision tower has no [CLS] or BOS)",
    },
    "patches": {
        "diag": "mean mass on the query patch itself",
        "prev": "mean mass on the patch before in raster order (the left neighbour; at a row start, the last patch "
        "of the row above)",
        "distance": "mean |i - j| between patches in raster order (vertical neighbours are a row's width apart), "
        "not the distance on the image",
    },
    # a speech encoder's self-attention over a clip's frames (wav2vec2, HuBERT, Whisper's encoder): the positions
    # are times, so the distance is said in seconds (stats_in_seconds) and the columns name frames, not tokens
    "audio": {
        "distance": "mean |query time - key time| weighted by attention, in seconds (frames apart x their spacing)",
        "prev": "mean mass on the frame before (query frame i -> key frame i-1, one frame spacing earlier)",
        "first": "mean mass on the clip's first frame (a speech encoder has no [CLS] or BOS)",
        "diag": "mean mass on the query frame itself",
    },
    # a speech decoder's cross-attention over the frames: word i against frame i means nothing, left out
    "cross-audio": {
        "diag": None,
        "prev": None,
        "distance": None,
        "first": "mean mass on the clip's first frame",
    },
}

# column titles where the keys are not tokens (the help above says what they measure there).  Over 2-D patches the
# previous position is kept and named for what it is, "prev. patch": in raster order it is the left neighbour (at a
# row start, the last patch of the row above: one query in a row's width), so the column measures the attention to
# the left neighbour, a positional head type vision towers learn (ViT, CLIP and SigLIP image towers); "prev. token"
# on a patch axis read as a text statistic that had strayed there.  (Where it means nothing, word i against patch
# i, cross-image leaves it out.)
STAT_CONTEXT_TITLES: dict[str, dict[str, str]] = {
    "patches": {"prev": "prev. patch"},
    "frames": {"prev": "prev. patch"},
    "audio": {"distance": "mean dist. (s)", "prev": "prev. frame", "first": "first frame"},
    "cross-audio": {"first": "first frame"},
}


def monotonic_alignment(m: np.ndarray) -> float:
    """The share of a cross map's rows ``[Tq, Tk]`` (after the first) whose most-attended key is at or after the
    previous row's: 1 for a head whose focus only moves forward through the clip (as speech is read out), near
    1/2 for one that jumps about.  NaN for a map of one row (no step to judge)."""
    top = np.asarray(m).argmax(-1)
    return float(np.mean(top[1:] >= top[:-1])) if len(top) > 1 else float("nan")


# statistics a context has in place of the position columns it leaves out, each of one head's map [Tq, Tk]
# (core/head_stats.compute_stats): a speech decoder's text rows against the clip's frames have no diagonal,
# but whether the head's focus moves forward through the clip says whether it aligns
CONTEXT_STATS = {"cross-audio": {"monotonic": monotonic_alignment}}
CONTEXT_COLUMNS: dict[str, dict[str, tuple[str, str]]] = {
    "cross-audio": {
        "monotonic": (
            "monotonic",
            "share of the transcript's rows whose most-attended frame is at or after the previous row's (1 = the "
            "head's focus only moves forward through the clip, as an aligning head's does; diagonal, previous token "
            "and distance mean nothing between text positions and frames). Only the rows that chose the transcript's "
            "words count, each the row before its word (where Audio regions shows the word, and where Whisper's word "
            "timestamps put it): the first is the <|notimestamps|> row, which chose the first word; the forced "
            "prompt's rows before it (<|startoftranscript|>, language, task) attend before any word is spoken and "
            "are left out, as is the row that chose the end of text",
        )
    }
}


def sink_note(sites: list[str]) -> str | None:
    """The one note of a corpus run (run.json and its closing lines) over sites whose softmax includes an attention
    sink (:attr:`~attnviz.core.attention.SiteInfo.sink`; labels ``sites``), None without one: their rows sum to
    less than 1, and the row statistics rescale them, as the Head stats do."""
    if not sites:
        return None
    named = ", ".join(sites[:3]) + (f" and {len(sites) - 3} more" if len(sites) > 3 else "")
    return (
        f"{len(sites)} attention site{'s' if len(sites) != 1 else ''} ({named}) also attend{'s' if len(sites) == 1 else ''} "
        f"to a sink (rows summing to less than 1): every row statistic but sink_share is of {RESCALED} (the sink's "
        "share left out, as in the window's Head stats, whose 'row sum' column says how much each head kept); "
        "sink_share is the first key's share of the whole row, before the rescale"
    )


def stat_columns(context: str = "text") -> dict[str, tuple[str, str]]:
    """``STAT_COLUMNS`` with the titles and help that are true for ``context`` (text | cross | cross-image | patches |
    frames | audio | cross-audio); a column whose statistic means nothing there is left out, and the context's own
    columns (:data:`CONTEXT_COLUMNS`) come after the entropy."""
    extra = STAT_CONTEXT_HELP.get(context, {})
    titles = STAT_CONTEXT_TITLES.get(context, {})
    out = {}
    for key, (label, help_) in STAT_COLUMNS.items():
        if key in extra and extra[key] is None:
            continue
        out[key] = (titles.get(key, label), extra.get(key) or help_)
        if key == "entropy":
            out.update(CONTEXT_COLUMNS.get(context, {}))
    return out


def key_frame_seconds(blk: Block) -> float | None:
    """Seconds between the block's keys where they are a clip's frames with known times (the result's audio track,
    and key labels that are the frames' times: a speech encoder's self-attention, a speech decoder's cross), else
    None (tokens, patches; a Whisper decoder's self-attention)."""
    audio = blk.result.audio
    if audio is None:
        return None
    from attnviz.core.view.labels import frame_step

    return float(audio.frame_seconds) if frame_step(blk.key_axis.labels) is not None else None


def stats_in_seconds(row: dict[str, float], frame_seconds: float) -> dict[str, float]:
    """One head's statistics with the distance in seconds instead of frames (the "audio" context's column)."""
    return {**row, "distance": row["distance"] * frame_seconds} if "distance" in row else dict(row)


def head_stats(m: np.ndarray, key_special: np.ndarray | None = None) -> dict[str, float]:
    """Statistics of one head ``[Tq, Tk]``; diagonal and previous-token use aligned positions."""
    m = np.asarray(m, dtype=np.float64)
    tq, tk = m.shape
    if not tq or not tk:  # every statistic is a mean over rows or keys
        raise ValueError(f"a {tq}×{tk} map has no statistics: it has no query or key tokens")
    sums = m.sum(-1, keepdims=True)
    rows = m / np.maximum(sums, 1e-12)
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.nansum(np.where(rows > 0, rows * np.log2(rows), 0.0), axis=-1)
    qi = np.arange(tq)[:, None]
    kj = np.arange(tk)[None, :]
    # queries that are a suffix of the keys (decoder self-attention with prompt) align at the end
    shift = tk - tq if tk >= tq else 0
    dist = np.abs(qi + shift - kj)
    out = {
        "entropy": float(ent.mean()),
        "distance": float((rows * dist).sum(-1).mean()),
        "prev": float(np.mean([rows[i, i + shift - 1] for i in range(tq) if 0 <= i + shift - 1 < tk]))
        if tq > 1 or shift
        else 0.0,
        "first": float(rows[:, 0].mean()),
        "special": float(rows[:, np.asarray(key_special, bool)].sum(-1).mean())
        if key_special is not None and np.any(key_special)
        else 0.0,
        "diag": float(np.mean([rows[i, i + shift] for i in range(tq) if i + shift < tk])),
        "max": float(rows.max(-1).mean()),
        "row_sum": mean_row_sum(sums[:, 0]),
        "sink_share": float(m[:, 0].mean()),  # not rescaled: "first" of the row as the softmax left it
    }
    return out


def mean_row_sum(row_sums: np.ndarray) -> float:
    """The mean sum of a head's rows before the statistics rescale each to 1: 1 for a softmax over the keys, less
    where an attention sink (GPT-OSS: a learned logit sliced off after the softmax) took the rest.  Rows of no
    weight (padding) are not rows the head wrote."""
    s = np.asarray(row_sums, np.float64)
    s = s[s > 0]
    return float(s.mean()) if s.size else 1.0


def frames_head_stats(m: FramesMap, b: int, h: int, key_special: np.ndarray | None = None) -> dict[str, float]:
    """:func:`head_stats` of head ``h`` of a tower's frames (row ``b`` laid out block-diagonally), frame by frame:
    never the whole ``[Tq, Tk]`` (17 frames of 1,024 patches: 1.2 GB, and twice that in float64).  Every statistic
    is a mean over the rows of something each row gets from its own weights, which lie in its frame's block (the
    other keys' zeros add nothing); a padding row's are all zero, so it adds 0.  Equal to :func:`head_stats` of
    the laid-out map up to float64 rounding (the sums' order), but for two that are each frame's, as a tower
    corpus measures them (:data:`TOWER_STAT_HELP`): "first" is the mass on each frame's first patch (key 0 of the
    laid-out map is only the first tile's top-left corner: a tower has no [CLS]), and "prev" is a mean over the
    rows that have a previous patch in their frame (a frame's first row has none)."""
    side = m.shape[2]
    sp = np.asarray(key_special, bool) if key_special is not None and np.any(key_special) else None
    sums = dict.fromkeys(("entropy", "distance", "prev", "first", "special", "diag", "max", "sink_share"), 0.0)
    row_sums = []
    for frame, (o, p) in zip(m.frames(b), m.spans(b)):  # frames of one size or several (each its own P)
        i = np.arange(p)
        dist = np.abs(i[:, None] - i[None, :])  # within a frame: its queries' and keys' offsets cancel
        block = np.asarray(frame[h], dtype=np.float64)
        row_sums.append(block.sum(-1))
        rows = block / np.maximum(row_sums[-1][:, None], 1e-12)
        with np.errstate(divide="ignore", invalid="ignore"):
            sums["entropy"] += float(-np.nansum(np.where(rows > 0, rows * np.log2(rows), 0.0)))
        sums["distance"] += float((rows * dist).sum())
        sums["prev"] += float(rows[i[1:], i[:-1]].sum())  # a frame's first row: its previous key is another frame's
        sums["first"] += float(rows[:, 0].sum())  # each frame's top-left patch
        sums["sink_share"] += float(block[:, 0].sum())  # the same, not rescaled (TOWER_STAT_HELP's sink_share)
        sums["special"] += float(rows[:, sp[o : o + p]].sum()) if sp is not None else 0.0
        sums["diag"] += float(np.trace(rows))
        sums["max"] += float(rows.max(-1).sum())
    out = {k: v / side for k, v in sums.items()}
    with_prev = side - len(m.spans(b))  # each frame's rows but its first
    out["prev"] = sums["prev"] / with_prev if with_prev > 0 else 0.0
    out["row_sum"] = mean_row_sum(np.concatenate(row_sums)) if row_sums else 1.0
    return out


def block_head_stats(
    block: Block, layer: int, h: int, n: int | None = None, clip: tuple[int | None, int | None] = (None, None)
) -> dict[str, float]:
    """:func:`head_stats` of head ``h`` of ``layer`` (the first ``n`` rows: a generation step), its special keys the
    block's; a tower's frames frame by frame (:func:`frames_head_stats`), never laid out whole.  ``clip``: the
    query rows and keys a speech clip's frames keep (core.view.clip.ClipCut; None: the axis whole): the statistics
    are then of the clip's frames alone, each row rescaled over the clip's keys, but "row sum" stays the row's
    whole sum (the weight on the padding is no attention sink's)."""
    special = np.asarray(block.key_axis.special, bool)
    src = block.result.maps[block.sites[layer]]
    if isinstance(src, FramesMap) and n is None:
        return frames_head_stats(src, block.batch, h, special if len(special) >= src.shape[3] else None)
    a = block.head(layer, h)
    if n is not None:
        a = a[:n, :n] if block.kind == "self" else a[:n]
    rows, keys = clip
    if rows is None and keys is None:
        return head_stats(a, special[: a.shape[-1]] if len(special) >= a.shape[-1] else None)
    whole = a[:rows]
    a = whole[:, :keys]
    out = head_stats(a, special[: a.shape[-1]] if len(special) >= a.shape[-1] else None)
    return {**out, "row_sum": mean_row_sum(np.asarray(whole, np.float64).sum(-1))}


def block_stats(block: Block) -> list[dict[str, float]]:
    """One row per (layer, head) of a :class:`~attnviz.core.attention.Block`."""
    out = []
    for layer in range(block.n_layers):
        for h in range(block.heads_in(layer)):
            row: dict[str, float] = {"layer": layer, "head": h}
            row.update(block_head_stats(block, layer, h))
            out.append(row)
    return out


# -- corpus statistics: the same quantities per query row of padded batches ----------------------------------
# "broad" is the row entropy divided by log2 of the keys the row may see (1 = uniform), so it compares across
# lengths; "special_other" leaves out position 0 so that a [CLS] sink is not also counted as a special head.
# "sink_share" is the one statistic of each row as the softmax left it, not rescaled: the share of the row's whole
# mass on key 0, so that at a site with an attention sink (rows summing to less than 1) a head's sink on the first
# key reads as the part of its attention it is (elsewhere it equals "first"); it is last, so that every column
# before it stays where it was (heads.parquet gains a column, nothing moves)
ROW_STATS = (
    "entropy",
    "broad",
    "distance",
    "prev",
    "next",
    "diag",
    "first",
    "special",
    "special_other",
    "max",
    "sink_share",
)
SINK_SHARE_HELP = (
    "sink share: mean share of each row's whole mass on key position 0 (the first key: [CLS] / BOS), before the "
    "row is rescaled: where a site's rows sum to less than 1 (an attention sink took the rest) this is the first "
    "key's part of all the head's attention, and 'first' its part of what the row kept; elsewhere the two are equal"
)
# a row statistic that is another's to the rounding at a site without an attention sink (rows summing to 1: the
# rescale divides by 1), and that other: a corpus run writes no top examples of it for such a site's heads (they
# would repeat the other's, ~10 % more examples.parquet), and the Corpus view lists the other's there
SAME_WITHOUT_SINK = {"sink_share": "first"}
ROW_STAT_HELP = {
    **{k: v[1] for k, v in STAT_COLUMNS.items()},
    "sink_share": SINK_SHARE_HELP,
    "next": "mean mass on the next token (query i -> key i+1)",
    "broad": "mean row entropy / log2(keys the row may see): 1 = uniform",
    "special_other": "mean mass on special tokens after position 0 (e.g. [SEP])",
}
# a VLM's vision file alone (corpus/tower.py): every statistic is each frame's (a tile, the global image), over its
# own patches in raster order; a frame's keys start with its top-left patch (a vision tower has no [CLS])
TOWER_STAT_HELP = {
    **{k: v for k, v in STAT_CONTEXT_HELP["frames"].items() if v is not None},  # the stats table's words for frames
    "next": "mean mass on the patch after in raster order within the frame (the right neighbour; at a row end, "
    "the first patch of the row below)",
    "sink_share": "mean share of each row's whole mass on its frame's first patch before the row is rescaled "
    "(equal to 'first' where rows sum to 1)",
}


def row_stat_help(score: str, vision_tower: bool = False) -> str | None:
    """What a corpus row statistic measures (None: not one): ``vision_tower``, over a VLM's vision file alone's
    frames (:data:`TOWER_STAT_HELP`), else over tokens."""
    return (TOWER_STAT_HELP.get(score) if vision_tower else None) or ROW_STAT_HELP.get(score)


# maps per row_stats pass (float32 elements, 512 kB): about eight full passes over the maps (mask, sum, log, ...)
# stay in a core's cache this way instead of streaming each batch's maps from memory eight times; 1.4-2x
# faster on MiniLM batches (bench/corpus_bench.py), and every value is the same bit for bit (each is per
# row, reduced only along the key axis)
CHUNK_ELEMENTS = 1 << 17


def row_stats(
    p: np.ndarray,
    lengths: np.ndarray,
    key_special: np.ndarray | None = None,
    causal: bool = False,
    chunk: int = CHUNK_ELEMENTS,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per-row statistics of right-padded self-attention ``p [B, H, T, T]``.

    ``lengths [B]`` are the real token counts; padded keys are dropped and each row renormalised over the
    real keys, and padded query rows never count.  Returns ``values[name] [B, H, T]`` and
    ``valid[name] [B, T]`` (which rows count: previous-token needs i >= 1, next-token i < n - 1, "broad" a
    row that may see two keys or more).  Batch rows are taken ``chunk // (H T T)`` at a time.
    """
    p = np.asarray(p)
    b, h, t, tk = p.shape
    if t != tk:
        raise ValueError(f"row_stats needs self-attention maps (Tq == Tk), got {p.shape}")
    lengths = np.asarray(lengths, np.int64)
    step = max(1, chunk // max(1, h * t * tk))
    if step >= b:
        return _row_stats(p, lengths, key_special, causal)
    ks = None if key_special is None else np.asarray(key_special, bool)
    parts = [
        _row_stats(p[i : i + step], lengths[i : i + step], None if ks is None else ks[i : i + step], causal)
        for i in range(0, b, step)
    ]
    values = {k: np.concatenate([v[k] for v, _ in parts]) for k in parts[0][0]}
    valid = {k: np.concatenate([ok[k] for _, ok in parts]) for k in parts[0][1]}
    return values, valid


def _row_stats(
    p: np.ndarray, lengths: np.ndarray, key_special: np.ndarray | None, causal: bool
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    p = np.asarray(p, dtype=np.float32)
    b, _, t, _ = p.shape
    ar = np.arange(t)
    real = ar[None, :] < lengths[:, None]  # [B, T]
    pm = p * real[:, None, None, :]
    # every statistic but entropy is linear in the row: compute on the masked row, divide by its sum once per row
    # (not once per weight); entropy of p/s is -(sum p log2 p)/s + log2 s
    s = pm.sum(-1)
    inv = 1.0 / np.maximum(s, 1e-30)
    plogp = np.einsum("bhij,bhij->bhi", pm, np.log2(pm + np.float32(1e-30)))  # 0 log 0 = 0 (1e-30 keeps log finite)
    ent = (-plogp * inv + np.log2(np.maximum(s, 1e-30))).astype(np.float64)
    seen = np.minimum(ar[None, :] + 1, lengths[:, None]) if causal else np.broadcast_to(lengths[:, None], (b, t))
    with np.errstate(divide="ignore", invalid="ignore"):
        broad = np.where(seen[:, None, :] >= 2, ent / np.log2(np.maximum(seen, 2))[:, None, :], 0.0)
    sp = np.zeros((b, t), bool) if key_special is None else np.asarray(key_special, bool)[:, :t]
    weights = np.stack([sp, sp & (ar[None, :] > 0)], -1).astype(np.float32)  # [B, T, 2]: special, special after 0
    spm = np.matmul(pm, weights[:, None]) * inv[..., None]  # [B, H, T, 2]
    dist = np.abs(ar[:, None] - ar[None, :]).astype(np.float32)
    zero = np.zeros((*pm.shape[:2], 1), np.float32)
    values = {
        "entropy": ent,
        "broad": broad,
        "distance": np.einsum("bhij,ij->bhi", pm, dist) * inv,
        "prev": np.concatenate([zero, pm[:, :, ar[1:], ar[:-1]] * inv[:, :, 1:]], -1),
        "next": np.concatenate([pm[:, :, ar[:-1], ar[1:]] * inv[:, :, :-1], zero], -1),
        "diag": pm[:, :, ar, ar] * inv,
        "first": pm[:, :, :, 0] * inv,
        "special": spm[..., 0],
        "special_other": spm[..., 1],
        "max": pm.max(-1) * inv,
        "sink_share": pm[:, :, :, 0],  # not rescaled: the first key's share of the whole row (SINK_SHARE_HELP)
    }
    valid = {k: real for k in values}
    valid["prev"] = real & (ar[None, :] >= 1)
    valid["next"] = real & (ar[None, :] < lengths[:, None] - 1)
    valid["broad"] = real & (seen >= 2)
    return {k: v.astype(np.float64, copy=False) for k, v in values.items()}, valid
