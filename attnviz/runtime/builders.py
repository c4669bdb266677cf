"""Input builders: from what a researcher gives (text, text pair, image, series, raw feeds) to feeds and axes.

:func:`prepare` turns an :class:`AnalyzeRequest` into a :class:`Prepared` input: the feeds of everything but
the decoder's tokens, the decoder prompt of every batch row, and the token axes of every row.  Raw feeds keep
their batch: every row is run, padded positions (mask 0) are labelled special.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from attnviz import AttnvizError
from attnviz.core import metadata as md
from attnviz.core.attention import TokenAxis
from attnviz.core.words import with_article
from attnviz.runtime import inputs as ip
from attnviz.runtime.request import AnalyzeRequest

if TYPE_CHECKING:
    from attnviz.runtime.protocol import AttnModel

ENCODER_ROLES = {r: r for r in ("tokens", "mask", "token_types", "positions")}
DECODER_ROLES = {"tokens": "decoder_tokens", "mask": "decoder_mask"}
_MASK_DTYPES = ("int64", "int32", "float32", "bool")


@dataclass
class Prepared:
    """Feeds and axes for one analysis, before the decoder's tokens are added."""

    feeds: dict[str, np.ndarray]
    batch: int = 1
    src_rows: list[TokenAxis | None] = field(default_factory=lambda: [None])  # per batch row
    prompts: list[list[int]] | None = None  # decoder ids per row; None exactly when dec_in is None
    dec_in: ip.IOInfo | None = None  # the decoder's token input
    decoder_is_tokens: bool = False  # decoder-only / captioning: the token input is the decoder's
    decoder_given: bool = False  # the decoder's tokens (and mask) came in the raw feeds: run them as given
    img_in: ip.IOInfo | None = None
    shown: np.ndarray | None = None  # the image as the model saw it
    tgt_tok: ip.TextEncoder | None = None
    notes: list[str] = field(default_factory=list)
    hint: str | None = None  # the likely cause and fix when the run fails (said before onnxruntime's message)
    image_info: str | None = None  # how the image was normalised (RunInfo.image_preprocessing)
    audio: list[str] | None = None  # the clips heard (file names; "samples" for clips given in memory)


def fit_positions(model: AttnModel, enc, max_tokens, notes):
    """Truncate to ``max_tokens`` when asked; refuse (offering the flag) more tokens than the model has positions.
    A tokenizer.json's truncation length is a training-time choice, never used as the limit."""
    from attnviz.runtime.limits import check_positions, truncate

    n = len(enc.ids)
    if max_tokens is not None and n > max_tokens:
        enc = truncate(enc, int(max_tokens))
        notes.append(f"{n} tokens truncated to the first {len(enc.ids)} (--max-tokens {max_tokens})")
    check_positions(model, len(enc.ids))
    return enc


def by_role(model: AttnModel, role: str):
    for i in model.inputs:
        if model.roles[i.name] == role:
            return i
    return None


def _ids_array(rows: list[list[int]], dtype: str) -> np.ndarray:
    return np.asarray(rows, dtype=np.dtype(dtype) if dtype.startswith("int") else np.int64)


def fill_text_inputs(
    model, feeds: dict, rows: list[list[int]], type_ids: list[int] | None, roles_map: dict[str, str]
) -> None:
    """Token / mask / type / position inputs for equal-length rows.  roles_map maps generic role -> input role."""
    b, n = len(rows), len(rows[0])
    for i in model.inputs:
        role = model.roles[i.name]
        if role == roles_map.get("tokens"):
            feeds[i.name] = _ids_array(rows, i.dtype)
        elif role == roles_map.get("mask"):
            feeds[i.name] = np.ones((b, n), dtype=np.dtype(i.dtype) if i.dtype in _MASK_DTYPES else np.int64)
        elif role == roles_map.get("token_types") and type_ids is not None:
            feeds[i.name] = _ids_array([type_ids] * b, i.dtype)
        elif role == roles_map.get("positions"):
            feeds[i.name] = _ids_array([list(range(n))] * b, i.dtype)


