"""Input builders: from what a researcher gives (text, text pair, image, series, raw feeds) to feeds and axes.

:func:`prepare` turns an :class:`AnalyzeRequest` into a :class:`Prepared` input: the feeds of everything but
the decoder's tokens, the decoder prompt of every batch row, and the token axes of every row.  Raw feeds keep
their batch: every row is run, padded positions (mask 0) are labelled special.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from attnviz import AttnvizError
from attnviz.core import metadata as md
from attnviz.core.attention import AudioTrack, TokenAxis
from attnviz.core.numbers import spelled
from attnviz.core.setting_words import fix
from attnviz.core.text_scores import PairLayout
from attnviz.core.words import with_article
from attnviz.runtime import dual_towers
from attnviz.runtime import inputs as ip
from attnviz.runtime.audio_notes import LANGUAGE
from attnviz.runtime.request import AnalyzeRequest
from attnviz.runtime.shorten import Shorten

if TYPE_CHECKING:
    from attnviz.runtime.protocol import AttnModel
    from attnviz.runtime.vlm_families import Tiles

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
    shorten: Shorten | None = None  # how the user cuts the input, named by a memory refusal (a clip's --max-seconds)
    image_info: str | None = None  # how the image was normalised (RunInfo.image_preprocessing)
    audio: list[str] | None = None  # the clips heard (file names; "samples" for clips given in memory)
    track: AudioTrack | None = None  # the clips and their features, kept on the result for the Audio regions view
    image_tiles: Tiles | None = None  # how a VLM family's processor split the image (its prompt expansion follows)
    image_count: int = 0  # the images given (a vision–language prompt may hold several)
    images: list[np.ndarray] | None = None  # several images: each as the model saw it, in order (shown: the first)
    image_tiles_each: list = field(default_factory=list)  # each image's split (image_tiles: the last), in order
    # a dual encoder's several images (one text's, or every image against every text): each as the model saw it and
    # its name, in order; the rows' images and texts (core.text_scores.PairLayout) once the texts are in
    pair_images: list[np.ndarray] | None = None
    pair_image_names: list[str] | None = None
    pair_layout: PairLayout | None = None
    # the pairs' images and texts fed each once, the towers' batches apart (runtime/dual_towers.py): the run's
    # result then makes the rows; False: the feeds are the rows, each image repeated once per text
    towers_apart: bool = False
    speech_prompt: int = 0  # a speech decoder's forced prompt length (the transcript is fed after it); 0: none


def fit_positions(model: AttnModel, enc, max_tokens, notes: list[str] | None, pair: tuple | None = None):
    """Truncate to ``max_tokens`` when asked; refuse (offering the flag) more tokens than the model has positions.
    A tokenizer.json's truncation length is a training-time choice, never used as the limit.  ``pair``: where
    ``enc`` is a sentence pair, ``(tokenizer, text, text_pair)``: it is cut longest first, as a corpus run cuts the
    same pair (:mod:`attnviz.runtime.truncation`), and the note says which sentence lost how many tokens.
    ``notes``: None where the caller says what was cut (an encoder–decoder's note covers its target too)."""
    from attnviz.runtime.limits import check_positions
    from attnviz.runtime.truncation import cut_flag, truncate, truncate_pair

    n = len(enc.ids)
    if max_tokens is not None and n > max_tokens:
        if pair is None:
            enc = truncate(enc, int(max_tokens))
            note = f"{n} tokens truncated to the first {len(enc.ids)} {cut_flag(max_tokens)}"
        else:
            tok, text, text_pair = pair
            enc, how = truncate_pair(tok, enc, text, text_pair, int(max_tokens))
            note = f"{n} tokens truncated to {len(enc.ids)} {cut_flag(max_tokens)}: {how.describe()}"
        if notes is not None:
            notes.append(note)
    check_positions(model, len(enc.ids))
    return enc


def by_role(model: AttnModel, role: str):
    for i in model.inputs:
        if model.roles[i.name] == role:
            return i
    return None


# a source a model may take: its input role -> (its words, the param, i.e. the flag or control, that gives it)
_SOURCES = {
    "tokens": ("a text", "text"),
    "series": ("a series of numbers as text (e.g. --text '1.5 2 2.5')", "text"),
    "image": ("an image", "image"),
    "audio": ("a sound file", "audio"),
}


def _takes_no(model: AttnModel, given: str) -> AttnvizError:
    """The refusal of an ``image``/``audio`` the model has no input for, naming what it does take (a speech model
    was told "give a text instead", a translation model "a text or an image")."""
    takes = [_SOURCES[r] for r in _SOURCES if by_role(model, r) is not None]
    instead = " or ".join(words for words, _ in takes) if takes else "its inputs as arrays (--inputs FEEDS.npz)"
    return AttnvizError(
        f"{model.path.name} takes no {given} input (its inputs: {', '.join(i.name for i in model.inputs)}); "
        f"give {instead} instead",
        param=takes[0][1] if takes else "inputs",
    )


def decoder_input(model: AttnModel):
    """The input the decoder's tokens go in: its own, else (an image-captioning or decoder-only graph) the token
    input; None where the model has none, so it cannot generate (a default generation is then none:
    runtime/default_steps.py)."""
    dec_in = by_role(model, "decoder_tokens")
    if dec_in is None and model.kind in ("vision-decoder", "decoder"):
        return by_role(model, "tokens")
    return dec_in


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
    roles = model.roles
    for i in model.inputs:
        if i.name in feeds:
            continue
        role = roles[i.name]
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


def labels(tok, ids, keep=None, prompt_len: int | None = None) -> TokenAxis:
    """Token labels of one row; positions the mask drops (padding) are special, and recorded as the row's padding
    (a special token alone cannot tell a pad from a trailing EOS).  ``prompt_len``: the ids after it were generated,
    each a word labelled as the token it is (a VLM that generates its image placeholder wrote ``<image>``, no image
    patch: only the prompt's placeholders take the image's features)."""
    if tok is None:
        lab, sp = [str(int(i)) for i in ids], [False] * len(ids)
    else:
        cut = len(ids) if prompt_len is None else min(prompt_len, len(ids))
        lab = tok.row_labels(ids[:cut]) + [tok.label(int(i)) for i in ids[cut:]]
        sp = [bool(tok.is_special(i)) for i in ids]
    pad = None
    if keep is not None and len(keep) != len(ids):
        keep = None  # a mask over another axis (a decoder file's encoder_attention_mask) says nothing of these tokens
    if keep is not None:
        pad = [not bool(k) for k in keep]
        sp = [s or p for s, p in zip(sp, pad)]
    return TokenAxis(lab, sp if any(sp) or tok is not None else None, pad=pad)


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
        raise _takes_no(model, "image")
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
            f"{fix('image_size')}"
        )
        prep.hint = (
            f"{model.path.name} does not declare its image size and the {spec.height}x{spec.width} guess failed: "
            f"{fix('image_size')}, the size it was trained on"
        )
    sources = list(req.image) if isinstance(req.image, (list, tuple)) else [req.image]
    prep.image_count = len(sources)
    if len(sources) > 1 and model.kind == "vision" and by_role(model, "tokens") is not None:
        _dual_images(model, sources, spec, feeds, prep, img_in)  # several images against the texts: rows
        return
    sized = model.several_images(len(sources))  # refused in one line where the model takes one image a run
    loaded, infos = [], []
    for source in sources:
        loaded.append(_one_image(model, source, spec, prep))
        prep.image_tiles_each.append(prep.image_tiles)  # each image's split (Qwen2-VL: its grid of tokens)
        infos.append(prep.image_info)
    prep.shown = loaded[0][1]
    if len(loaded) == 1:
        feeds[img_in.name] = loaded[0][0]
        return
    if len(set(infos)) > 1:  # the run info says how each image was processed
        prep.image_info = "; ".join(f"image {k + 1}: {info}" for k, info in enumerate(infos))
    prep.images = [shown for _, shown in loaded]
    if img_in.rank == 5:  # a prompt row's own images axis (Idefics3's frames): every image's, one after another
        feeds[img_in.name] = np.concatenate([px for px, _ in loaded], axis=1)
        return
    sizes = [tuple(int(d) for d in px.shape[-2:]) for px, _ in loaded]
    if len(set(sizes)) == 1:
        feeds[img_in.name] = np.concatenate([px for px, _ in loaded], axis=0)  # the prompt's images, in order
        return
    if sized is None:
        said = ", ".join(f"{w}x{h}" for h, w in sizes)
        raise AttnvizError(
            f"the images are resized by the processor to different sizes ({said}); attnviz runs several images of "
            f"one size per prompt for {model.path.name}: give images of the same size (crop or resize them alike)",
            param="image",
        )
    # one array for the prompt's images: each at the top left of the largest size, its own size beside it
    top = (max(h for h, _ in sizes), max(w for _, w in sizes))
    padded = np.zeros((len(loaded), *loaded[0][0].shape[1:-2], *top), loaded[0][0].dtype)
    for k, (px, _) in enumerate(loaded):
        padded[k, ..., : px.shape[-2], : px.shape[-1]] = px[0]
    feeds[img_in.name] = padded
    feeds[sized] = np.asarray(sizes, np.int64)


