"""A model that is a set of files: Hugging Face optimum export folders, and the ``open_model`` dispatcher.

An optimum encoder–decoder export holds ``encoder_model.onnx``, ``decoder_model.onnx`` (full sequence),
``decoder_with_past_model.onnx`` (one step with the KV cache), ``decoder_model_merged.onnx`` (both behind an
``If``), ``tokenizer.json`` and ``config.json``.  :class:`ModelSet` presents the encoder and decoder files as
ONE encoder–decoder model with the original model's input names (``input_ids``, ``attention_mask``,
``decoder_input_ids``): the encoder runs once, its hidden states and mask feed the decoder, and the sites come
in the canonical order (encoder self, then per decoder layer self and cross).  Generation feeds the with-past
decoder's cache.  A vision->text export (``--task image-to-text-with-past``: a ViT-like encoder taking
``pixel_values``) is the same set with the image as the encoder's input (``pixel_values``,
``decoder_input_ids``, as transformers' ``VisionEncoderDecoderModel`` takes them); the folder's
``preprocessor_config.json`` gives the image size and normalisation.  A decoder-only folder (``model.onnx``) is
that one file, with the folder's config.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from attnviz import AttnvizError
from attnviz.core.attention import AttentionResult, PatchGrid, SiteInfo
from attnviz.core.setting_words import fix
from attnviz.runtime import builders as bd
from attnviz.runtime import inputs as ip
from attnviz.runtime.analyze import AnalyzeMethod
from attnviz.runtime.isolation import Taken
from attnviz.runtime.limits import PositionLimit
from attnviz.runtime.model import AttentionModel, IOInfo
from attnviz.runtime.protocol import AttnModel, EncoderPair
from attnviz.runtime.sidecar import (
    HUB_ONNX_FOLDER,
    beside,
    config_special,
    folder_image,
    sidecar,
    sidecar_json,
)
from attnviz.runtime.steps import StepPlan

if TYPE_CHECKING:
    from attnviz.runtime.generate import StepOut, StepsOut

ENCODER_FILE = "encoder_model.onnx"
DECODER_FILES = ("decoder_model.onnx", "decoder_model_merged.onnx")  # the first present runs full sequences
WITH_PAST_FILE = "decoder_with_past_model.onnx"
STATES = "encoder_hidden_states"  # FolderCache's learned shapes: the encoder's states (beside the presents by name)
LEARNED_SHAPES = 64  # the shapes fed whose states' and presents' shapes a folder keeps (FolderCache.start_steps)
SOURCE_ROLES = ("tokens", "image", "audio")  # what an encoder file of a set may take as its input
SINGLE_FILES = ("model.onnx", "decoder_model_merged.onnx", "decoder_model.onnx")  # decoder-only folders
# what `attnviz corpus --out DIR` always writes (corpus/output.py HEADS, RUN): such a folder is results to open in
# the window, not a model folder; defined here, at the bottom layer, because both the engine's folder message and
# the window's file rules (app/rules.py) need it
CORPUS_FILES = ("heads.parquet", "run.json")
# config.json model types whose attention windows attnviz places on the patch grid (attnviz.core.windows): the
# layout keys they share, read as they are written (Swinv2: the same windows, shift and patch merging, checked
# against transformers by the optimum zoo, session 22); other windowed families (donut-swin) are not checked
WINDOWED_MODEL_TYPES = ("swin", "swinv2")
WINDOW_KEYS = ("patch_size", "window_size", "depths")


def _folder_windows(model_file: Path) -> dict:
    """``attnviz.windows`` metadata from a Swin config.json (``{}`` for any other model)."""
    cfg = sidecar_json(model_file, "config.json")
    if cfg.get("model_type") not in WINDOWED_MODEL_TYPES:
        return {}
    return {k: cfg[k] for k in WINDOW_KEYS if k in cfg}


def _with_config(model: AttentionModel) -> AttentionModel:
    """A file from a folder: special tokens, image preprocessing and a window layout from the folder's config
    files where its own metadata has none."""
    if not isinstance(model.meta.get("special"), dict):
        special = config_special(model.path)
        if special:
            model.meta["special"] = special
    if "image" in model.roles.values() and not isinstance(model.meta.get("image"), dict):
        image = folder_image(model.path)
        if image:
            model.meta["image"] = image
    if "audio" in model.roles.values() and not isinstance(model.meta.get("audio"), dict):
        from attnviz.runtime.audio_specs import spec_for_model

        try:  # a Whisper encoder file alone, a wav2vec2-like encoder: its frames' times, --audio
            spec = spec_for_model(model.path)
        except AttnvizError:  # another extractor (Speech2Text's filter banks): the file still runs on raw feeds
            spec = None
        if spec is not None:
            model.meta["audio"] = dataclasses.asdict(spec)
    if "image" in model.roles.values() and not isinstance(model.meta.get("windows"), dict):
        windows = _folder_windows(model.path)
        if windows:
            model.meta["windows"] = windows
    return model


@dataclass(frozen=True)
class FolderLayout:
    """Which files of a folder play which part."""

    folder: Path
    encoder: Path
    decoder: Path
    with_past: Path | None

    @classmethod
    def find(cls, folder: Path) -> FolderLayout | None:
        enc = folder / ENCODER_FILE
        dec = next((folder / n for n in DECODER_FILES if (folder / n).is_file()), None)
        if not enc.is_file() or dec is None:
            return None
        past = folder / WITH_PAST_FILE if (folder / WITH_PAST_FILE).is_file() else None
        for f in (enc, dec, past):  # the folder was named, not these files: a link out of it is refused (core.links)
            if f is not None:
                beside(f, f)
        return cls(folder, enc, dec, past)


class ModelSet(AnalyzeMethod):
    """An encoder file and a decoder file run as one encoder–decoder model (the same :class:`AttnModel` surface
    as one file)."""

    needs_probe = False  # the folder says which file is which
    vision_tower = False  # an optimum export's encoder is a text or image encoder (a VLM folder is a VLMSet)
    OPTIONAL = ("attention_mask", "decoder_attention_mask")  # all ones when not given, as in transformers

    def __init__(
        self,
        layout: FolderLayout,
        provider: str = "auto",
        tokenizer: str | None = None,
        threads: int | None = None,
        decoder: AttentionModel | None = None,  # the decoder file already open (a file opened alone, paired)
    ):
        t0 = time.perf_counter()
        self.layout = layout
        self.path = layout.folder
        # "onnx" says little: optimum's README layout is MODEL/onnx/
        self.name = (
            layout.folder.parent.name
            if layout.folder.name == "onnx" and layout.folder.parent.name
            else layout.folder.name
        )
        # every file of the set opens with the same settings (the with-past file later, on first use)
        self._open = functools.partial(AttentionModel, provider=provider, tokenizer=tokenizer, threads=threads)
        self.encoder = self._open(layout.encoder)
        self.decoder = decoder if decoder is not None else self._open(layout.decoder)
        self._with_past: AttentionModel | None = None
        # the folder says which file is which: no guessing from causality
        for s in self.encoder._sites:
            s.stack = "encoder"
        for s in self.decoder._sites:
            s.stack = "decoder"
        self.encoder._stack_confirmed = self.decoder._stack_confirmed = True
        self.meta = {"special": config_special(layout.encoder)}
        # a trained demo folder's clip (runtime/sample.py) and declared alignment heads (the views open on them)
        for key in ("sample", "alignment"):
            if isinstance(self.encoder.meta.get(key), dict):
                self.meta[key] = self.encoder.meta[key]
        self.metadata: dict[str, str] = {}
        self._tokenizer_arg = tokenizer
        self._tokenizers: tuple[ip.TextEncoder | None, ip.TextEncoder | None] | None = None  # found on first use
        self._enc_cache: tuple[bytes, dict] | None = None  # encoder feeds -> its outputs (generation reuses them)
        # per shapes fed (FolderCache.shape_key): the shapes and dtypes of the encoder's states and the prompt's
        # presents, learned from a generation's first run, so that a later one can name them before they exist
        # (the memory checks of a generation run as one request, FolderCache.start_steps)
        self._chain_shapes: dict[tuple, dict[str, tuple[tuple[int, ...], str]]] = {}
        self._orders: dict[int, list[int] | None] = {}  # FolderCache's site order, per with-past file (by id)
        dec_in = {i.name: i for i in self.decoder.inputs}
        self._dec_names = {
            "tokens": self._by_role(self.decoder, "tokens"),
            "states": self._by_role(self.decoder, "encoder_states"),
            "mask": self._by_role(self.decoder, "mask"),  # the encoder's mask, for cross-attention
            "decoder_mask": self._by_role(self.decoder, "decoder_mask"),
        }
        if self._dec_names["tokens"] is None or self._dec_names["states"] is None:
            raise AttnvizError(
                f"{layout.decoder.name}: expected input_ids and encoder_hidden_states inputs "
                f"(it has {', '.join(dec_in)}); open the files one by one instead"
            )
        enc_roles = self.encoder.roles
        src = next((i for i in self.encoder.inputs if enc_roles[i.name] in SOURCE_ROLES), None)
        if src is None:
            raise AttnvizError(
                f"{layout.encoder.name}: neither a token, an image nor an audio input; open the files one by one instead"
            )
        # the original model's input names: transformers' seq2seq models take input_ids, VisionEncoderDecoder
        # pixel_values, Whisper input_features (log-mel frames); all take decoder_input_ids and decoder_attention_mask
        self.image = enc_roles[src.name] == "image"
        self.audio = enc_roles[src.name] == "audio"
        self.kind = "vision-decoder" if self.image else "encoder-decoder"
        if self.audio:
            self._open_audio(src)
        elif self.image:
            self.inputs = [IOInfo("pixel_values", src.dtype, ["batch", *src.shape[1:]])]
            image = folder_image(layout.encoder)
            if image:
                self.meta["image"] = image
        else:
            self.inputs = [IOInfo("input_ids", src.dtype, ["batch", "encoder_sequence"])]
            if "mask" in enc_roles.values():
                self.inputs.append(IOInfo("attention_mask", "int64", ["batch", "encoder_sequence"]))
        dec_tok = dec_in[self._dec_names["tokens"]]
        self.inputs.append(IOInfo("decoder_input_ids", dec_tok.dtype, ["batch", "decoder_sequence"]))
        self.inputs.append(IOInfo("decoder_attention_mask", "int64", ["batch", "decoder_sequence"]))
        self._source = self.inputs[0].name
        self.outputs = [IOInfo("logits", "float32", ["batch", "decoder_sequence", "vocab"])]
        self.no_attention_reason = self.encoder.no_attention_reason or self.decoder.no_attention_reason
        self.timings = {"load_s": time.perf_counter() - t0}

    def _open_audio(self, src: IOInfo) -> None:
        """A speech encoder (Whisper): its log-mel input, the feature extractor that makes it and the decoder's
        forced prompt, from the folder's preprocessor_config.json and generation_config.json."""
        from attnviz.runtime.audio import PREPROCESSOR, FeatureSpec
        from attnviz.runtime.speech import from_configs as speech_prompt

        enc = self.layout.encoder
        spec = FeatureSpec.for_model(enc)
        if spec is None:
            raise AttnvizError(
                f"{self.layout.folder.name}: {enc.name} takes {src.name} (log-mel frames) and the folder has no "
                f"{PREPROCESSOR}; put the feature extractor's {PREPROCESSOR} beside it (save_pretrained writes it)"
            )
        mels, frames = src.shape[1:3] if src.rank == 3 else (None, None)
        if (isinstance(mels, int) and mels != spec.feature_size) or (isinstance(frames, int) and frames != spec.frames):
            raise AttnvizError(
                f"{enc.name} takes {src.describe()}, and {PREPROCESSOR} makes {spec.feature_size} mel bins x "
                f"{spec.frames} frames; give the folder its own feature extractor's config"
            )
        self.inputs = [IOInfo("input_features", src.dtype, ["batch", spec.feature_size, spec.frames])]
        self.meta["audio"] = dataclasses.asdict(spec)
        gen, cfg = sidecar_json(enc, "generation_config.json"), sidecar_json(enc, "config.json")
        prompt = speech_prompt(gen, cfg)
        if prompt is not None:
            self.meta["speech_prompt"] = prompt.to_meta()
        # the heads whose cross-attention times words, and the median filter over it (as the configs say them:
        # checked where word times are made, runtime/audio_words.py, so a bad list never stops the folder opening)
        self.meta["speech_alignment"] = {
            "alignment_heads": gen.get("alignment_heads"),
            "median_filter_width": cfg.get("median_filter_width"),
        }
        # what transformers' Whisper generate never chooses: suppress_tokens always, begin_suppress_tokens first
        always, first = (gen.get(k, cfg.get(k)) for k in ("suppress_tokens", "begin_suppress_tokens"))
        if always or first:
            self.meta["suppress"] = {"always": always or [], "first": first or []}

    @property
    def position_limit(self) -> PositionLimit | None:
        """The source text's limit: the encoder file's (its metadata, position table or tokenizer_config.json)."""
        return self.encoder.position_limit

    def pair_with_encoder(self) -> EncoderPair | None:
        return None  # a set runs its own encoder

    def load_image(self, source, spec):
        return None  # an export folder's image goes through attnviz's own resize / rescale / normalise

    def several_images(self, count: int) -> str | None:
        ip.one_image_per_run(self.path.name, count)
        return None

    def vision_grids(self, n_keys: int) -> list[PatchGrid]:
        return []  # one image a run

    def tower_rows(self, n_keys: int) -> list[PatchGrid]:
        return []  # every row's image on the one grid

    @staticmethod
    def _by_role(model: AttentionModel, role: str) -> str | None:
        return next((i.name for i in model.inputs if model.roles[i.name] == role), None)

    # -- description -----------------------------------------------------------
    @property
    def roles(self) -> dict[str, str]:
        return {i.name: ip.guess_role(i.name, i.dtype, i.rank) for i in self.inputs}

    @property
    def sites(self) -> list[SiteInfo]:
        return self.encoder.sites + self.decoder.sites

    @property
    def provider(self) -> str:
        return self.decoder.provider

    @property
    def provider_note(self) -> str:
        return self.decoder.provider_note

    @property
    def tokenizers(self) -> tuple[ip.TextEncoder | None, ip.TextEncoder | None]:
        """(encoder-side, decoder-side) tokenizers."""
        if self._tokenizers is None:
            self._tokenizers = ip.find_tokenizers(self.layout.encoder, {}, self._tokenizer_arg)
        return self._tokenizers

    def probe(self) -> bool:
        """One short run of the set on dummy inputs of its own shapes (the image at the folder's size, a few
        tokens), for the head counts ``inspect`` shows; each file's own probe cannot build an image or states."""
        if all(s.heads for s in self.sites):
            return True
        src = self.inputs[0]
        if self.audio:
            first = np.zeros([1, *(int(d) for d in src.shape[1:])], np.dtype(src.dtype))
        elif self.image:
            spec = ip.image_spec(self.meta, src.shape)
            first = np.zeros((1, spec.channels, spec.height, spec.width), np.dtype(src.dtype))
        else:
            first = np.ones((1, 6), np.dtype(src.dtype))
        start = self.meta["special"].get("decoder_start", self.meta["special"].get("bos", 0))
        try:
            r = self.run({src.name: first, "decoder_input_ids": np.array([[start, start]], np.int64)}, mode="dense")
        except Exception:  # a dummy that does not fit changes nothing: heads stay unknown
            return False
        own = self.encoder._sites + self.decoder._sites
        if len(r.maps) != len(own):
            return False
        for site, m in zip(own, r.maps):
            site.heads = int(m.shape[1])
        return True

    def grid(self, n_keys: int, image_hw: tuple[int, int] | None = None) -> PatchGrid | None:
        """The image encoder's token grid, read from its graph at the size fed (as for a ViT file alone)."""
        return self.encoder.grid(n_keys, image_hw) if self.image else None

    def describe(self) -> dict:
        d = self.decoder.describe()
        d.update(
            {
                "model": str(self.path),
                "kind": self.kind,
                "files": {
                    "encoder": self.layout.encoder.name,
                    "decoder": self.layout.decoder.name,
                    "with_past": self.layout.with_past.name if self.layout.with_past else None,
                },
                "inputs": [vars(i) | {"role": self.roles[i.name]} for i in self.inputs],
                "outputs": [vars(o) for o in self.outputs],
                "sites": [s.to_dict() for s in self.sites],
                "no_attention_reason": self.no_attention_reason,
            }
        )
        if self.audio:
            d["audio"] = self._describe_audio()
        return d

    def _describe_audio(self) -> dict:
        """What the speech encoder hears (its window, rate and frames) and the prompt its decoder starts from."""
        from attnviz.runtime.audio import FeatureSpec

        spec = FeatureSpec.from_dict(self.meta["audio"])
        prompt = list(self.meta.get("speech_prompt", {}).get("ids", []))
        try:
            tok = self.tokenizers[1]
        except AttnvizError:  # an unreadable tokenizer.json: ids only (running the model says why)
            tok = None
        return {
            "sampling_rate": spec.sampling_rate,
            "seconds": spec.seconds,
            "mel_bins": spec.feature_size,
            "frames": spec.frames,
            "frame_seconds": spec.frame_seconds,
            "decoder_prompt": [
                "(language detected)" if t is None else (tok.label(t) if tok is not None else str(t)) for t in prompt
            ],
        }

    # -- feeds ---------------------------------------------------------------------
    def check_feeds(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = [i.name for i in self.inputs]
        for k in feeds:
            if k not in names:
                raise AttnvizError(f"unknown input {k!r}; this {self.kind} folder takes: {', '.join(names)}")
        out = {}
        for i in self.inputs:
            if i.name not in feeds:
                if i.name in self.OPTIONAL:
                    continue
                raise AttnvizError(f"missing input {i.name!r} ({i.describe()}); add it to the feeds")
            a = np.asarray(feeds[i.name])
            if a.ndim != i.rank:
                raise AttnvizError(f"input {i.name!r} expects rank {i.rank} {i.describe()}, got shape {tuple(a.shape)}")
            out[i.name] = a
        for mask, ids in (("attention_mask", "input_ids"), ("decoder_attention_mask", "decoder_input_ids")):
            if mask in out and out[mask].shape != out[ids].shape:
                raise AttnvizError(
                    f"{mask} has shape {out[mask].shape}, {ids} {out[ids].shape}; give them the same shape"
                )
        if out["decoder_input_ids"].shape[0] != out[self._source].shape[0]:
            raise AttnvizError(
                f"{self._source} and decoder_input_ids hold different batch sizes; give both the same rows"
            )
        if "decoder_attention_mask" in out and self._dec_names["decoder_mask"] is None:
            self._check_right_padding(out["decoder_attention_mask"])
        return out

    def _check_right_padding(self, mask: np.ndarray) -> None:
        """The decoder files take no mask of their own (optimum exports none): with causal attention a row padded
        on the right runs exactly as transformers runs it with the mask (no real token sees a later pad); left or
        inner padding cannot be given to the file, so it is refused rather than run unmasked."""
        m = np.asarray(mask) != 0
        if not (m[:, :1].all() and (m[:, :-1] >= m[:, 1:]).all()):
            raise AttnvizError(
                f"decoder_attention_mask pads inside or on the left, and {self.layout.decoder.name} takes no "
                "decoder mask; pad decoder_input_ids on the right (ones, then zeros)"
            )

    def _encoder_feeds(self, feeds: dict) -> dict:
        f = {}
        src = feeds[self._source]
        for i in self.encoder.inputs:
            role = self.encoder.roles[i.name]
            if role in SOURCE_ROLES:
                f[i.name] = src
            elif role == "mask":
                f[i.name] = feeds.get("attention_mask", np.ones(src.shape, np.int64))
        return f

    @staticmethod
    def _enc_key(ef: dict, mode: str) -> bytes:
        return b"".join(np.ascontiguousarray(v).tobytes() + str(v.shape).encode() for v in ef.values()) + mode.encode()

    def _encoded(self, ef: dict, mode: str) -> dict | None:
        """The encoder's outputs (and ``result``) kept from its last run, when that run had these feeds."""
        if self._enc_cache is not None and self._enc_cache[0] == self._enc_key(ef, mode):
            return self._enc_cache[1]
        return None

    def _encode(self, feeds: dict, mode: str = "dense") -> tuple[AttentionResult | None, dict]:
        """Run the encoder once per distinct input; returns (its result when it ran now, its outputs)."""
        ef = self._encoder_feeds(feeds)
        kept = self._encoded(ef, mode)
        if kept is not None:
            return None, kept
        r = self.encoder.run(ef, mode=mode)
        return r, self._keep_encoded(ef, mode, r)

    def _keep_encoded(self, ef: dict, mode: str, r: AttentionResult) -> dict:
        self._enc_cache = (self._enc_key(ef, mode), {"result": r, **r.outputs})
        return self._enc_cache[1]

    @property
    def _states_output(self) -> str:
        """The encoder output its decoder reads (``last_hidden_state``, else the first)."""
        names = [o.name for o in self.encoder.outputs]
        return "last_hidden_state" if "last_hidden_state" in names else names[0]

    def _decoder_feeds(self, model: AttentionModel, feeds: dict, enc_out: dict) -> dict:
        states = enc_out.get("last_hidden_state", next(v for k, v in enc_out.items() if k != "result"))
        f = {}
        roles = model.roles
        for i in model.inputs:
            role = roles[i.name]
            if role == "tokens":
                f[i.name] = feeds["decoder_input_ids"]
            elif role == "encoder_states":
                f[i.name] = states
            elif role == "mask":  # the encoder's padding (an image's patches are all real)
                f[i.name] = feeds.get("attention_mask", np.ones(states.shape[:2], np.int64))
            elif role == "decoder_mask":
                f[i.name] = feeds.get("decoder_attention_mask", np.ones(feeds["decoder_input_ids"].shape, np.int64))
        # a merged decoder (the only decoder of some folders) also takes the cache: empty, its branch off (no
        # sequence length given: positions are never guessed for a cached step)
        bd.fill_auxiliary(model, f, feeds["decoder_input_ids"].shape[0], None)
        return f

    # -- running ---------------------------------------------------------------------
    def run(self, feeds: dict[str, np.ndarray], mode: str = "auto") -> AttentionResult:
        feeds = self.check_feeds(feeds)
        ran, enc_out = self._encode(feeds, mode)
        enc = ran or enc_out["result"]
        dec = self.decoder.run(self._decoder_feeds(self.decoder, feeds, enc_out), mode=mode)
        info = dict(
            dec.info,
            model=self.name,
            model_path=str(self.path),
            run_s=dec.info.get("run_s", 0.0) + (enc.info.get("run_s", 0.0) if ran else 0.0),
        )
        return AttentionResult(
            maps=enc.maps + dec.maps, sites=enc.sites + dec.sites, outputs=dict(dec.outputs), info=info
        )

    def logits(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        feeds = self.check_feeds(feeds)
        _, enc_out = self._encode(feeds)
        return self.decoder.logits(self._decoder_feeds(self.decoder, feeds, enc_out))

    def cache_stepper(self) -> FolderCache | None:
        if self.layout.with_past is None:  # a merged decoder alone steps through its own cache branch
            return FolderCache.for_set(self, self.decoder)
        if self._with_past is None:
            self._with_past = self._open(self.layout.with_past)
        return FolderCache.for_set(self, self._with_past)

    def _site_order(self, past_model: AttentionModel) -> list[int] | None:
        """FolderCache.order_for, worked out once per file (the files' sites and inputs do not change)."""
        key = id(past_model)
        if key not in self._orders:
            self._orders[key] = FolderCache.order_for(self, past_model)
        return self._orders[key]


class FolderCache:
    """Generation steps over a folder: the full decoder for the prompt, then the with-past decoder per token.

    The with-past file's sites are matched to the full decoder's by node name (optimum exports both from the
    same modules), so each step's maps land at the right canonical site whatever that file's own labels say.
    generate.py's names are imported where used: a folder opened for one run never loads it (first map's CPU).
    """

    def __init__(self, ms: ModelSet, past_model: AttentionModel, order: list[int]):
        self.ms, self.past_model, self.order = ms, past_model, order
        self.n_enc = len(ms.encoder._sites)
        self.past_names = [i.name for i in past_model.inputs if past_model.roles[i.name] == "past"]
        self.cache: dict[str, np.ndarray] = {}
        self.feeds: dict = {}
        self.looping = False  # a loop beside the with-past session holds the cache (see steps)
        self.reserve = 0  # the rows the loop's maps keep for the prompt's (StepPlan.reserve)

    @classmethod
    def for_set(cls, ms: ModelSet, past_model: AttentionModel) -> FolderCache | None:
        order = ms._site_order(past_model)
        return None if order is None else cls(ms, past_model, order)

    @staticmethod
    def order_for(ms: ModelSet, past_model: AttentionModel) -> list[int] | None:
        """Where each of ``past_model``'s sites lands among the full decoder's (None: it cannot step the set)."""
        from attnviz.runtime.generate import present_name

        nodes = [s.node for s in ms.decoder.sites]
        order = []
        for s in past_model.sites:
            if s.node not in nodes:
                return None  # cannot tell which layer a site is: the full re-run stays exact
            order.append(nodes.index(s.node))
        outs = {o.name for o in ms.decoder.outputs}
        past = [i.name for i in past_model.inputs if past_model.roles[i.name] == "past"]
        if len(order) != len(nodes) or not past or not all(present_name(p) in outs for p in past):
            return None
        return order

    def start(self, feeds: dict) -> StepOut:
        from attnviz.runtime.generate import StepOut, present_name

        self.looping = False
        self.feeds = self.ms.check_feeds(feeds)
        enc_ran, enc_out = self.ms._encode(self.feeds, "dense")
        enc = enc_ran or enc_out["result"]
        r = self.ms.decoder.run(self.ms._decoder_feeds(self.ms.decoder, self.feeds, enc_out), mode="dense")
        self.cache = {p: r.outputs[present_name(p)] for p in self.past_names}
        states = enc_out[self.ms._states_output]
        learned = self.ms._chain_shapes
        if len(learned) >= LEARNED_SHAPES:  # a text folder fed many lengths: the oldest goes (a re-learn is one run)
            del learned[next(iter(learned))]
        learned[self.shape_key()] = {
            STATES: (tuple(states.shape), states.dtype.str),
            **{p: (tuple(a.shape), a.dtype.str) for p, a in self.cache.items()},
        }
        return StepOut(r.outputs["logits"][:, -1], self._prompt_maps(enc, r), self._info(r.info))

    def _prompt_maps(self, enc: AttentionResult, dec: AttentionResult) -> dict[int, np.ndarray]:
        maps = {j: m.array() for j, m in enumerate(enc.maps)}
        maps.update({self.n_enc + j: m.array() for j, m in enumerate(dec.maps)})
        return maps

    def shape_key(self) -> tuple:
        """What the shapes of the encoder's states and the prompt's presents follow from: the shapes fed."""
        return tuple((k, tuple(v.shape), v.dtype.str) for k, v in sorted(self.feeds.items()))

    def start_steps(
        self, feeds: dict, n: int, eos: int | None, suppress: tuple[int, ...]
    ) -> tuple[StepOut, StepsOut] | None:
        """:meth:`start`, the first token (greedy on the prompt's last logits, never one of ``suppress``) and the
        first chunk of :meth:`steps` as one run of the sessions (with crash isolation one request, not three:
        the encoder's states and the prompt's presents never leave the child, :meth:`AttentionModel.chain_loop`).
        Returns the prompt's step (logits, the encoder's and the prompt's maps) and the steps (the ids from the
        first token on, the steps' maps); None where it cannot: the first generation of these shapes (its run
        learns the shapes a later one names before they exist), or no loop beside the session."""
        from attnviz.runtime.generate import StepOut, StepsOut, present_name

        self.looping = False
        self.feeds = self.ms.check_feeds(feeds)
        plan = self.plan()
        known = self.ms._chain_shapes.get(self.shape_key())
        if plan is None or known is None:
            return None
        ms, runs = self.ms, []
        ef = ms._encoder_feeds(self.feeds)
        enc_out = ms._encoded(ef, "dense")
        if enc_out is None:  # the encoder runs as the chain's first stage, its states fed on from there
            runs.append(ms.encoder.prepare(ef, "dense"))
            states_in = ms._dec_names["states"]
            assert states_in is not None  # ModelSet refuses a decoder without it
            dtype = next(i.dtype for i in ms.decoder.inputs if i.name == states_in)
            enc_out = {ms._states_output: Taken(states_in, (0, ms._states_output), known[STATES][0], dtype)}
        runs.append(ms.decoder.prepare(ms._decoder_feeds(ms.decoder, self.feeds, enc_out), "dense"))
        d = len(runs) - 1
        dtypes = {i.name: i.dtype for i in self.past_model.inputs}
        cache = {p: Taken(p, (d, present_name(p)), known[p][0], dtypes[p]) for p in self.past_names}
        t0 = time.perf_counter()
        values, ids, finished, maps, info = self.past_model.chain_loop(
            runs, plan, self._step_feeds([0], enc_out, cache), 0, (d, "logits", suppress), n, eos
        )
        run_s = time.perf_counter() - t0
        if d:
            enc = ms.encoder.finish(runs[0], values[0], run_s)
            ms._keep_encoded(ef, "dense", enc)
        else:
            enc = enc_out["result"]
        r = ms.decoder.finish(runs[d], values[d], run_s)
        self.cache = {}  # the presents stayed with the loop (the step path below never follows a plan's start)
        self.looping = not finished and len(ids) < n  # the rest of the loop is held beside the session
        self.reserve = plan.reserve
        prompt = StepOut(r.outputs["logits"][:, -1], self._prompt_maps(enc, r), self._info(r.info))
        if maps is None:
            return prompt, StepsOut(ids, {}, {})
        maps_at = {self.n_enc + self.order[j]: m for j, m in enumerate(maps)}
        return prompt, StepsOut(ids, maps_at, self._info(info), plan.reserve)

    def _info(self, info: dict) -> dict:
        """A step's run facts, named after the folder (not the decoder file that ran the step)."""
        return dict(info, model=self.ms.name, model_path=str(self.ms.path))

    def plan(self) -> StepPlan | None:
        """How each step's feeds follow from the last for a loop beside the with-past decoder's session: only
        the token and the cache change (the encoder's states and mask stay), or None: one request per step."""
        from attnviz.runtime.generate import present_name, suppress_of

        maps = self.past_model.loop_maps()
        roles = self.past_model.roles
        if maps is None or self.feeds["decoder_input_ids"].shape[0] != 1:
            return None
        if any(r in ("positions", "cache_position", "decoder_mask") for r in roles.values()):
            return None  # what these hold per cached step is not derived here: the step path below stays exact
        outs = {o.name for o in self.past_model.outputs}
        return StepPlan(
            fetch=(),
            logits="logits",
            carry=tuple((p, present_name(p)) for p in self.past_names if present_name(p) in outs),
            token=next(i.name for i in self.past_model.inputs if roles[i.name] == "tokens"),
            flags=tuple((i.name, i.rank) for i in self.past_model.inputs if i.dtype == "bool" and i.rank <= 1),
            maps=maps,
            dtypes=tuple((i.name, i.dtype) for i in self.past_model.inputs),
            suppress=suppress_of(self.ms.meta).always,
            reserve=self.feeds["decoder_input_ids"].shape[1],  # the prompt's rows, before the first step
        )

    def steps(self, token: int, n: int, eos: int | None) -> StepsOut:
        """Up to ``n`` greedy steps in one chunk beside the with-past decoder's session (else one step)."""
        from attnviz.runtime.generate import StepsOut, one_step, suppress_of

        plan = None if self.looping else self.plan()
        if not self.looping and plan is None:
            return one_step(self, token, eos, suppress_of(self.ms.meta).always)
        if plan is not None:
            self.reserve = plan.reserve
        ids, _, maps, info = self.past_model.run_loop(
            plan, self._step_feeds([token]) if plan is not None else None, 0, token, n, eos
        )
        self.looping = True
        maps_at = {self.n_enc + self.order[j]: m for j, m in enumerate(maps)}
        return StepsOut(ids, maps_at, self._info(info), self.reserve if maps else 0)

    def _step_feeds(self, tokens: list[int], enc_out: dict | None = None, cache: dict | None = None) -> dict:
        f = {k: v for k, v in self.feeds.items() if not k.startswith("decoder_")}  # the encoder's side stays
        f["decoder_input_ids"] = np.asarray([[t] for t in tokens], np.int64)
        if enc_out is None:
            enc_out = self.ms._encode(self.feeds, "dense")[1]
        g = self.ms._decoder_feeds(self.past_model, f, enc_out)
        g.update(self.cache if cache is None else cache)
        for i in self.past_model.inputs:  # a merged decoder: its cache branch now
            if i.dtype == "bool" and i.rank <= 1:
                g[i.name] = np.ones([1] * i.rank, bool)
        return g

    def reorder(self, rows: np.ndarray) -> None:
        """Beam search (:mod:`attnviz.runtime.beams`): the cache's batch rows taken from the last run's row
        ``rows[i]`` for running beam ``i`` (numpy take on the batch axis); the encoder's input repeated to the
        beams' count the first time, so that its states (one encoder run, then kept) match the decoder's rows."""
        rows = np.asarray(rows, np.int64)
        self.cache = {p: np.take(v, rows, axis=0) if np.ndim(v) >= 1 else v for p, v in self.cache.items()}
        k = len(rows)
        if any(np.ndim(v) >= 2 and np.shape(v)[0] != k for v in self.feeds.values()):
            self.feeds = {
                n: np.repeat(v, k, axis=0) if np.ndim(v) >= 2 and np.shape(v)[0] == 1 else v
                for n, v in self.feeds.items()
            }

    def step(self, tokens: list[int]) -> StepOut:
        from attnviz.runtime.generate import StepOut, present_name

        r = self.past_model.run(self._step_feeds(tokens), mode="dense")
        for p in self.past_names:
            # the encoder half stays as the first run made it: a with-past file does not output it, and a merged
            # decoder's cache branch outputs an empty placeholder for it (a cache never loses rows or keys)
            new = r.outputs.get(present_name(p))
            old = self.cache[p]
            if new is not None and new.shape[0] == old.shape[0] and new.shape[-2] >= old.shape[-2]:
                self.cache[p] = new
        maps = {self.n_enc + self.order[j]: m.array() for j, m in enumerate(r.maps)}
        return StepOut(r.outputs["logits"][:, -1], maps, self._info(r.info))


class EncoderPairing:
    """How a decoder file of an export, opened alone and given a text or an image (optimum
    ``decoder_model*.onnx``), runs: it takes ``encoder_hidden_states``, which only an encoder makes, so the
    export's ``encoder_model.onnx`` beside it runs first, as the folder runs them (one encoder run, then this
    file).  The set is opened once, on first use (the GUI analyses many inputs).  No file outside the model's
    folder is read; without an encoder there, one line says what to do."""

    def __init__(self, model: AttentionModel, states: str):
        self.model, self.states = model, states
        self.pair: EncoderPair | None = None

    def __call__(self) -> EncoderPair:
        if self.pair is None:
            self.pair = self._open()
        return self.pair

    def _open(self) -> EncoderPair:
        model, states = self.model, self.states
        folder = model.path.parent
        enc = folder / ENCODER_FILE
        if not enc.is_file():
            raise AttnvizError(
                f"{model.path.name} takes {states} from an encoder, and there is no {ENCODER_FILE} beside it; "
                f"put the export's {ENCODER_FILE} in {folder} (or open the whole export folder)"
                f"{fix('feeds', what=states)}"
            )
        beside(model.path, enc)  # found beside the file, not named: a link out of its folder is refused (core.links)
        layout = FolderLayout(folder, enc, model.path, None)  # steps through this file's own cache, if it has one
        paired = ModelSet(
            layout,
            provider=model.requested_provider,
            tokenizer=model._tokenizer_arg,
            threads=model.threads,
            decoder=model,
        )
        paired.path, paired.name = model.path, model.name  # results and messages name the file that was opened
        return EncoderPair(paired, f"{model.path.name} ran on the encoder_hidden_states of {enc.name} beside it")


def is_corpus_results(path: str | Path) -> bool:
    p = Path(path)
    return p.is_dir() and all((p / name).is_file() for name in CORPUS_FILES)


_HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


def hub_name_hint(p: Path) -> str | None:
    """The line for a model that is not here but is named like a Hugging Face Hub model (``bert-base-uncased``,
    ``org/name``): attnviz reads local files only, so it says how to get one; None for anything else."""
    if p.exists() or p.is_symlink() or p.suffix.lower() == ".onnx" or not _HUB_NAME.fullmatch(str(p)):
        return None  # (a link that leads nowhere is a local file gone wrong, not a Hub name: said where it is read)
    return (
        f"{p}: no such file or folder here; attnviz opens local ONNX files: for the Hub model {str(p)!r}, "
        f"download it (huggingface-cli download {p} --local-dir DIR) and export it (attnviz export-hf DIR --out OUT)"
    )


def open_model(
    path: str | Path,
    provider: str = "auto",
    tokenizer: str | None = None,
    threads: int | None = None,
    variant: str | None = None,
):
    """Open a model file, or a folder: an optimum encoder–decoder export becomes one :class:`ModelSet`, a Hub
    vision–language repository one :class:`VLMSet` (``variant``: which of its quantized siblings; full precision
    by default)."""
    p = Path(path)
    hint = hub_name_hint(p)
    if hint is not None:
        raise AttnvizError(hint)
    if variant is None and not p.is_dir():  # a file: no vision-language layout to look for (its module not imported)
        return _open_file(p, provider, tokenizer, threads)
    from attnviz.runtime.vlm import VLMLayout, VLMSet  # (~3 ms of imports that a single file never needs)

    if variant is not None and (not p.is_dir() or VLMLayout.find(p, variant) is None):
        raise AttnvizError(
            f"{p}: --variant chooses among a Hub repository's quantized siblings (onnx/vision_encoder_q4.onnx, ...); "
            "this is not one: open the file itself",
            param="variant",
        )
    vlm = VLMLayout.find(p, variant)
    if vlm is not None:  # a Hub vision–language repository (REPO/ or REPO/onnx/): three files, one model
        return VLMSet(vlm, provider=provider, tokenizer=tokenizer, threads=threads)
    layout = FolderLayout.find(p)
    if layout is not None:
        return ModelSet(layout, provider=provider, tokenizer=tokenizer, threads=threads)
    found = sorted(f.name for f in p.glob("*.onnx"))
    hub = p / HUB_ONNX_FOLDER
    if not found and hub.is_dir() and any(hub.glob("*.onnx")):  # a Hub repository: REPO/onnx/ holds its export
        return open_model(hub, provider=provider, tokenizer=tokenizer, threads=threads)
    single = next((p / n for n in SINGLE_FILES if n in found), None)
    if single is None and len(found) == 1:
        single = p / found[0]
    if single is None:
        if not found and is_corpus_results(p):
            raise AttnvizError(
                f"{p}: an attnviz corpus results folder ({', '.join(CORPUS_FILES)}), not a model; "
                f"attnviz open {shlex.quote(str(p))} shows it"
            )
        if not found and _hf_weights_folder(p):
            raise AttnvizError(  # a Hugging Face download, not yet exported
                f"{p}: a Hugging Face model folder (config.json and weights) with no ONNX export; export it first: "
                f"attnviz export-hf {shlex.quote(str(p))} --out DIR, then open DIR"
            )
        if not found:
            raise AttnvizError(
                f"{p}: no .onnx file in this folder; give an ONNX model file or an optimum export folder"
            )
        raise AttnvizError(
            f"{p}: holds {len(found)} models ({', '.join(found[:6])}) and no optimum encoder/decoder pair; "
            "give one of the files"
        )
    beside(single, single)  # found in the folder the user named: a link out of it is refused (core.links)
    return _with_config(AttentionModel(single, provider=provider, tokenizer=tokenizer, threads=threads))


def _open_file(p: Path, provider: str, tokenizer: str | None, threads: int | None):
    """:func:`open_model` of one ``.onnx`` file."""
    m = AttentionModel(p, provider=provider, tokenizer=tokenizer, threads=threads)
    if any(m.roles[i.name] == "image" and i.rank == 5 for i in m.inputs):  # what vlm_tower.tower_family asks first:
        from attnviz.runtime.vlm_tower import TowerFrames, tower_family  # (its families load only for such a file)

        tower = tower_family(p, m.roles, m.inputs)
        if tower is not None:  # a VLM's vision file alone (Idefics3's): its images through the family's processor
            m.frames = TowerFrames(p, tower, m.inputs)
            for s in m._sites:  # its vision tower: an encoder, whatever a probe would guess
                s.stack = "encoder"
            m._stack_confirmed = True
            return _with_config(m)
    states = next((i.name for i in m.inputs if m.roles[i.name] == "encoder_states"), None)
    if states is not None:  # analyze() pairs it with its encoder on use
        m.encoder_pairing = EncoderPairing(m, states)
    config = sidecar(p, "config.json")
    return _with_config(m) if config is not None and config.is_file() else m


_: type[AttnModel] = ModelSet  # mypy checks here that an export folder satisfies the model Protocol


def _hf_weights_folder(p: Path) -> bool:
    """A Hugging Face download (a config and its torch weights) rather than an ONNX export.  Only names are looked
    at: the config is never read here (sidecar reads go through runtime/sidecar.py)."""
    names = {f.name for f in p.iterdir() if f.is_file()}
    return "config.json" in names and any(n.endswith((".safetensors", ".bin")) for n in names)