def fill_auxiliary(model: AttnModel, feeds: dict, batch: int, seq_len: int | None) -> None:
    """Empty KV cache, positions, cache positions and other inputs a plain forward pass needs (batch rows kept)."""
    for i in model.inputs:
        if i.name in feeds:
            continue
        role = model.roles[i.name]
        if role == "past":
            if any(isinstance(d, str) for d in i.shape[1:-2]) or (len(i.shape) == 4 and isinstance(i.shape[-1], str)):
                raise AttnvizError(
                    f"input {i.name!r} is a KV cache with unknown head sizes; export the model without past key values"
                )
            shape = [batch if ax == 0 else (0 if isinstance(d, str) else d) for ax, d in enumerate(i.shape)]
            feeds[i.name] = np.zeros(shape, dtype=np.dtype(i.dtype))
        elif role == "cache_position" and seq_len:
            feeds[i.name] = np.arange(seq_len, dtype=np.dtype(i.dtype))
        elif role == "positions" and seq_len and i.rank == 2:
            feeds[i.name] = _positions(_fed(model, feeds, "mask"), batch, seq_len).astype(np.dtype(i.dtype))
        elif role == "token_types" and i.rank == 2 and (ids := _fed(model, feeds, "tokens")) is not None:
            # transformers' own default when none are given: one segment (optimum's BERT/ALBERT/ELECTRA exports
            # take token_type_ids, and feeds saved from input_ids + attention_mask alone are common)
            feeds[i.name] = np.zeros(np.shape(ids), dtype=np.dtype(i.dtype))
        elif i.dtype == "bool" and i.rank <= 1:  # use_cache_branch of merged decoders (optimum: shape [1])
            feeds[i.name] = np.zeros([1] * i.rank, bool)


def _positions(mask, batch: int, seq_len: int) -> np.ndarray:
    """Real tokens' positions counted over each row's real tokens, as optimum's ORTModelForCausalLM and transformers'
    generate() count them: a left-padded row gets the positions it has alone.  0..T-1 would shift every real token
    of such a row, which changes the maps of models with absolute positions (OPT, GPT-2); for rotary models both
    are the same.  Padding counts on from the row's first real token (0 before it), so a right-padded batch gets
    0..T-1 everywhere, exactly what transformers' forward uses when none are given.  Without a mask: 0..T-1."""
    t = np.broadcast_to(np.arange(seq_len), (batch, seq_len))
    if mask is None or np.shape(mask) != (batch, seq_len):
        return t.copy()
    real = np.asarray(mask) != 0
    leading = np.where(real.any(axis=1), real.argmax(axis=1), 0)[:, None]
    return np.where(real, np.cumsum(real, axis=1) - 1, np.maximum(t - leading, 0))


def _fed(model: AttnModel, feeds: dict, role: str):
    """The array fed to the input of this role, if any."""
    i = by_role(model, role)
    return feeds.get(i.name) if i is not None else None


def labels(tok, ids, keep=None) -> TokenAxis:
    """Token labels of one row; positions the mask drops (padding) are special."""
    if tok is None:
        lab, sp = [str(int(i)) for i in ids], [False] * len(ids)
    else:
        lab, sp = [tok.label(i) for i in ids], [bool(tok.is_special(i)) for i in ids]
    if keep is not None:
        sp = [s or not bool(k) for s, k in zip(sp, keep)]
    return TokenAxis(lab, sp if any(sp) or tok is not None else None)


def _tokenizers_or_none(model: AttnModel):
    try:
        return model.tokenizers
    except AttnvizError:
        return None, None


def _mask_rows(feeds: dict, model: AttnModel, role: str, batch: int):
    m = by_role(model, role)
    if m is None or m.name not in feeds or np.ndim(feeds[m.name]) != 2:
        return [None] * batch
    return list(np.asarray(feeds[m.name]))