def _dual_images(model: AttnModel, sources: list, spec: ip.ImageSpec, feeds: dict, prep: Prepared, img_in) -> None:
    """A dual encoder's several images (retrieval: which of these is a cat?): each through the image processing,
    one image a batch row for now (:func:`_pair_text` repeats them against the texts); each image's name kept for
    the scores (two of one name told apart by their number)."""
    loaded = [_one_image(model, source, spec, prep) for source in sources]
    sizes = [tuple(int(d) for d in px.shape[1:]) for px, _ in loaded]
    if len(set(sizes)) > 1:  # the processing resizes each to the model's size: only a size-less export gets here
        said = ", ".join(f"{w}x{h}" for _, h, w in sizes)
        raise AttnvizError(
            f"the images came out at different sizes ({said}) and {model.path.name} runs them as one batch: give "
            "--image-size H W so each is resized to the same size",
            param="image_size",
        )
    names = [Path(s).name if isinstance(s, (str, os.PathLike)) else f"image {k}" for k, s in enumerate(sources)]
    if len(set(names)) < len(names):
        names = [f"{n} ({k})" for k, n in enumerate(names)]
    feeds[img_in.name] = np.concatenate([px for px, _ in loaded], axis=0)
    prep.shown = loaded[0][1]
    prep.pair_images = [shown for _, shown in loaded]
    prep.pair_image_names = names


