"""A decoder-only vision–language model in the Hugging Face Hub's three-file ONNX layout, run as one model.

The Hub (transformers.js / onnx-community) keeps a VLM as ``REPO/onnx/vision_encoder.onnx`` (pixel values ->
image features), ``embed_tokens.onnx`` (ids -> embeddings) and ``decoder_model_merged.onnx`` (embeddings, mask,
positions, past key values -> logits, present), with ``config.json``, ``preprocessor_config.json`` and the
tokenizer in ``REPO/``.  The caller does what the processor and the model's forward do between the files:
:class:`VLMSet` expands the prompt's image placeholder to the image's tokens as the family's processor does,
replaces those rows of the embeddings with the features, in order (LLaVA's masked_scatter, Idefics3's
inputs_merger), and runs the decoder on the spliced embeddings with the mask, positions counted over the real
tokens and an empty cache.  What differs between families (image processing, tiles, the expansion, the labels
and grid of the image tokens) lives in :mod:`attnviz.runtime.vlm_families`, one class each, chosen by
config.json's ``model_type``; others are named and refused in one line.  Its sites are the vision tower's
self-attention (the encoder block, one map per prompt row holding all its images) then the decoder's
self-attention, whose image-token columns are labelled by their patch as the tower's keys are (``(r,c)``;
``tile k·(r,c)`` for a tile: :mod:`attnviz.core.patch_names`); the result's ``token_grid`` places them on the
image, so Image regions shows a word's row over it.  Generation steps through the decoder's cache (:class:`VLMCache`); an optimum ``If``-merged
decoder runs the prompt through its without-past branch (``use_cache_branch`` false) and each cached step through
the other.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnviz import AttnvizError
from attnviz.core.attention import AttentionResult, PatchGrid, SiteInfo
from attnviz.core.frames import FramesMap
from attnviz.core.setting_words import fix
from attnviz.runtime import builders as bd
from attnviz.runtime import inputs as ip
from attnviz.runtime.analyze import AnalyzeMethod
from attnviz.runtime.chain import splice
from attnviz.runtime.generate import StepOut, StepsOut, one_step, present_name
from attnviz.runtime.isolation import Spliced, Taken
from attnviz.runtime.limits import PositionLimit
from attnviz.runtime.model import AttentionModel, IOInfo, PreparedRun, run_stages
from attnviz.runtime.protocol import AttnModel, EncoderPair
from attnviz.runtime.sidecar import HUB_ONNX_FOLDER, beside, config_special, folder_image, sidecar_json
from attnviz.runtime.steps import StepPlan
from attnviz.runtime.vlm_families import Family, LoadedImage, Tiles, check_several, family_for, laid_out

LEARNED_SHAPES = 64  # the shapes fed whose presents' shapes a VLM keeps (VLMCache.start_steps)
VISION_FILE, EMBED_FILE, DECODER_FILE = "vision_encoder.onnx", "embed_tokens.onnx", "decoder_model_merged.onnx"


STEMS = tuple(n.removesuffix(".onnx") for n in (VISION_FILE, EMBED_FILE, DECODER_FILE))
FULL = "full"  # the variant name of the unsuffixed (full-precision) files


@dataclass(frozen=True)
class VLMLayout:
    """The three files of a Hub VLM: in ``FOLDER/onnx/`` (the repository opened) or in the ``onnx`` folder itself.

    The Hub keeps quantized siblings beside them, one suffix for all three (``decoder_model_merged_q4.onnx``,
    ``_int8``, ``_fp16``, ``_quantized``, ...): each suffix whose three files are all there is a variant; the
    unsuffixed files (full precision) are opened unless a variant is asked for."""

    folder: Path  # the folder that was opened
    vision: Path
    embed: Path
    decoder: Path
    variant: str = FULL
    variants: tuple[str, ...] = (FULL,)

    @staticmethod
    def variants_in(d: Path) -> list[str]:
        """The variants whose three files are in ``d`` (full precision first, then by name)."""
        found = set()
        for f in d.glob(f"{STEMS[2]}*.onnx") if d.is_dir() else ():
            suffix = f.name.removesuffix(".onnx")[len(STEMS[2]) :]
            if (suffix == "" or suffix.startswith("_")) and all((d / f"{s}{suffix}.onnx").is_file() for s in STEMS):
                found.add(suffix[1:] or FULL)
        return sorted(found, key=lambda v: (v != FULL, v))

    @staticmethod
    def incomplete_in(d: Path) -> str | None:
        """One line naming the file missing where two of a set's three files are there and the third is not (a
        download cut short): that folder otherwise opened its decoder alone, as a model of numeric series."""
        names = {f.name for f in d.glob("*.onnx")} if d.is_dir() else set()
        suffixes = {n.removesuffix(".onnx")[len(s) :] for n in names for s in STEMS if n.startswith(s)}
        for suffix in sorted(x for x in suffixes if x == "" or x.startswith("_")):
            files = [f"{s}{suffix}.onnx" for s in STEMS]
            missing = [f for f in files if f not in names]
            if len(missing) == 1:
                return (
                    f"{d}: {', '.join(f for f in files if f not in missing)} of a vision–language model and no "
                    f"{missing[0]}; the three files go together: download {missing[0]} again, or open one file itself"
                )
        return None

    @classmethod
    def find(cls, folder: Path, variant: str | None = None) -> VLMLayout | None:
        for d in (folder / HUB_ONNX_FOLDER, folder):
            have = cls.variants_in(d)
            if not have:
                incomplete = cls.incomplete_in(d) if variant is None else None
                if incomplete is not None:
                    raise AttnvizError(incomplete)
                continue
            want = (variant or FULL).removeprefix("_")
            if want not in have:
                raise AttnvizError(
                    f"{folder}: no {'full-precision' if variant is None else repr(variant)} set of "
                    f"{', '.join(n for n in (VISION_FILE, EMBED_FILE, DECODER_FILE))}; its variants: "
                    f"{', '.join(have)} {fix('choose_variant')}",
                    param="variant",
                )
            suffix = "" if want == FULL else f"_{want}"
            vision, embed, decoder = (d / f"{s}{suffix}.onnx" for s in STEMS)
            for f in (vision, embed, decoder):  # the folder was named, not these files: no link out of it (core.links)
                beside(f, f)
            return cls(folder, vision, embed, decoder, variant=want, variants=tuple(have))
        return None


def read_family(layout: VLMLayout) -> Family:
    """The family from config.json (REPO/ above onnx/, or beside the files), with its processor's config files."""
    config = sidecar_json(layout.decoder, "config.json")
    if not config:
        raise AttnvizError(
            f"{layout.folder}: the vision–language layout ({VISION_FILE}, {EMBED_FILE}, {DECODER_FILE}) and no "
            "readable config.json beside the files (or in the repository above onnx/); put the model's config.json there"
        )
    pre = sidecar_json(layout.decoder, "preprocessor_config.json")
    return family_for(config, pre, sidecar_json(layout.decoder, "processor_config.json"), str(layout.folder))