def _image(model: AttnModel, req: AnalyzeRequest, feeds: dict, prep: Prepared) -> None:
    img_in = by_role(model, "image")
    prep.img_in = img_in
    if req.image is None:
        if img_in is not None and img_in.name not in feeds:
            raise AttnvizError(f"{model.path.name} takes an image ({img_in.describe()}); give an image", param="image")
        return
    if img_in is None:
        raise AttnvizError(
            f"{model.path.name} takes no image input (its inputs: {', '.join(i.name for i in model.inputs)}); give a text instead",
            param="text",
        )
    spec = ip.image_spec(model.meta, img_in.shape, req.image_size, req.image_mean, req.image_std)
    prep.image_info = spec.describe()  # recorded in the run info (sidebar, figure recipes)
    if spec.stats_source.startswith("default"):
        prep.notes.append(
            f"image normalised with the {spec.preset} preset (mean/std {spec.mean[0]:g}/{spec.std[0]:g}): "
            "the model's metadata has no image statistics; choose ImageNet or CLIP if it was trained with those"
        )
    if spec.source == "defaults" and req.image_size is None:  # said first with any run failure: the likely cause
        prep.notes.append(
            f"the model does not declare its image size, so the image was resized to {spec.height}x{spec.width}; "
            "give --image-size H W"
        )
        prep.hint = (
            f"{model.path.name} does not declare its image size and the {spec.height}x{spec.width} guess failed: "
            "give --image-size H W, the size it was trained on"
        )
    if isinstance(req.image, np.ndarray):  # an image already in memory (GUI): through the same resize path
        from PIL import Image

        fd, tmp = tempfile.mkstemp(suffix=".png")
        os.close(fd)
        Image.fromarray(req.image).save(tmp)
        try:
            feeds[img_in.name], prep.shown = ip.load_image(tmp, spec)
        finally:
            os.unlink(tmp)
    else:
        feeds[img_in.name], prep.shown = ip.load_image(req.image, spec)


def _audio(model: AttnModel, req: AnalyzeRequest, feeds: dict, prep: Prepared) -> None:
    """Sound files (or mono samples at the model's rate) -> the log-mel features its encoder takes; the
    encoder's positions are labelled by time (20 ms each for Whisper)."""
    from attnviz.runtime import audio as au

    aud_in = by_role(model, "audio")
    if req.audio is None:
        if aud_in is not None and aud_in.name in feeds:  # features given raw: their frames still have times
            spec = au.FeatureSpec.from_dict(md.section(model.meta, "audio"))
            n = (int(np.shape(feeds[aud_in.name])[-1]) - 1) // au.CONV_STRIDE + 1
            prep.src_rows = [TokenAxis(au.frame_labels(n, spec))]
        elif aud_in is not None:
            raise AttnvizError(
                f"{model.name} takes audio ({aud_in.describe()}); give a sound file (--audio FILE)", param="audio"
            )
        return
    if aud_in is None:
        raise AttnvizError(
            f"{model.path.name} takes no audio input (its inputs: {', '.join(i.name for i in model.inputs)}); "
            "give a text or an image instead",
            param="audio",
        )
    spec = au.FeatureSpec.from_dict(md.section(model.meta, "audio"))
    clips = list(req.audio) if isinstance(req.audio, (list, tuple)) else [req.audio]
    if not clips:
        raise AttnvizError("no audio clip given; give a sound file (--audio FILE)", param="audio")
    waves, names = [], []
    for clip in clips:
        if isinstance(clip, np.ndarray):  # samples already at the model's rate (the window, a script)
            wave, notes = au.check_clip(clip.astype(np.float32), spec.sampling_rate, spec, "samples", req.max_seconds)
            names.append("samples")
        else:
            wave, notes = au.load_audio(str(clip), spec, req.max_seconds)
            names.append(str(clip))
        waves.append(wave)
        prep.notes += notes
    feeds[aud_in.name] = au.log_mel(waves, spec).astype(np.dtype(aud_in.dtype))
    prep.audio = names
    prep.src_rows = [TokenAxis(au.frame_labels(au.encoder_positions(spec), spec))]


def _speech_prompts(model: AttnModel, prep: Prepared, batch: int) -> list[list[int]] | None:
    """A speech decoder's forced prompt per row (the language detected per clip where the config leaves it
    open), or None for any other model."""
    from attnviz.runtime.speech import SpeechPrompt

    section = md.section(model.meta, "speech_prompt")
    if not section or prep.dec_in is None:
        return None
    prompt = SpeechPrompt.from_meta(section)
    dec_name = prep.dec_in.name

    def start_logits(ids: list[int]) -> np.ndarray:
        logits = model.logits({**prep.feeds, dec_name: np.asarray([ids] * batch, np.int64)})
        return logits[:, -1] if logits.ndim == 3 else logits

    rows = prompt.rows(start_logits, batch)
    if prompt.language_slot is not None and prep.tgt_tok is not None:
        found = sorted({prep.tgt_tok.label(r[prompt.language_slot]) for r in rows})
        prep.notes.append(f"language detected from the audio: {', '.join(found)}")
    return rows