def _one_image(model: AttnModel, source, spec: ip.ImageSpec, prep: Prepared) -> tuple[np.ndarray, np.ndarray]:
    """One image file (or array) through the model's processing: its pixel values and the image as seen."""
    if not isinstance(source, np.ndarray):
        return _load_image(model, source, spec, prep)
    from PIL import Image  # an image already in memory (GUI): through the same resize path

    fd, tmp = tempfile.mkstemp(suffix=".png")
    os.close(fd)
    Image.fromarray(source).save(tmp)
    try:
        return _load_image(model, tmp, spec, prep)
    finally:
        os.unlink(tmp)


def _load_image(model: AttnModel, source, spec: ip.ImageSpec, prep: Prepared) -> tuple[np.ndarray, np.ndarray]:
    """attnviz's resize / rescale / normalise, or a vision–language family's own processor (Idefics3 splits the
    image into tiles, and the prompt's expansion follows the split: kept for the text's encoding)."""
    loaded = model.load_image(source, spec)
    if loaded is None and prep.img_in is not None and prep.img_in.rank == 5:
        # attnviz's own path makes one [1, C, H, W] image; an images axis (a VLM's tiles) is a family processor's
        from attnviz.runtime.vlm_families import FAMILIES

        alone = ", ".join(c.name for c in FAMILIES.values() if c.tower_alone)
        raise AttnvizError(
            f"{model.path.name} takes {prep.img_in.describe()}: several images a row (a vision–language model's "
            f"tiles), which only the model family's processor makes ({alone}); put the repository's config.json and "
            f"preprocessor_config.json beside the file (or in the repository above onnx/){fix('feeds', what=prep.img_in.name)}",
            param="image",
        )
    if loaded is None:
        return ip.load_image(source, spec)
    prep.image_tiles, prep.image_info = loaded.tiles, loaded.info
    return loaded.pixels, loaded.shown


def _audio(model: AttnModel, req: AnalyzeRequest, feeds: dict, prep: Prepared) -> None:
    """Sound files (or mono samples at the model's rate) -> what its encoder takes: Whisper's log-mel features, or
    a raw-sample encoder's normalised samples (and its attention mask where the graph takes one); the encoder's
    positions are labelled by time (20 ms each for Whisper and wav2vec2's conv stack)."""
    aud_in = by_role(model, "audio")
    if req.audio is None and aud_in is None:
        if req.max_seconds is not None:  # it cut nothing: a user who gave it expected a clip cut
            raise AttnvizError(
                f"max seconds {spelled(req.max_seconds)}: {model.path.name} takes no sound to cut (its inputs: "
                f"{', '.join(i.name for i in model.inputs)}); leave it out",
                param="max_seconds",
            )
        return  # no sound here: the audio modules stay unimported (a text model's first map, first22b)
    from attnviz.runtime import audio as au
    from attnviz.runtime.audio_specs import audio_spec
    from attnviz.runtime.waveform import WaveSpec

    known = md.section(model.meta, "audio")  # the folder's feature extractor, when it has one
    if req.audio is None:
        if aud_in is not None and aud_in.name in feeds:
            if known:  # features or samples given raw: their positions still have times
                spec = audio_spec(known)
                n = spec.positions(int(np.shape(feeds[aud_in.name])[-1]))
                prep.src_rows = [TokenAxis(au.frame_labels(n, spec))]
        elif aud_in is not None:
            raise AttnvizError(f"{model.name} takes audio ({aud_in.describe()}); {fix('sound_file')}", param="audio")
        return
    if aud_in is None:
        raise _takes_no(model, "audio")
    if not known:
        raise AttnvizError(
            f"{model.name} takes {aud_in.describe()} and no Whisper or wav2vec2 preprocessor_config.json is beside "
            "it to say how a sound becomes that input; put the model's feature extractor config there"
            f"{fix('feeds', what=aud_in.name)}",
            param="audio",
        )
    spec = audio_spec(known)
    clips = list(req.audio) if isinstance(req.audio, (list, tuple)) else [req.audio]
    if not clips:
        raise AttnvizError(f"no audio clip given; {fix('sound_file')}", param="audio")
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
    values, mask = spec.encode(waves)
    feeds[aud_in.name] = values.astype(np.dtype(aud_in.dtype))
    mask_in = by_role(model, "mask")
    if mask is not None and mask_in is not None and mask_in.name not in feeds:
        # the extractor's mask where it returns one; else none, as transformers runs such a model (all ones)
        given = mask if getattr(spec, "return_attention_mask", False) else np.ones_like(mask)
        feeds[mask_in.name] = given.astype(np.dtype(mask_in.dtype))
    elif mask is not None and len({len(w) for w in waves}) > 1:
        prep.notes.append(
            f"{model.path.name} takes no attention mask: the shorter clips' padding ({spec.padding_value:g}) is "
            "heard as sound and attended to; run them one at a time to see each alone"
        )
    prep.audio = names
    shown = spec.display(waves, values)
    prep.track = AudioTrack(waves, shown, spec.sampling_rate, spec.hop_length, spec.frame_seconds)
    n = spec.positions(values.shape[-1])
    prep.src_rows = [TokenAxis(au.frame_labels(n, spec))]
    if isinstance(spec, WaveSpec):  # an encoder alone on the sound: each clip's loudness above its frames' columns
        prep.shorten = Shorten(aud_in.name, spec.sampling_rate, "max_seconds", "the clip")  # samples grow the need
        padded = len({len(w) for w in waves}) > 1
        prep.src_rows = [
            TokenAxis(
                au.frame_labels(n, spec),
                values=spec.levels(w, n),
                pad=[i >= spec.positions(len(w)) for i in range(n)] if padded else None,
            )
            for w in waves
        ]