SIZES = "image_sizes"  # one prompt's several images of their own sizes: each one's (height, width), [N, 2]
# a re-run of the prompt and generated ids (no cache): how many of input_ids' leading tokens are the prompt.  Only
# the prompt's image tokens take the image's features; a generated image token is a word, embedded by the table, as
# the cached steps embed it (transformers' generate never feeds the prompt again, so never meets one in its splice)
PROMPT = "prompt_length"


class VLMSet(AnalyzeMethod):
    """The three files run as one vision–language decoder (the :class:`AttnModel` surface): ``pixel_values``,
    ``input_ids`` (with the placeholder expanded) and ``attention_mask`` in, logits out."""

    needs_probe = False  # the layout says which file is which
    kind = "vision-decoder"
    vision_tower = True  # its encoder sites are the vision tower's: shown as "vision" (core.attention.shown_stack)

    def __init__(self, layout: VLMLayout, provider: str = "auto", tokenizer: str | None = None, threads=None):
        t0 = time.perf_counter()
        self.layout = layout
        self.path = layout.folder
        folder = layout.folder
        self.name = folder.parent.name if folder.name == HUB_ONNX_FOLDER and folder.parent.name else folder.name
        self.family = read_family(layout)
        opener = functools.partial(AttentionModel, provider=provider, tokenizer=tokenizer, threads=threads)
        self.vision, self.embed, self.decoder = opener(layout.vision), opener(layout.embed), opener(layout.decoder)
        self.vision.maps_per_image = False  # a row's images (tiles) are maps rows of their own, not windows
        self.vision.batch_input = self.family.vision_batch(self.vision.inputs)
        for model, stack in ((self.vision, "encoder"), (self.decoder, "decoder")):
            for s in model._sites:
                s.stack = stack
            model._stack_confirmed = True
        for s in self.vision._sites:  # a block attending within windows (Qwen2.5-VL) says so in its label
            window = self.family.vision_window(s.layer)
            if window:
                s.extra["window"] = window
        # what the decoder file cannot do that the model does (PaliGemma's prefix mask): one line with its maps
        self.decoder.fidelity = [*self.decoder.fidelity, *self.family.decoder_notes(self.decoder.inputs)]
        self.meta: dict = {"special": config_special(layout.decoder)}
        image = folder_image(layout.vision)
        if image:
            self.meta["image"] = image
        # the sidebar's Metadata section: which of the repository's quantized siblings is open
        self.metadata: dict[str, str] = {"variant": layout.variant, "variants": ", ".join(layout.variants)}
        self._tokenizer_arg = tokenizer
        self._tokenizers: tuple[ip.TextEncoder | None, ip.TextEncoder | None] | None = None
        px = next((i for i in self.vision.inputs if self.vision.roles[i.name] == "image"), None)
        if px is None:
            raise AttnvizError(f"{VISION_FILE}: takes no pixel_values; open the files one by one instead")
        self.inputs = [
            IOInfo("pixel_values", px.dtype, self.family.pixel_shape(px)),
            IOInfo("input_ids", "int64", ["batch", "sequence"]),
            IOInfo("attention_mask", "int64", ["batch", "sequence"]),
        ]
        self.outputs = [IOInfo("logits", "float32", ["batch", "sequence", "vocab"])]
        self._roles: dict[str, str] | None = None
        # per shapes fed (VLMCache.shape_key): the prompt's presents' shapes, learned from a generation's first
        # run, so that a later one names them before they exist (a generation as one request, VLMCache.start_steps)
        self._chain_shapes: dict[tuple, dict[str, tuple[int, ...]]] = {}
        # the latest run's one prompt's several images: each one's keys in the vision block, in order (vision_grids)
        self._image_keys: list[int] = []
        self._image_hw: tuple[int, int] | None = None  # their pixels' size (one batch of the vision file: one size)
        self._row_keys: list[int] = []  # the latest run's keys of each row's own frames in the vision block
        # the latest run's splits: each row's images' (Idefics3's tiles), as its prompt names them to the decoder
        # (tile_layout of the tower's grids, so its frames are named "tile 1 (row 0, col 1)" as the tower alone's)
        self._splits: list[list[Tiles | None] | None] = []
        self.no_attention_reason = self.vision.no_attention_reason or self.decoder.no_attention_reason
        self.timings = {"load_s": time.perf_counter() - t0}

    # -- description -----------------------------------------------------------
    @property
    def roles(self) -> dict[str, str]:
        # asked ~20 times a call (the engine's feed building): worked out once, a copy handed out
        if self._roles is None:
            self._roles = {i.name: ip.guess_role(i.name, i.dtype, i.rank) for i in self.inputs}
        return dict(self._roles)

    @property
    def sites(self) -> list[SiteInfo]:
        return self.vision.sites + self.decoder.sites

    @property
    def provider(self) -> str:
        return self.decoder.provider

    @property
    def provider_note(self) -> str:
        return self.decoder.provider_note

    @property
    def position_limit(self) -> PositionLimit | None:
        return self.decoder.position_limit

    @property
    def tokenizers(self) -> tuple[ip.TextEncoder | None, ip.TextEncoder | None]:
        """The folder's tokenizer (REPO/ above onnx/) with the placeholder expanded, on both sides."""
        if self._tokenizers is None:
            src, tgt = ip.find_tokenizers(self.layout.decoder, {}, self._tokenizer_arg)
            inner = tgt or src
            tok = self.family.tokens(inner) if inner is not None else None
            self._tokenizers = (tok, tok)
        return self._tokenizers

    def pair_with_encoder(self) -> EncoderPair | None:
        return None

    def cache_stepper(self) -> VLMCache | None:
        """Greedy steps through the decoder's cache (None: its presents do not feed its pasts)."""
        return VLMCache.for_set(self)

    def grid(self, n_keys: int, image_hw: tuple[int, int] | None = None) -> PatchGrid | None:
        return self._row_grid(n_keys, image_hw, 0)

    def _row_grid(self, n_keys: int, image_hw: tuple[int, int] | None, row: int) -> PatchGrid | None:
        """Batch row ``row``'s vision grid over ``n_keys`` keys, its tiles' arrangement named where the row's one
        image was split (:meth:`_split`)."""
        return laid_out(self.family.vision_grid(n_keys) or self.vision.grid(n_keys, image_hw), self._split(row, 0))

    def _split(self, row: int, image: int) -> Tiles | None:
        """The latest run's split of batch row ``row``'s image ``image`` (of its one, or of one prompt's several)."""
        each = self._splits[row] if row < len(self._splits) else None
        return each[image] if each is not None and image < len(each) else None

    def load_image(self, source, spec: ip.ImageSpec) -> LoadedImage | None:
        """The family's own image processor (None: attnviz's resize / rescale / normalise to ``spec``)."""
        return self.family.load_image(source, spec)

    def several_images(self, count: int) -> str | None:
        """Refuse ``count`` images in one prompt in one line where the family runs one image per prompt; the feed
        that takes each image's own size where their sizes differ (None: the family runs one size only)."""
        check_several(self.family, count)
        return SIZES if self.family.sized_images else None

    def prompt_feed(self) -> str | None:
        return PROMPT

    def vision_grids(self, n_keys: int) -> list[PatchGrid]:
        """The latest run's one prompt's several images: each one's patch grid among the vision block's ``n_keys``
        keys (its maps on the diagonal, image after image), in order; [] for one image."""
        keys = self._image_keys
        if len(keys) < 2 or sum(keys) != n_keys:
            return []
        out, at = [], 0
        for k, n in enumerate(keys):
            g = laid_out(self.family.vision_grid_of(k, n) or self.vision.grid(n, self._image_hw), self._split(0, k))
            if g is None:
                return []
            out.append(g.shifted(at))
            at += n
        return out

    def tower_rows(self, n_keys: int) -> list[PatchGrid]:
        """A padded batch's rows of different numbers of frames (Idefics3's tiles): each row's own frames' grid
        among the vision block's ``n_keys`` keys (its padding's keys after them); [] where every row's are all."""
        keys = self._row_keys
        # rows of as many frames differ too where their images were split differently (2 x 1 and 1 x 2 tiles)
        layouts = {self._split(b, 0) for b in range(len(keys))}
        if (len(set(keys)) < 2 and len(layouts) < 2) or not keys or max(keys) != n_keys:
            return []
        grids = [self._row_grid(k, self._image_hw, b) for b, k in enumerate(keys)]
        return [g for g in grids if g is not None] if all(g is not None for g in grids) else []

    def _keep_image_keys(self, feeds: dict, per_row: list[int], v: AttentionResult) -> None:
        """Each of one prompt's images' keys in the vision block of a run of the vision file on all its images (the
        family says how many of the file's images each one is: Idefics3's tiles and global image), and their size
        (where the vision file's graph says how its keys lie: LLaVA's CLS before the patches)."""
        ids = self._prompt_ids(feeds)  # a generated marker token names no tile
        h, w = feeds["pixel_values"].shape[-2:]
        self._image_keys, self._image_hw = [], (int(h), int(w))
        self._splits = [self.family.splits(row) for row in ids]
        self._row_keys = [k * int(v.maps[0].shape[-1]) for k in per_row] if v.maps else []
        if ids.shape[0] != 1 or len(per_row) != 1 or per_row[0] < 2 or not v.maps:
            return
        frames = self.family.frames_each(ids[0], per_row[0])
        if frames and sum(frames) == per_row[0]:
            self._image_keys = [f * int(v.maps[0].shape[-1]) for f in frames]

    def describe(self) -> dict:
        d = self.decoder.describe()
        d.update(
            {
                "model": str(self.path),
                "kind": self.kind,
                "inputs": [vars(i) | {"role": self.roles[i.name]} for i in self.inputs],
                "outputs": [vars(o) for o in self.outputs],
                "sites": [s.to_dict() for s in self.sites],
                "files": [p.name for p in (self.layout.vision, self.layout.embed, self.layout.decoder)],
                "variant": self.layout.variant,
                "variants": list(self.layout.variants),
                "image_tokens": self.family.describe(),
            }
        )
        return d

    def probe(self) -> bool:
        if all(s.heads for s in self.sites):
            return True
        px = self.family.probe_pixels(ip.image_spec(self.meta, self.inputs[0].shape))
        ids = np.asarray([self.family.probe_ids()], np.int64)
        try:
            r = self.run({"pixel_values": px, "input_ids": ids, "attention_mask": np.ones_like(ids)}, mode="dense")
        except Exception:
            return False
        for site, m in zip(self.vision._sites + self.decoder._sites, r.maps):
            site.heads = int(m.shape[1])
        return True

    # -- running ---------------------------------------------------------------------
    def check_feeds(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        known = {i.name: i for i in self.inputs}
        for k in feeds:
            if k not in known and k != PROMPT and not (k == SIZES and self.family.sized_images):
                raise AttnvizError(f"unknown input {k!r}; the model's inputs are: {', '.join(known)}")
        out: dict[str, np.ndarray] = {}
        for name, i in known.items():
            if name not in feeds:
                if name == "attention_mask" and "input_ids" in feeds:
                    out[name] = np.ones(np.shape(feeds["input_ids"]), np.int64)
                    continue
                raise AttnvizError(f"missing input {name!r} ({i.describe()}); add it to the feeds")
            a = np.asarray(feeds[name])
            if a.ndim != i.rank:
                raise AttnvizError(f"input {name!r} expects rank {i.rank} {i.describe()}, got shape {tuple(a.shape)}")
            out[name] = a
        if out["attention_mask"].shape != out["input_ids"].shape:
            raise AttnvizError("attention_mask and input_ids have different shapes; give them the same shape")
        if PROMPT in feeds:
            out[PROMPT] = self._prompt_length(feeds[PROMPT], out["input_ids"].shape[1])
        images, rows = out["pixel_values"].shape[0], out["input_ids"].shape[0]
        if images != rows:
            if rows == 1 and images > 1:  # several images in one prompt, in order (where the family takes them)
                check_several(self.family, images)
                if SIZES in feeds:
                    out[SIZES] = self._sizes(feeds[SIZES], out["pixel_values"])
                return out
            raise AttnvizError("pixel_values and input_ids hold different batch sizes; give one image per row")
        if SIZES in feeds:
            raise AttnvizError(f"{SIZES} is for one prompt's several images; give one row of input_ids with them")
        return out

    @staticmethod
    def _prompt_length(value, tokens: int) -> np.ndarray:
        """``prompt_length`` checked: one integer from 1 to the ids' length."""
        a = np.asarray(value)
        if a.size != 1 or a.dtype.kind not in "iu" or not 1 <= int(a.reshape(-1)[0]) <= tokens:
            raise AttnvizError(
                f"{PROMPT} {a.tolist()}: give one integer from 1 to input_ids' length ({tokens}), the prompt's tokens"
            )
        return np.asarray(int(a.reshape(-1)[0]), np.int64)

    @staticmethod
    def _prompt_ids(feeds: dict) -> np.ndarray:
        """The prompt's ids: input_ids up to ``prompt_length`` (all of them where it is not given)."""
        ids = feeds["input_ids"]
        return ids[:, : int(feeds[PROMPT])] if PROMPT in feeds else ids

    def _image_rows(self, feeds: dict) -> np.ndarray:
        """The tokens whose embeddings the image's features replace: the prompt's image tokens (a generated one
        is a word: the steps through the cache embed it by the table, and so does a re-run)."""
        ids = feeds["input_ids"]
        rows = ids == self.family.token
        rows[:, self._prompt_ids(feeds).shape[1] :] = False
        return rows

    @staticmethod
    def _sizes(sizes, pixels: np.ndarray) -> np.ndarray:
        """``image_sizes`` checked: one (height, width) per image, each within pixel_values' padded size."""
        a = np.asarray(sizes)
        if a.shape != (pixels.shape[0], 2) or a.dtype.kind not in "iu":
            raise AttnvizError(
                f"{SIZES} of shape {tuple(a.shape)}: give one integer (height, width) per image, [{pixels.shape[0]}, 2]"
            )
        if (a <= 0).any() or (a[:, 0] > pixels.shape[-2]).any() or (a[:, 1] > pixels.shape[-1]).any():
            raise AttnvizError(
                f"{SIZES} {a.tolist()}: each image's size within pixel_values' {pixels.shape[-2]}x{pixels.shape[-1]}"
            )
        return a.astype(np.int64)

    def _separate(self, feeds: dict) -> bool:
        """One prompt's several images through a vision file that attends within one image (Qwen2-VL's): a run
        each, the features put together where the decoder's embeddings are made (:meth:`_chain_each`)."""
        return (
            self.family.separate_vision_runs and feeds["input_ids"].shape[0] == 1 and feeds["pixel_values"].shape[0] > 1
        )

    def _decoder_feeds(self, feeds: dict, emb: np.ndarray | Spliced | None) -> dict:
        """The spliced embeddings (``emb``: made where the chain runs), the mask, positions, an empty cache."""
        ids = feeds["input_ids"]
        prompt = self._prompt_ids(feeds)
        f: dict = {}
        roles = self.decoder.roles
        for i in self.decoder.inputs:
            role = roles[i.name]
            if role == "mask":
                f[i.name] = feeds["attention_mask"].astype(np.dtype(i.dtype))
            elif i.name == self._embeds_input:
                f[i.name] = emb
            elif role == "token_types":  # PaliGemma's prefix (type 0) and suffix (type 1), from the ids
                _ = self.tokenizers  # the family learns its tokenizer's prefix-closing token
                # the generated tokens are suffix (type 1), as the cached steps feed them
                types = np.ones(ids.shape, np.int64)
                types[:, : prompt.shape[1]] = self.family.token_types(prompt)
                f[i.name] = types.astype(np.dtype(i.dtype))
        bd.fill_auxiliary(self.decoder, f, ids.shape[0], ids.shape[1])
        self._offset_positions(f)
        # a family that computes its positions (Qwen2-VL's M-RoPE [3, B, T] from the image's grid)
        mask = feeds["attention_mask"]
        pos = self.family.positions(prompt, mask[:, : prompt.shape[1]], feeds["pixel_values"], feeds.get(SIZES))
        if pos is not None and prompt.shape[1] < ids.shape[1]:
            # the generated tokens go on from the prompt's largest + 1, one a token on every axis (as the cached
            # steps' rope delta does), never counted against the image's grid
            after = pos.max(axis=(0, 2))[:, None] + 1 + np.arange(ids.shape[1] - prompt.shape[1])
            pos = np.concatenate([pos, np.broadcast_to(after, (*pos.shape[:-1], after.shape[-1]))], axis=-1)
        if pos is not None:
            for i in self.decoder.inputs:
                if roles[i.name] == "positions":
                    f[i.name] = pos.astype(np.dtype(i.dtype))
        return f

    def _offset_positions(self, f: dict) -> None:
        """The family's first position (PaliGemma counts from 1; the count over real tokens starts at 0)."""
        if self.family.position_offset:
            roles = self.decoder.roles
            for i in self.decoder.inputs:
                if roles[i.name] == "positions" and i.name in f:
                    f[i.name] = f[i.name] + np.asarray(self.family.position_offset, f[i.name].dtype)

    def embeddings(self, ids: np.ndarray) -> np.ndarray:
        """embed_tokens.onnx on ``ids`` (the file has no attention: its one output, ``inputs_embeds``)."""
        return np.array(self.embed.logits({self.embed.inputs[0].name: ids.astype(np.int64)}), np.float32)

    @functools.cached_property
    def _embeds_input(self) -> str | None:
        """The decoder's ``inputs_embeds`` (its one rank-3 float input)."""
        return next((i.name for i in self.decoder.inputs if i.rank == 3 and i.dtype.startswith("float")), None)

    def _spliced(self, feeds: dict, width: int | None = None) -> Spliced | None:
        """How the chain makes the decoder's ``inputs_embeds``: embed_tokens.onnx's output (stage 1) with the vision
        file's features (stage 0) in the image tokens' rows; None where the embeddings' width is in no file's
        shapes (the caller's memory check needs the shape before the run) and not given as ``width``, or the
        decoder takes no embeddings."""
        name = self._embeds_input
        if name is None:
            return None
        dec = next(i for i in self.decoder.inputs if i.name == name)
        widths = (width, dec.shape[-1], self.embed.outputs[0].shape[-1], self.vision.outputs[0].shape[-1])
        hidden = next((w for w in widths if isinstance(w, int) and w > 0), None)
        if hidden is None:
            return None
        ids = feeds["input_ids"]
        return Spliced(
            name,
            (1, self.embed.outputs[0].name),
            (0, self.vision.outputs[0].name),
            self._image_rows(feeds),
            (*ids.shape, hidden),
            dec.dtype,
            self.family.placeholder_fix(),
        )

    def chain(self, feeds: dict[str, np.ndarray], mode: str) -> tuple[list, AttentionResult, AttentionResult, dict]:
        """The vision file on the rows' images, the embeddings and the decoder on the spliced embeddings, as one
        request to the sessions' process (:func:`attnviz.runtime.model.run_stages`): the features and embeddings
        never leave it.  Returns the vision maps one per row (one image a row, LLaVA, keeps them as the mode made
        them; several, Idefics3's tiles, each row's frames' maps on the diagonal: :meth:`_vision_maps`), the vision file's result
        (its features among the outputs), the decoder's, and the decoder's feeds (the embeddings a Spliced)."""
        if self._separate(feeds):
            return self._chain_each(feeds, mode)
        per_row, vis, emb = self._prepare_inputs(feeds, mode)
        spliced = self._spliced(feeds)
        t0 = time.perf_counter()
        try:
            f = self._decoder_feeds(feeds, spliced)
        except AttnvizError:
            # a family's positions refused the prompt's image tokens (Qwen2-VL counts them against the image's
            # grid): the splice's line comes first, as in the model's forward, where the features decide it
            self._embedded(vis, emb, feeds)
            raise
        if spliced is not None:
            dec = self.decoder.prepare(f, mode)
            got = run_stages([vis, emb, dec])
        else:  # the width unknown until the embeddings are made: the decoder is a second request
            got, embeds = self._embedded(vis, emb, feeds)
            if self._embeds_input is not None:
                f[self._embeds_input] = embeds
            dec = self.decoder.prepare(f, mode)
            got += run_stages([dec])
        run_s = time.perf_counter() - t0
        v = self.vision.finish(vis, got[0], run_s)
        d = self.decoder.finish(dec, got[-1], run_s)
        self._keep_image_keys(feeds, per_row, v)
        return self._vision_maps(v, per_row), v, d, f

    def _chain_each(self, feeds: dict, mode: str) -> tuple[list, AttentionResult, AttentionResult, dict]:
        """:meth:`chain` for one prompt's several images where the vision file takes one image a run: each
        image's run and the embeddings as one request, the features put together in the images' order and
        spliced here (refused in the splice's line where the counts differ), the decoder a second request.  The
        vision maps: one per site, each image's block on the diagonal (as transformers' cu_seqlens chunks), kept
        as the images' own maps (a :class:`FramesMap` of frames of several sizes), never laid out."""
        ids, pixels = feeds["input_ids"], feeds["pixel_values"]
        each = self.family.one_image_feeds(self.vision.inputs, pixels, feeds.get(SIZES))
        runs = [self.vision.prepare(f, "dense") for f in each]
        emb = self.embed.prepare_outputs({self.embed.inputs[0].name: ids.astype(np.int64)})
        t0 = time.perf_counter()
        f = self._decoder_feeds(feeds, None)
        got = run_stages([*runs, emb])
        vis_name, emb_name = self.vision.outputs[0].name, emb.fetch[0]
        feats = [dict(zip(p.fetch, v))[vis_name] for p, v in zip(runs, got)]
        base = dict(zip(emb.fetch, got[-1]))[emb_name]
        features = np.concatenate([a.reshape(-1, a.shape[-1]) for a in feats])
        if self._embeds_input is not None:
            name = self._embeds_input
            dtype = next(i.dtype for i in self.decoder.inputs if i.name == name)
            s = Spliced(name, (1, emb_name), (0, vis_name), self._image_rows(feeds), base.shape, dtype, "")
            s = s._replace(fix=self.family.placeholder_fix())
            f[name] = splice(s, [{vis_name: features}, {emb_name: base}])
        dec = self.decoder.prepare(f, mode)
        out = run_stages([dec])
        run_s = time.perf_counter() - t0
        seen = [self.vision.finish(p, v, run_s) for p, v in zip(runs, got)]
        d = self.decoder.finish(dec, out[0], run_s)
        self._image_keys = [int(v.maps[0].shape[-1]) for v in seen] if seen[0].maps else []
        self._row_keys = []  # one row
        self._splits = []  # (a family that splits no image)
        # each image's map a frame of its own size (a FramesMap): never the dense block-diagonal [ΣP, ΣP]
        vmaps = [FramesMap.of([v.maps[j].array()[0] for v in seen], [len(seen)]) for j in range(len(seen[0].maps))]
        return vmaps, seen[0], d, f

    def _prepare_inputs(self, feeds: dict, mode: str) -> tuple[list[int], PreparedRun, PreparedRun]:
        """The chain's first two stages prepared: the vision file on the rows' images (dense where a row holds
        several, see :meth:`_vision_maps`) and embed_tokens.onnx on the ids; with the images per row."""
        pixels = feeds["pixel_values"]
        per_row = self.family.images_per_row(pixels)
        if feeds["input_ids"].shape[0] == 1 and len(per_row) > 1:  # one prompt's several images (check_feeds)
            per_row = [sum(per_row)]
        single = all(k == 1 for k in per_row)
        vis = self.vision.prepare(self.family.vision_feeds(self.vision.inputs, pixels), mode if single else "dense")
        emb = self.embed.prepare_outputs({self.embed.inputs[0].name: feeds["input_ids"].astype(np.int64)})
        return per_row, vis, emb

    @staticmethod
    def _vision_maps(v: AttentionResult, per_row: list[int]) -> list:
        """The vision maps one per row: as the mode made them for one image a row (LLaVA), several (Idefics3's
        tiles) put together as :func:`block_diagonal` would, without making it (a :class:`FramesMap`)."""
        if all(k == 1 for k in per_row):
            return v.maps
        return [FramesMap(m.array(), per_row) for m in v.maps]  # the frames' maps kept, never laid out whole

    def _embedded(self, vis: PreparedRun, emb: PreparedRun, feeds: dict) -> tuple[list, np.ndarray | None]:
        """The vision file and the embeddings as one request, the features spliced here (refused in the
        splice's one line where their counts differ): the stages' outputs and the decoder's embeddings."""
        got = run_stages([vis, emb])
        made = [dict(zip(p.fetch, v)) for p, v in zip((vis, emb), got)]
        spliced = self._spliced(feeds, made[1][emb.fetch[0]].shape[-1])
        return got, None if spliced is None else splice(spliced, made)

    def run(self, feeds: dict[str, np.ndarray], mode: str = "auto") -> AttentionResult:
        vmaps, vis, dec, _ = self.chain(self.check_feeds(feeds), mode)
        info = dict(dec.info, model=self.name, model_path=str(self.path))
        return AttentionResult(
            maps=vmaps + dec.maps,
            sites=vis.sites + dec.sites,
            outputs={"logits": dec.outputs["logits"]},
            info=info,
        )

    def logits(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        return self.chain(self.check_feeds(feeds), "dense")[2].outputs["logits"]


class VLMCache:
    """Generation through the decoder's KV cache: the prompt (image features spliced) runs once with an empty
    cache, then each step feeds the new token's embedding, the mask so far, its position and the cache.  The
    vision tower's maps come from the first run (the image is seen once)."""

    def __init__(self, vs: VLMSet, past: list[str], names: dict[str, str]):
        self.vs, self.past, self.names = vs, past, names
        # an If-merged decoder's use_cache_branch (optimum: bool [1]): off for the prompt (fill_auxiliary feeds
        # it false, the without-past branch), on for every cached step (the with-past branch)
        self.flags = {i.name: i.rank for i in vs.decoder.inputs if i.dtype == "bool" and i.rank <= 1}
        self.types = [i.name for i in vs.decoder.inputs if vs.decoder.roles[i.name] == "token_types"]
        self.n_vis = len(vs.vision.sites)
        self.cache: dict[str, np.ndarray] = {}
        self.mask = np.ones((1, 0), np.int64)
        self.delta = np.zeros((1, 1), np.int64)  # a family's position shift for the steps (see start)
        self.width: int | None = None  # the embeddings' width, from the prompt's (see steps)
        self.looping = False  # a loop beside the decoder's session holds the cache (see steps)
        self.reserve = 0  # the rows the loop's maps keep for the prompt's (StepPlan.reserve)

    @classmethod
    def for_set(cls, vs: VLMSet) -> VLMCache | None:
        dec = vs.decoder
        roles = dec.roles
        past = [i.name for i in dec.inputs if roles[i.name] == "past"]
        outs = {o.name for o in dec.outputs}
        names = {roles[i.name]: i.name for i in dec.inputs if roles[i.name] in ("mask", "positions")}
        embeds = next((i.name for i in dec.inputs if i.rank == 3 and i.dtype.startswith("float")), None)
        if not past or not all(present_name(p) in outs for p in past) or len(names) != 2 or embeds is None:
            return None
        return cls(vs, past, names | {"embeds": embeds})

    def _info(self, info: dict) -> dict:
        return dict(info, model=self.vs.name, model_path=str(self.vs.path))

    def _keep(self, r: AttentionResult) -> None:
        self.cache = {p: r.outputs[present_name(p)] for p in self.past}

    def start(self, feeds: dict) -> StepOut:
        self.looping = False
        feeds = self.vs.check_feeds(feeds)
        vmaps, _, r, f = self.vs.chain(feeds, "dense")
        self._keep(r)
        self._prompt(feeds, f)
        learned = self.vs._chain_shapes
        if len(learned) >= LEARNED_SHAPES:  # many prompt lengths: the oldest goes (a re-learn is one generation)
            del learned[next(iter(learned))]
        learned[self.shape_key(feeds)] = {p: tuple(a.shape) for p, a in self.cache.items()}
        return StepOut(r.outputs["logits"][:, -1], self._prompt_maps(vmaps, r), self._info(r.info))

    @staticmethod
    def shape_key(feeds: dict) -> tuple:
        """What the shapes of the prompt's presents follow from: the shapes fed (checked)."""
        return tuple((k, tuple(v.shape), v.dtype.str) for k, v in sorted(feeds.items()))

    def _prompt_maps(self, vmaps: list, r: AttentionResult) -> dict[int, np.ndarray | FramesMap]:
        # a tower's frames stay its frames' maps (the steps never add to the tower's sites: MapAssembler keeps them)
        maps: dict[int, np.ndarray | FramesMap] = {
            j: m if isinstance(m, FramesMap) else m.array() for j, m in enumerate(vmaps)
        }
        maps.update({self.n_vis + j: m.array() for j, m in enumerate(r.maps)})
        return maps

    def _prompt(self, feeds: dict, f: dict) -> None:
        """What the steps carry on from the prompt (checked ``feeds``) and its decoder feeds ``f``: the
        embeddings' width, the mask, the family's position shift."""
        width = getattr(f.get(self.names["embeds"]), "shape", (None,))[-1]  # an array, or the chain's Spliced
        self.width = int(width) if isinstance(width, (int, np.integer)) and width > 0 else None
        self.mask = feeds["attention_mask"].astype(np.int64)
        pos = f.get(self.names["positions"])
        # positions the family computed (M-RoPE [3, B, T]): each step continues from the prompt's largest + 1, as
        # transformers' rope_deltas (largest + 1 - the row's real tokens) added to the count of tokens
        self.delta = (
            pos.max(axis=(0, 2)).astype(np.int64)[:, None] + 1 - self.mask.sum(axis=1, keepdims=True)
            if pos is not None and pos.ndim == 3
            else np.zeros((self.mask.shape[0], 1), np.int64)
        )

    def start_steps(
        self, feeds: dict, n: int, eos: int | None, suppress: tuple[int, ...]
    ) -> tuple[StepOut, StepsOut] | None:
        """:meth:`start`, the first token (greedy on the prompt's last logits, never one of ``suppress``) and the
        first chunk of :meth:`steps` as one run of the sessions (with crash isolation one request, not two: the
        vision file, the embeddings, the decoder on the spliced prompt and the loop after it, the prompt's
        presents kept where the sessions live, :meth:`AttentionModel.chain_loop`).  Returns the prompt's step
        (logits, the vision and the prompt's maps) and the steps (the ids from the first token on, their maps);
        None where it cannot: the first generation of these shapes (its run learns the presents' shapes a later
        one names before they exist), no loop beside the decoder, embeddings of no known width, or a prompt the
        family refuses (:meth:`start` refuses it in its own order)."""
        self.looping = False
        vs = self.vs
        feeds = vs.check_feeds(feeds)
        known = vs._chain_shapes.get(self.shape_key(feeds))
        spliced = vs._spliced(feeds)
        if known is None or spliced is None or vs._separate(feeds):  # several images a run each: two requests
            return None
        try:
            f = vs._decoder_feeds(feeds, spliced)
        except AttnvizError:
            return None
        self._prompt(feeds, f)
        plan = self.plan()
        if plan is None:
            return None
        per_row, vis, emb = vs._prepare_inputs(feeds, "dense")
        runs = [vis, emb, vs.decoder.prepare(f, "dense")]
        dtypes = {i.name: i.dtype for i in vs.decoder.inputs}
        cache = {p: Taken(p, (2, present_name(p)), known[p], dtypes[p]) for p in self.past}
        t0 = time.perf_counter()
        values, ids, finished, maps, info = vs.decoder.chain_loop(
            runs, plan, self._loop_feeds(plan, 0, cache), self._length(), (2, "logits", suppress), n, eos, vs.embed
        )
        run_s = time.perf_counter() - t0
        v = vs.vision.finish(vis, values[0], run_s)
        r = vs.decoder.finish(runs[2], values[2], run_s)
        vs._keep_image_keys(feeds, per_row, v)
        self.cache = {}  # the presents stayed with the loop (the step path never follows a plan's start)
        self.looping = not finished and len(ids) < n  # the rest of the loop is held beside the decoder
        self.reserve = plan.reserve
        prompt = StepOut(
            r.outputs["logits"][:, -1], self._prompt_maps(vs._vision_maps(v, per_row), r), self._info(r.info)
        )
        if maps is None:
            return prompt, StepsOut(ids, {}, {})
        return prompt, StepsOut(ids, {self.n_vis + j: m for j, m in enumerate(maps)}, self._info(info), plan.reserve)

    def reorder(self, rows: np.ndarray) -> None:
        """Beam search (:func:`attnviz.runtime.beams.cache_search`): every batch row the next :meth:`step` feeds
        taken from the last run's row ``rows[i]``, the row running beam ``i`` descends from -- the cache, the mask
        and the family's position shift (Qwen2-VL's rope delta, one per row); the first step's one prompt row
        becomes the K beams' rows.  The image is in the cache: no beam runs the vision file or the prompt again."""
        rows = np.asarray(rows, np.int64)
        self.cache = {p: np.take(a, rows, axis=0) for p, a in self.cache.items()}
        self.mask = np.take(self.mask, rows, axis=0)
        self.delta = np.take(self.delta, rows, axis=0)

    def step(self, tokens: list[int]) -> StepOut:
        ids = np.asarray([[t] for t in tokens], np.int64)
        self.mask = np.concatenate([self.mask, np.ones_like(ids)], axis=1)
        dec = {i.name: i for i in self.vs.decoder.inputs}
        f = {
            self.names["embeds"]: self.vs.embeddings(ids),
            self.names["mask"]: self.mask.astype(np.dtype(dec[self.names["mask"]].dtype)),
            # the new token's position: the real tokens before it (as transformers' generate counts), on every
            # axis of a family's M-RoPE positions ([3, B, 1])
            self.names["positions"]: np.broadcast_to(
                self.mask.sum(axis=1, keepdims=True) - 1 + self.delta,
                [*self._lead(), ids.shape[0], 1],
            ).astype(np.dtype(dec[self.names["positions"]].dtype)),
            **self.cache,
            **{n: np.ones([1] * rank, bool) for n, rank in self.flags.items()},
            # a generated token is suffix (token type 1), as transformers' generate appends it
            **{n: np.ones_like(ids) for n in self.types},
        }
        self.vs._offset_positions(f)
        r = self.vs.decoder.run(f, mode="dense")
        self._keep(r)
        maps = {self.n_vis + j: m.array() for j, m in enumerate(r.maps)}
        return StepOut(r.outputs["logits"][:, -1], maps, self._info(r.info))

    def _lead(self) -> tuple[int, ...]:
        """The axes of the decoder's positions before ``[B, T]``: the family's (Qwen2-VL's M-RoPE: 3), else as many
        threes as the input has (the M-RoPE layout a rank-3 position input has had so far)."""
        rank = {i.name: i.rank for i in self.vs.decoder.inputs}[self.names["positions"]]
        lead = self.vs.family.position_axes
        return lead if len(lead) == rank - 2 else (3,) * (rank - 2)

    def plan(self) -> StepPlan | None:
        """How each step's feeds follow from the last for a loop beside the decoder's session: the token through
        embed_tokens.onnx (run beside it), the mask a column longer, the position the cache's length plus the
        family's shift (on each of its M-RoPE axes), the cache carried -- or None (one request per step): a
        batch, a padded row, positions whose leading axes the family does not name."""
        dec = self.vs.decoder
        maps = dec.loop_maps()
        by_name = {i.name: i for i in dec.inputs}
        lead = self.vs.family.position_axes
        if (
            maps is None
            or self.mask.shape[0] != 1
            or not self.mask.all()
            or by_name[self.names["positions"]].rank != 2 + len(lead)
        ):
            return None
        embed_in, embed_out = self.vs.embed.inputs[0], self.vs.embed.outputs[0]
        return StepPlan(
            fetch=(),  # the decoder fills in its fetch list
            logits="logits",
            carry=tuple((p, present_name(p)) for p in self.past),
            token=self.names["embeds"],
            grow=(self.names["mask"],),
            positions=(self.names["positions"],),
            position_lead=lead,
            flags=tuple(self.flags.items()),
            maps=maps,
            dtypes=tuple((i.name, i.dtype) for i in dec.inputs),
            embed=(embed_in.name, embed_out.name, embed_in.dtype),
            reserve=self.mask.shape[1],  # the prompt's rows (its mask's columns), before the first step
        )

    def steps(self, token: int, n: int, eos: int | None) -> StepsOut:
        """Up to ``n`` greedy steps in one chunk beside the decoder's session (else one step per request)."""
        plan = None if self.looping else self.plan()
        if not self.looping and plan is None:
            return one_step(self, token, eos)
        feeds = None if plan is None else self._loop_feeds(plan, token, self.cache)
        if plan is not None:
            self.reserve = plan.reserve
        ids, _, maps, info = self.vs.decoder.run_loop(plan, feeds, self._length(), token, n, eos, embed=self.vs.embed)
        self.looping = True
        self.cache = {}  # the cache is the loop's now
        maps_at = {self.n_vis + j: m for j, m in enumerate(maps)}
        return StepsOut(ids, maps_at, self._info(info), self.reserve if maps else 0)

    def _length(self) -> int:
        """The count the loop writes each new token's position from: the tokens so far; a family counting from 1
        (PaliGemma) starts it at its offset, one whose prompt positions jump (Qwen2-VL's image: its rows and
        columns) continues from the prompt's largest + 1 (the rope delta, as transformers' generate)."""
        return self.mask.shape[1] + self.vs.family.position_offset + int(self.delta[0, 0])

    def _loop_feeds(self, plan: StepPlan, token: int, cache: dict) -> dict:
        """A new loop's feeds before it adds the token's column and position (``cache``: the prompt's presents,
        arrays or the chain's :class:`~attnviz.runtime.isolation.Taken`)."""
        dec = {i.name: i for i in self.vs.decoder.inputs}
        embeds = self.names["embeds"]
        return {
            # the loop writes each step's token embedding (embed_tokens.onnx beside the decoder) over this before
            # the step runs: zeros of the prompt's width, not a request of its own for the first token
            embeds: np.zeros((1, 1, self.width), np.dtype(dec[embeds].dtype))
            if self.width is not None
            else self.vs.embeddings(np.asarray([[token]], np.int64)),
            self.names["mask"]: self.mask.astype(np.dtype(dec[self.names["mask"]].dtype)),
            self.names["positions"]: np.full(
                (*plan.position_lead, 1, 1), self._length(), np.dtype(dec[self.names["positions"]].dtype)
            ),
            **cache,
            **{name: np.ones([1] * rank, bool) for name, rank in self.flags.items()},
            # every generated token is suffix (type 1): a constant the loop leaves as it is
            **{name: np.ones((1, 1), np.dtype(dec[name].dtype)) for name in self.types},
        }


_: type[AttnModel] = VLMSet  # mypy checks here that a Hub VLM folder satisfies the model Protocol