def _check_encoder_cache(model: AttnModel, feeds: dict) -> None:
    """An empty encoder half of a KV cache (``past_key_values.N.encoder.*``) would leave cross-attention no keys
    at all: a with-past file (one cached step) cannot start on its own.  A merged decoder's first branch
    (``use_cache_branch`` off) ignores its cache, so it can."""
    from attnviz.runtime.graph import ENCODER_PAST_RE

    if any(i.dtype == "bool" and i.rank <= 1 for i in model.inputs):
        return
    missing = [
        i.name
        for i in model.inputs
        if model.roles[i.name] == "past" and i.name not in feeds and ENCODER_PAST_RE.search(i.name)
    ]
    if missing:
        raise AttnvizError(
            f"{model.path.name} runs one cached step after an earlier run: {missing[0]} is the encoder half of its "
            "KV cache, which it does not make itself; open the export folder (it runs the encoder and the first "
            "step first), or give the cache with --inputs FEEDS.npz"
        )


# the builders of an encoder's non-text input, one per kind; each fills its input's feeds (and the source axes)
# from the request, or refuses it in one line when the model takes no such input
SOURCE_BUILDERS = (_image, _audio)


def prepare(model: AttnModel, req: AnalyzeRequest) -> Prepared:
    feeds = ip.load_feeds(req.feeds) if isinstance(req.feeds, (str, Path)) else dict(req.feeds or {})
    feeds = {k: np.asarray(v) for k, v in feeds.items()}
    _check_encoder_cache(model, feeds)
    prep = Prepared(feeds=feeds)
    kind = model.kind
    for build in SOURCE_BUILDERS:
        build(model, req, feeds, prep)
    batch = max((v.shape[0] for v in feeds.values() if v.ndim >= 2), default=1)
    prep.batch = batch

    series_in = by_role(model, "series")
    dec_in = by_role(model, "decoder_tokens")
    tok_in = by_role(model, "tokens")
    # the token input of an image-captioning graph or a decoder-only graph is the decoder's
    prep.decoder_is_tokens = kind in ("vision-decoder", "decoder") and dec_in is None and tok_in is not None
    if prep.decoder_is_tokens:
        dec_in = tok_in
    prep.dec_in = dec_in
    src_tok = tgt_tok = None
    prompt: list[int] | None = None
    caption: str | None = None
    if req.text is not None:
        if batch > 1:
            raise AttnvizError("give a text or a batch of raw inputs, not both", param="inputs")
        if series_in is not None and tok_in is None:
            vals = ip.parse_series(req.text)
            shape = [1, len(vals)] + ([1] if series_in.rank == 3 else [])
            feeds[series_in.name] = vals.reshape(shape[: series_in.rank]).astype(np.float32)
            prep.src_rows = [series_axis(vals)]
        elif prep.decoder_is_tokens:
            src_tok, tgt_tok = model.tokenizers
            tok = tgt_tok or src_tok
            if tok is None:
                raise AttnvizError(
                    f"no tokenizer for {model.path.name}: put tokenizer.json beside the model or choose a tokenizer file",
                    param="tokenizer",
                )
            prompt = fit_positions(model, tok.encode(req.text, add_special=False), req.max_tokens, prep.notes).ids
        elif prep.img_in is not None and dec_in is not None and tok_in is None:
            caption = req.text  # an image encoder with its own decoder input (VisionEncoderDecoder): the caption so far
        elif tok_in is not None:
            src_tok, tgt_tok = model.tokenizers
            if src_tok is None:
                raise AttnvizError(
                    f"no tokenizer for {model.path.name}: put tokenizer.json beside the model or choose a tokenizer file",
                    param="tokenizer",
                )
            enc = src_tok.encode(req.text, None if dec_in is not None else req.text_pair)
            if not enc.ids:
                raise AttnvizError("the text gives no tokens; type some words")
            enc = fit_positions(model, enc, req.max_tokens, prep.notes)
            fill_text_inputs(model, feeds, [enc.ids], enc.type_ids, ENCODER_ROLES)
            prep.src_rows = [TokenAxis(enc.tokens, enc.special)]
        else:
            raise AttnvizError(
                f"{model.path.name} takes no text input (its inputs: {', '.join(i.describe() for i in model.inputs)})"
            )
    elif tok_in is not None and tok_in.name in feeds and feeds[tok_in.name].ndim == 2 and not prep.decoder_is_tokens:
        src_tok, tgt_tok = _tokenizers_or_none(model)
        keep = _mask_rows(feeds, model, "mask", batch)
        prep.src_rows = [labels(src_tok, row, k) for row, k in zip(feeds[tok_in.name], keep)]
    elif series_in is not None and series_in.name in feeds and feeds[series_in.name].ndim >= 2:
        prep.src_rows = [series_axis(np.ravel(row)) for row in feeds[series_in.name]]
    if len(prep.src_rows) != batch:
        prep.src_rows = (prep.src_rows * batch)[:batch]  # an image batch: every row has the same patch axis

    if dec_in is not None:
        if src_tok is None and tgt_tok is None:
            src_tok, tgt_tok = _tokenizers_or_none(model)
        prep.tgt_tok = tgt_tok or src_tok
        if dec_in.name in feeds and prompt is None and feeds[dec_in.name].ndim == 2:
            prep.prompts = [[int(x) for x in row] for row in feeds[dec_in.name]]
            prep.decoder_given = True
        elif prompt is None:
            sp = md.section(model.meta, "special")
            start = sp.get("decoder_start", sp.get("bos"))
            starts = _speech_prompts(model, prep, batch) or [[int(start if start is not None else 0)]] * batch
            forced = caption if caption is not None else req.text_pair
            target: list[int] = []
            if forced:
                if prep.tgt_tok is None:
                    raise AttnvizError(
                        "no target tokenizer to encode the text pair; put tokenizer.json beside the model",
                        param="tokenizer",
                    )
                target = prep.tgt_tok.encode(forced, add_special=False).ids
                from attnviz.runtime.limits import SHORTEN, check_positions

                what = "the caption" if caption is not None else "the text pair (decoder side)"
                check_positions(model, len(starts[0]) + len(target), what, SHORTEN)
            prep.prompts = [list(s) + target for s in starts]
        else:
            prep.prompts = [list(prompt)]
        if kind == "decoder" and not prep.prompts[0]:
            raise AttnvizError("a decoder needs a prompt: give a text", param="text")
    elif req.generate and by_role(model, "encoder_states") is not None:  # a decoder file, with raw feeds
        raise AttnvizError(
            f"{model.path.name} is the decoder of an export: to generate, give the encoder's input (--text or "
            "--image; the encoder_model.onnx beside it runs) or open the export folder",
            param="generate",
        )
    elif req.generate:
        raise AttnvizError(
            f"{model.path.name} is {with_article(kind)} model with no decoder input; generation needs a decoder or encoder-decoder model",
            param="generate",
        )
    return prep


def decoder_feeds(model: AttnModel, prep: Prepared, rows: list[list[int]]) -> dict[str, np.ndarray]:
    """The full-run feeds with these decoder rows (given feeds run as they are)."""
    g = dict(prep.feeds)
    if not (prep.decoder_given and rows == prep.prompts):
        roles = ENCODER_ROLES if prep.decoder_is_tokens else DECODER_ROLES
        fill_text_inputs(model, g, rows, None, roles)
    fill_auxiliary(model, g, len(rows), len(rows[0]))
    return g


def decoder_axes(model: AttnModel, prep: Prepared, rows: list[list[int]], feeds: dict) -> list[TokenAxis]:
    role = "mask" if prep.decoder_is_tokens else "decoder_mask"
    keep = _mask_rows(feeds, model, role, len(rows))
    return [labels(prep.tgt_tok, r, k) for r, k in zip(rows, keep)]


def series_axis(values) -> TokenAxis:
    """A time series' axis is its time steps (t0 = the oldest value), not the values themselves."""
    return TokenAxis([f"t{i}" for i in range(len(values))])