def _speech_prompts(model: AttnModel, prep: Prepared, batch: int) -> list[list[int]] | None:
    """A speech decoder's forced prompt per row (the language detected per clip where the config leaves it
    open), or None for any other model."""
    section = md.section(model.meta, "speech_prompt")
    if not section or prep.dec_in is None:
        return None
    from attnviz.runtime.speech import SpeechPrompt

    prompt = SpeechPrompt.from_meta(section)
    dec_name = prep.dec_in.name

    def start_logits(ids: list[int]) -> np.ndarray:
        logits = model.logits({**prep.feeds, dec_name: np.asarray([ids] * batch, np.int64)})
        return logits[:, -1] if logits.ndim == 3 else logits

    rows = prompt.rows(start_logits, batch)
    if prompt.language_slot is not None and prep.tgt_tok is not None:
        found = sorted({prep.tgt_tok.label(r[prompt.language_slot]) for r in rows})
        prep.notes.append(f"{LANGUAGE}: {', '.join(found)}")
    return rows


# the builders of an encoder's non-text media, one per kind: each fills its input's feeds (and the source axes) from
# the request, or refuses it in one line when the model takes no such input
MEDIA_BUILDERS = (_image, _audio)


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
            f"step first){fix('feeds', what='the cache')}"
        )


@dataclass
class _Build:
    """What the input builders share while :func:`prepare` runs: the request, the model's input roles, and what
    the source builder found for the decoder (its tokenizers, a prompt, a caption)."""

    model: AttnModel
    req: AnalyzeRequest
    prep: Prepared
    series_in: ip.IOInfo | None
    tok_in: ip.IOInfo | None
    dec_in: ip.IOInfo | None
    src_tok: ip.TextEncoder | None = None
    tgt_tok: ip.TextEncoder | None = None
    prompt: list[int] | None = None
    caption: str | None = None
    # an encoder–decoder's text source with a teacher-forced target: its tokens before and after --max-tokens (the
    # target is cut by the same N, and one note says what both sides lost)
    source_cut: tuple[int, int] | None = None

    @property
    def feeds(self) -> dict:
        return self.prep.feeds

    def fed_ndim(self, i: ip.IOInfo | None) -> int:
        """The axes of the array the raw feeds give this input (0: none given)."""
        return self.feeds[i.name].ndim if i is not None and i.name in self.feeds else 0


def _no_tokenizer(model: AttnModel) -> AttnvizError:
    return AttnvizError(
        f"no tokenizer for {model.path.name}: put tokenizer.json beside the model or choose a tokenizer file",
        param="tokenizer",
    )


# -- source builders: one per kind of input, the first whose test holds builds the source rows ------------------
def _series_text(b: _Build) -> None:
    """A forecaster's series typed as numbers (a model with a series input and no token input)."""
    assert b.series_in is not None and b.req.text is not None
    vals = ip.parse_series(b.req.text)
    shape = [1, len(vals)] + ([1] if b.series_in.rank == 3 else [])
    b.feeds[b.series_in.name] = vals.reshape(shape[: b.series_in.rank]).astype(np.float32)
    b.prep.src_rows = [series_axis(vals)]


def _prompt_text(b: _Build) -> None:
    """A decoder-only or captioning graph's text is its decoder's prompt."""
    assert b.req.text is not None
    b.src_tok, b.tgt_tok = b.model.tokenizers
    tok = b.tgt_tok or b.src_tok
    if tok is None:
        raise _no_tokenizer(b.model)
    # a VLM's expansion of its image placeholder follows the image's split, and its placeholders the images given
    tok = tok.for_images(b.prep.image_tiles_each)
    if b.prep.image_count > 1:  # several images: their tokens' labels and grids follow each one's split
        b.tgt_tok = tok
    enc = tok.encode(b.req.text, add_special=False)
    kept = fit_positions(b.model, enc, b.req.max_tokens, b.prep.notes)
    _say_unknown(b, tok, kept, len(kept.ids) < len(enc.ids))
    b.prompt = kept.ids


def _say_unknown(b: _Build, tok, kept, cut: bool) -> None:
    """A text mostly of the unknown token gets a note (runtime/unknown_tokens.py), counted over the tokens that
    run (``kept``: after ``--max-tokens``): the whole text's count said "6 of 9 tokens are [UNK]" of a run whose
    five tokens were all known, and nothing of one whose kept tokens were all [UNK]."""
    from attnviz.runtime.unknown_tokens import unknown_note

    note = unknown_note(tok, kept, kept_text() if cut else "the text")
    if note is not None:
        b.prep.notes.append(note)


# what the note counts where --max-tokens cut the text (no "(--max-tokens N)": that marks the cut's own note)
def kept_text() -> str:
    """What the note counts where max tokens cut the text, in the words of who asked."""
    return fix("cut_text")


def _caption_text(b: _Build) -> None:
    """An image encoder with its own decoder input (VisionEncoderDecoder): the text is the caption so far."""
    b.caption = b.req.text


def _encoder_text(b: _Build) -> None:
    """A text (and a sentence pair for an encoder alone) into the encoder's token inputs."""
    assert b.req.text is not None
    b.src_tok, b.tgt_tok = b.model.tokenizers
    if b.src_tok is None:
        raise _no_tokenizer(b.model)
    pair = None if b.dec_in is not None else b.req.text_pair
    enc = b.src_tok.encode(b.req.text, pair)
    if not enc.ids:
        raise AttnvizError("the text gives no tokens; type some words")
    cut_as = (b.src_tok, b.req.text, pair) if pair is not None else None
    forced = b.dec_in is not None and bool(b.req.text_pair)  # an encoder–decoder's target: noted with its cut
    n = len(enc.ids)
    enc = fit_positions(b.model, enc, b.req.max_tokens, None if forced else b.prep.notes, cut_as)
    _say_unknown(b, b.src_tok, enc, len(enc.ids) < n)
    if forced:
        b.source_cut = (n, len(enc.ids))
    fill_text_inputs(b.model, b.feeds, [enc.ids], enc.type_ids, ENCODER_ROLES)
    b.prep.src_rows = [TokenAxis(enc.tokens, enc.special)]


def _text_refused(b: _Build) -> None:
    raise AttnvizError(
        f"{b.model.path.name} takes no text input (its inputs: {', '.join(i.describe() for i in b.model.inputs)})"
    )


def _fed_tokens(b: _Build) -> None:
    """Token ids in the raw feeds: every row labelled, padding (mask 0) special."""
    assert b.tok_in is not None
    b.src_tok, b.tgt_tok = _tokenizers_or_none(b.model)
    keep = _mask_rows(b.feeds, b.model, "mask", b.prep.batch)
    b.prep.src_rows = [labels(b.src_tok, row, k) for row, k in zip(b.feeds[b.tok_in.name], keep)]


def _fed_series(b: _Build) -> None:
    assert b.series_in is not None
    b.prep.src_rows = [series_axis(np.ravel(row)) for row in b.feeds[b.series_in.name]]


def _has_text(b: _Build) -> bool:
    return b.req.text is not None


def _image_and_text(b: _Build) -> bool:
    """A dual encoder (CLIPModel, SiglipModel whole): an image tower and a text tower, no decoder; every run feeds
    both, ``--image`` with ``--text``."""
    return b.model.kind == "vision" and b.tok_in is not None and b.prep.img_in is not None


def _pair_text(b: _Build) -> None:
    """A dual encoder's text: into its text tower's token inputs, as any encoder's (the image went in through
    :func:`_image`); its rows become the text tower's axis (the image's patches are the other).  Several texts
    (zero-shot: one image against candidate texts) are one batch row each, padded as the tokenizer pads: row i is
    the image and text i, which the pair logits score.  Several images (:func:`_dual_images`) are each scored
    against every text: row r is image r // texts and text r % texts (:meth:`PairLayout.grid`), one text against
    several images its rows the images.  Each image and each text is fed once, the towers' batches apart (the rows
    made after the run: runtime/dual_towers.py); a graph of a fixed batch is fed the rows, each image repeated."""
    images = b.prep.pair_images
    if b.req.texts is None and images is None:
        _encoder_text(b)
        return
    from attnviz.runtime.text_batch import pad_rows, padding_for
    from attnviz.runtime.unknown_tokens import unknown_note

    assert b.tok_in is not None and b.prep.img_in is not None
    b.src_tok, b.tgt_tok = b.model.tokenizers
    if b.src_tok is None:
        raise _no_tokenizer(b.model)
    texts = list(b.req.texts) if b.req.texts is not None else [str(b.req.text)]
    n_images = len(images) if images is not None else 1
    if n_images > 1 and b.req.text_pair is not None:
        raise AttnvizError(
            "several images are scored against texts alone, no text pair: drop --text-pair", param="text_pair"
        )
    if n_images > 1 and len(texts) > 1 and len(set(texts)) < len(texts):  # the table's columns are the texts
        again = next(t for k, t in enumerate(texts) if t in texts[:k])
        raise AttnvizError(f"the text {again!r} is given twice; give each candidate text once", param="text")
    encs = []
    for k, text in enumerate(texts):
        enc = b.src_tok.encode(text)
        if not enc.ids:
            raise AttnvizError(f"text {k + 1} ({text!r}) gives no tokens; type some words", param="text")
        n = len(enc.ids)
        notes: list[str] = []
        enc = fit_positions(b.model, enc, b.req.max_tokens, notes)
        b.prep.notes += [f"text {k + 1}: {x}" for x in notes]
        unknown = unknown_note(b.src_tok, enc, f"text {k + 1}" + (" as cut" if len(enc.ids) < n else ""))
        b.prep.notes += [unknown] if unknown is not None else []
        encs.append(enc)
    pad = padding_for(b.model, b.src_tok)
    rows, masks = pad_rows(encs, pad)  # each text once: the text tower's batch (runtime/dual_towers.py)
    # every image against every text: row r is image r // texts and text r % texts
    layout = PairLayout.grid(n_images, len(texts))
    b.prep.notes += [pad.length_note] if pad.length_note else []
    fill_text_inputs(b.model, b.feeds, rows, None, ENCODER_ROLES)
    mask_in = by_role(b.model, "mask")
    if mask_in is not None:
        b.feeds[mask_in.name] = np.asarray(masks, b.feeds[mask_in.name].dtype)
    elif len({len(e.ids) for e in encs}) > 1:  # the shorter texts' pads are read as tokens, as the model's own
        b.prep.notes.append(  # batched call without a mask reads them
            f"{b.model.path.name} takes no attention mask: the shorter texts' padding is attended as tokens"
        )
    if not pad.source and any(0 in m for m in masks):
        b.prep.notes.append(
            "the texts were padded with id 0: neither the tokenizer files nor the model name a pad token"
        )
    b.feeds[b.prep.img_in.name] = b.feeds[b.prep.img_in.name][:n_images]  # each image once: the image tower's
    b.prep.pair_layout = layout
    b.prep.towers_apart = dual_towers.fed_apart(b.model)
    if not b.prep.towers_apart:  # a graph of a fixed batch: the pairs as rows, each image repeated per text
        b.feeds.update(dual_towers.as_rows(b.model, b.feeds, layout))
    b.prep.batch = len(layout.row_text)
    axes = [labels(b.src_tok, r, m) for r, m in zip(rows, masks)]
    b.prep.src_rows = [axes[j] for j in layout.row_text]


def _several_texts_refused(b: _Build) -> None:
    """Several texts for a model that takes one: said in one line, naming what takes several."""
    n = len(b.req.texts or ())
    if _image_and_text(b):  # a dual encoder with a text pair: candidates are texts alone
        why = "several texts are candidates alone, no text pair"
    else:
        why = f"{b.model.path.name} ({b.model.kind}) takes one text"
    raise AttnvizError(several_texts_message(n, why), param="text")


def several_texts_message(n: int, why: str) -> str:
    """The one line for ``n`` texts where one is taken (``why``: what takes one); the window says the same."""
    return (
        f"{n} texts given and {why}; several texts (--text once per text) are for a dual encoder (CLIP, SigLIP), "
        "each scored against the image(s): give one text"
    )


def _pair_refused(b: _Build) -> None:
    """An image without a text for a dual encoder: said in one line, before onnxruntime names a missing input."""
    assert b.tok_in is not None and b.prep.img_in is not None
    raise AttnvizError(
        f"{b.model.path.name} is a dual encoder (an image tower and a text tower, {b.prep.img_in.name} and "
        f"{b.tok_in.name}): give a text with the image",
        param="text",
    )


# (test, builder) in order; no match: the source is the raw feeds (or an image) as they are
SOURCE_BUILDERS: list[tuple[Callable[[_Build], bool], Callable[[_Build], None]]] = [
    (
        lambda b: b.req.texts is not None and (not _image_and_text(b) or b.req.text_pair is not None),
        _several_texts_refused,
    ),
    (lambda b: _has_text(b) and b.series_in is not None and b.tok_in is None, _series_text),
    (lambda b: _has_text(b) and b.prep.decoder_is_tokens, _prompt_text),
    (lambda b: _has_text(b) and b.prep.img_in is not None and b.dec_in is not None and b.tok_in is None, _caption_text),
    (lambda b: _has_text(b) and _image_and_text(b), _pair_text),
    (lambda b: _has_text(b) and b.tok_in is not None, _encoder_text),
    (_has_text, _text_refused),
    (lambda b: _image_and_text(b) and b.fed_ndim(b.tok_in) == 0, _pair_refused),
    (lambda b: b.fed_ndim(b.tok_in) == 2 and not b.prep.decoder_is_tokens, _fed_tokens),
    (lambda b: b.fed_ndim(b.series_in) >= 2, _fed_series),
]


def source_builder(b: _Build) -> Callable[[_Build], None] | None:
    """The builder for this request's source input (registry lookup: the first whose test holds)."""
    return next((build for test, build in SOURCE_BUILDERS if test(b)), None)


# -- the decoder side: given prompts, a start (+ forced target) prompt, or refusing generation --------------------
def _decoder_prompts(b: _Build) -> None:
    assert b.dec_in is not None
    prep = b.prep
    if b.src_tok is None and b.tgt_tok is None:
        b.src_tok, b.tgt_tok = _tokenizers_or_none(b.model)
    prep.tgt_tok = b.tgt_tok or b.src_tok
    if b.prompt is not None:
        prep.prompts = [list(b.prompt)]
    elif b.fed_ndim(b.dec_in) == 2:
        prep.prompts = [[int(x) for x in row] for row in b.feeds[b.dec_in.name]]
        prep.decoder_given = True
    else:
        starts = _speech_prompts(b.model, prep, prep.batch)  # Whisper's forced prompt (a language per clip)
        prep.prompts = (
            [_start_prompt(b, start) for start in starts] if starts else [_start_prompt(b) for _ in range(prep.batch)]
        )
        if starts:
            from attnviz.runtime.speech import SpeechPrompt

            prep.speech_prompt = len(starts[0])  # every row's forced prompt is as long (its language may differ)

            SpeechPrompt.from_meta(md.section(b.model.meta, "speech_prompt")).check_room(
                len(prep.prompts[0]), b.req.generate, b.model.name
            )
    if b.model.kind == "decoder" and not prep.prompts[0]:
        raise AttnvizError("a decoder needs a prompt: give a text", param="text")


def _start_prompt(b: _Build, start_ids: list[int] | None = None) -> list[int]:
    """The decoder's start token (or a speech model's forced prompt), then the caption or the text pair to force
    (teacher forcing).  An encoder–decoder's text pair after a text source is cut by ``--max-tokens`` as a corpus
    cuts it (:func:`~attnviz.runtime.truncation.decoder_rows`); a caption or a speech model's is not."""
    from attnviz.runtime.limits import SHORTEN, check_positions
    from attnviz.runtime.truncation import SourceTargetCut, cut_flag, decoder_rows

    sp = md.section(b.model.meta, "special")
    start = sp.get("decoder_start", sp.get("bos"))
    prompt = list(start_ids) if start_ids is not None else [int(start if start is not None else 0)]
    forced = b.caption if b.caption is not None else b.req.text_pair
    if not forced:
        return prompt
    if b.prep.tgt_tok is None:
        raise AttnvizError(
            "no target tokenizer to encode the text pair; put tokenizer.json beside the model", param="tokenizer"
        )
    enc = b.prep.tgt_tok.encode(forced, add_special=False)
    target = enc.ids
    what = "the caption" if b.caption is not None else TARGET_TEXT
    if b.caption is not None or b.source_cut is None:
        prompt += target
        _say_unknown_target(b, enc, len(target), what)
        check_positions(b.model, len(prompt), what, SHORTEN)
        return prompt
    rows = decoder_rows(prompt, target, b.req.max_tokens)
    cut = SourceTargetCut(b.source_cut, (len(prompt) + len(target), len(rows)))
    if cut.cut:
        b.prep.notes.append(f"source and target truncated {cut_flag(b.req.max_tokens)}: {cut.describe()}")
    kept = max(0, len(rows) - len(prompt))
    _say_unknown_target(b, enc, kept, fix("cut_what", what=what) if kept < len(target) else what)
    check_positions(b.model, len(rows), TARGET_TEXT)  # past the positions: offers --max-tokens
    return rows


TARGET_TEXT = "the text pair (decoder side)"  # a teacher-forced target: its notes name the side


def _say_unknown_target(b: _Build, enc: ip.Encoded, kept: int, what: str) -> None:
    """The forced target's (a text pair's, a caption's) unknown-token note, as the source text's
    (:func:`_say_unknown`), counted over its ``kept`` first tokens (those that run), by the target's tokenizer."""
    from attnviz.runtime.unknown_tokens import unknown_note

    assert b.prep.tgt_tok is not None
    part = ip.Encoded(enc.ids[:kept], enc.tokens[:kept], enc.special[:kept], enc.type_ids[:kept])
    note = unknown_note(b.prep.tgt_tok, part, what)
    if note is not None:
        b.prep.notes.append(note)


def _refuse_generation(b: _Build) -> None:
    """--generate on a model with no decoder input: say which file or model to use instead."""
    name = b.model.path.name
    if by_role(b.model, "encoder_states") is not None:  # a decoder file, with raw feeds
        raise AttnvizError(
            f"{name} is the decoder of an export: to generate, {fix('encoder_input')}",
            param="generate",
        )
    raise AttnvizError(
        f"{name} is {with_article(b.model.kind)} model with no decoder input; generation needs a decoder or "
        "encoder-decoder model",
        param="generate",
    )


def prepare(model: AttnModel, req: AnalyzeRequest) -> Prepared:
    feeds = ip.load_feeds(req.feeds) if isinstance(req.feeds, (str, Path)) else dict(req.feeds or {})
    feeds = {k: np.asarray(v) for k, v in feeds.items()}
    _check_encoder_cache(model, feeds)
    prep = Prepared(feeds=feeds)
    for media in MEDIA_BUILDERS:
        media(model, req, feeds, prep)
    # (one prompt's several images are no batch of rows)
    # (a dual encoder's several images: rows once the texts are in, _pair_text)
    several = (prep.img_in.name, "image_sizes") if (prep.images or prep.pair_images) and prep.img_in else ()
    prep.batch = max((v.shape[0] for k, v in feeds.items() if v.ndim >= 2 and k not in several), default=1)
    tok_in = by_role(model, "tokens")
    prep.dec_in = decoder_input(model)
    prep.decoder_is_tokens = prep.dec_in is not None and prep.dec_in is tok_in
    b = _Build(model, req, prep, by_role(model, "series"), tok_in, prep.dec_in)
    if req.text is not None and prep.batch > 1:
        raise AttnvizError("give a text or a batch of raw inputs, not both", param="inputs")
    build = source_builder(b)
    with ip.tokens_kept(req.max_tokens):  # the tokens cap counts what --max-tokens keeps (runtime/inputs.py)
        if build is not None:
            build(b)
        if len(prep.src_rows) != prep.batch:
            prep.src_rows = (prep.src_rows * prep.batch)[: prep.batch]  # an image batch: each row has one patch axis
        if prep.dec_in is not None:
            _decoder_prompts(b)
        elif req.generate:
            _refuse_generation(b)
    return prep


def decoder_feeds(model: AttnModel, prep: Prepared, rows: list[list[int]]) -> dict[str, np.ndarray]:
    """The full-run feeds with these decoder rows (given feeds run as they are)."""
    g = dict(prep.feeds)
    if not (prep.decoder_given and rows == prep.prompts):
        roles = ENCODER_ROLES if prep.decoder_is_tokens else DECODER_ROLES
        fill_text_inputs(model, g, rows, None, roles)
    fill_auxiliary(model, g, len(rows), len(rows[0]))
    marker = model.prompt_feed()
    if marker is not None and prep.prompts is not None and len(rows[0]) > len(prep.prompts[0]):
        # the rows are the prompt and generated ids (a re-run): the model learns which are which
        g[marker] = np.asarray(len(prep.prompts[0]), np.int64)
    return g


def decoder_axes(model: AttnModel, prep: Prepared, rows: list[list[int]], feeds: dict) -> list[TokenAxis]:
    role = "mask" if prep.decoder_is_tokens else "decoder_mask"
    keep = _mask_rows(feeds, model, role, len(rows))
    given = len(prep.prompts[0]) if prep.prompts else None  # the rows are the prompt, then the generated ids
    return [labels(prep.tgt_tok, r, k, given) for r, k in zip(rows, keep)]


def series_axis(values) -> TokenAxis:
    """A time series' axis is its time steps (t0 = the oldest value), not the values themselves; the values ride
    along, so that the views can plot the series above its maps."""
    vals = [float(v) for v in np.ravel(values)]
    return TokenAxis([f"t{i}" for i in range(len(vals))], values=vals)
