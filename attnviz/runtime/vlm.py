"""A decoder-only vision–language model in the Hugging Face Hub's three-file ONNX layout, run as one model.

The Hub (transformers.js / onnx-community) keeps a VLM as ``REPO/onnx/vision_encoder.onnx`` (pixel values ->
image features), ``embed_tokens.onnx`` (ids -> embeddings) and ``decoder_model_merged.onnx`` (embeddings, mask,
positions, past key values -> logits, present), with ``config.json``, ``preprocessor_config.json`` and the
tokenizer in ``REPO/``.  The caller does what the processor and the model's forward do between the files:
:class:`VLMSet` expands the prompt's image placeholder to the number of image features (as ``LlavaProcessor``),
replaces those rows of the embeddings with the features (as ``LlavaModel``), and runs the decoder on the spliced
embeddings with positions 0..T-1, the mask and an empty cache.  Its sites are the vision tower's self-attention
(the encoder block) then the decoder's self-attention, whose image-token columns are labelled ``img[r,c]`` on the
vision grid; the result's ``token_grid`` places that run on the image, so Image regions shows a word's row over
it.  Generation steps through the decoder's cache (:class:`VLMCache`); an optimum ``If``-merged decoder runs the
prompt through its without-past branch (``use_cache_branch`` false) and each cached step through the other.  Family: LLaVA only (CLIP-ViT + Llama, one
image, the CLS token dropped); other families are named and refused in one line.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnviz import AttnvizError
from attnviz.core.attention import AttentionResult, PatchGrid, SiteInfo
from attnviz.runtime import builders as bd
from attnviz.runtime import inputs as ip
from attnviz.runtime.analyze import AnalyzeMethod
from attnviz.runtime.generate import StepOut, StepsOut, one_step, present_name
from attnviz.runtime.limits import PositionLimit
from attnviz.runtime.model import AttentionModel, IOInfo
from attnviz.runtime.protocol import AttnModel, EncoderPair
from attnviz.runtime.sidecar import HUB_ONNX_FOLDER, config_special, folder_image, sidecar_json

VISION_FILE, EMBED_FILE, DECODER_FILE = "vision_encoder.onnx", "embed_tokens.onnx", "decoder_model_merged.onnx"
FAMILIES = ("llava",)  # config.json model types whose layout (placeholder, splice, positions) is derived here
SELECT_STRATEGIES = {"default": 1, "full": 0}  # vision_feature_select_strategy -> leading tokens dropped (CLS)


@dataclass(frozen=True)
class VLMLayout:
    """The three files of a Hub VLM: in ``FOLDER/onnx/`` (the repository opened) or in the ``onnx`` folder itself."""

    folder: Path  # the folder that was opened
    vision: Path
    embed: Path
    decoder: Path

    @classmethod
    def find(cls, folder: Path) -> VLMLayout | None:
        for d in (folder / HUB_ONNX_FOLDER, folder):
            files = [d / n for n in (VISION_FILE, EMBED_FILE, DECODER_FILE)]
            if all(f.is_file() for f in files):
                return cls(folder, *files)
        return None


@dataclass(frozen=True)
class ImageLayout:
    """How a prompt's image placeholder becomes image tokens, and where each lies on the vision grid."""

    token: int  # the placeholder id (config.json image_token_index)
    rows: int
    cols: int

    @property
    def n(self) -> int:
        return self.rows * self.cols

    def label(self, k: int) -> str:
        r, c = divmod(k % self.n, self.cols)
        return f"img[{r},{c}]"


class ImageTokens(ip.TextEncoder):
    """The folder's tokenizer with LLaVA's placeholder expansion: each ``<image>`` becomes one token per image
    feature (as ``LlavaProcessor`` expands it), labelled ``img[r,c]`` by its patch's row and column."""

    def __init__(self, inner: ip.TextEncoder, layout: ImageLayout):
        self.inner, self.layout = inner, layout
        self.unk_id = inner.unk_id

    def encode(self, text: str, pair: str | None = None, add_special: bool = True) -> ip.Encoded:
        e = self.inner.encode(text, pair, add_special)
        out = ip.Encoded([], [], [], [])
        for i, t, s, ty in zip(e.ids, e.tokens, e.special, e.type_ids):
            if i == self.layout.token:
                n = self.layout.n
                out.ids += [i] * n
                out.tokens += [self.layout.label(k) for k in range(n)]
                out.special += [False] * n
                out.type_ids += [ty] * n
            else:
                out.ids.append(i)
                out.tokens.append(t)
                out.special.append(s)
                out.type_ids.append(ty)
        return out

    def label(self, i: int) -> str:
        return self.inner.label(i)

    def row_labels(self, ids) -> list[str]:
        """Each run of placeholder ids numbered along the grid (every run, and every n ids of a run, start again at
        (0,0): one image's features each)."""
        out, k = [], 0
        for i in ids:
            if int(i) == self.layout.token:
                out.append(self.layout.label(k))
                k += 1
            else:
                out.append(self.inner.label(int(i)))
                k = 0
        return out

    def image_grid(self, ids) -> PatchGrid | None:
        """The first image's run of tokens on the vision grid (Image regions draws the words' attention to it)."""
        placed = [k for k, i in enumerate(ids) if int(i) == self.layout.token]
        if len(placed) < self.layout.n:
            return None
        return PatchGrid(self.layout.rows, self.layout.cols, placed[0])

    def is_special(self, i: int) -> bool:
        return i != self.layout.token and self.inner.is_special(i)

    @property
    def size(self) -> int:
        return self.inner.size


def image_layout(config: dict, preprocessor: dict, where: str) -> ImageLayout:
    """The placeholder id and the feature grid from config.json and preprocessor_config.json (LLaVA's keys)."""
    if not config:
        raise AttnvizError(
            f"{where}: the vision–language layout ({VISION_FILE}, {EMBED_FILE}, {DECODER_FILE}) and no readable "
            "config.json beside the files (or in the repository above onnx/); put the model's config.json there"
        )
    family = config.get("model_type")
    if family not in FAMILIES:
        raise AttnvizError(
            f"{where}: a vision–language model of type {family!r}; attnviz runs the three-file layout for "
            f"{', '.join(FAMILIES)} only (its placeholder expansion and positions are not derived for others)"
        )
    token = config.get("image_token_index", config.get("image_token_id"))
    vision = config.get("vision_config")
    strategy = config.get("vision_feature_select_strategy", "default")
    if not isinstance(token, int) or not isinstance(vision, dict) or strategy not in SELECT_STRATEGIES:
        raise AttnvizError(
            f"{where}: config.json lacks image_token_index, vision_config or a known "
            "vision_feature_select_strategy; give the repository's own config.json"
        )
    image, patch = vision.get("image_size"), vision.get("patch_size")
    if not isinstance(image, int) or not isinstance(patch, int) or patch <= 0:
        raise AttnvizError(f"{where}: config.json's vision_config has no image_size / patch_size")
    side = image // patch
    layout = ImageLayout(token, side, side)
    declared = preprocessor.get("image_seq_length", config.get("image_seq_length"))
    if isinstance(declared, int) and declared != layout.n + (1 - SELECT_STRATEGIES[strategy]):
        raise AttnvizError(
            f"{where}: the processor expands <image> to {declared} tokens and the vision grid has {layout.n} "
            "patches; the config files do not belong together"
        )
    if strategy == "full":
        raise AttnvizError(f"{where}: vision_feature_select_strategy 'full' (CLS kept) is not placed on the grid yet")
    return layout


class VLMSet(AnalyzeMethod):
    """The three files run as one vision–language decoder (the :class:`AttnModel` surface): ``pixel_values``,
    ``input_ids`` (with the placeholder expanded) and ``attention_mask`` in, logits out."""

    needs_probe = False  # the layout says which file is which
    kind = "vision-decoder"

    def __init__(self, layout: VLMLayout, provider: str = "auto", tokenizer: str | None = None, threads=None):
        t0 = time.perf_counter()
        self.layout = layout
        self.path = layout.folder
        folder = layout.folder
        self.name = folder.parent.name if folder.name == HUB_ONNX_FOLDER and folder.parent.name else folder.name
        config = sidecar_json(layout.decoder, "config.json")
        self.image_layout = image_layout(
            config, sidecar_json(layout.decoder, "preprocessor_config.json"), str(layout.folder)
        )
        opener = functools.partial(AttentionModel, provider=provider, tokenizer=tokenizer, threads=threads)
        self.vision, self.embed, self.decoder = opener(layout.vision), opener(layout.embed), opener(layout.decoder)
        for model, stack in ((self.vision, "encoder"), (self.decoder, "decoder")):
            for s in model._sites:
                s.stack = stack
            model._stack_confirmed = True
        self.meta: dict = {"special": config_special(layout.decoder)}
        image = folder_image(layout.vision)
        if image:
            self.meta["image"] = image
        self.metadata: dict[str, str] = {}
        self._tokenizer_arg = tokenizer
        self._tokenizers: tuple[ip.TextEncoder | None, ip.TextEncoder | None] | None = None
        px = next((i for i in self.vision.inputs if self.vision.roles[i.name] == "image"), None)
        if px is None:
            raise AttnvizError(f"{VISION_FILE}: takes no pixel_values; open the files one by one instead")
        self.inputs = [
            IOInfo("pixel_values", px.dtype, ["batch", *px.shape[1:]]),
            IOInfo("input_ids", "int64", ["batch", "sequence"]),
            IOInfo("attention_mask", "int64", ["batch", "sequence"]),
        ]
        self.outputs = [IOInfo("logits", "float32", ["batch", "sequence", "vocab"])]
        self.no_attention_reason = self.vision.no_attention_reason or self.decoder.no_attention_reason
        self.timings = {"load_s": time.perf_counter() - t0}

    # -- description -----------------------------------------------------------
    @property
    def roles(self) -> dict[str, str]:
        return {i.name: ip.guess_role(i.name, i.dtype, i.rank) for i in self.inputs}

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
            tok = ImageTokens(inner, self.image_layout) if inner is not None else None
            self._tokenizers = (tok, tok)
        return self._tokenizers

    def pair_with_encoder(self) -> EncoderPair | None:
        return None

    def cache_stepper(self) -> VLMCache | None:
        """Greedy steps through the decoder's cache (None: its presents do not feed its pasts)."""
        return VLMCache.for_set(self)

    def grid(self, n_keys: int, image_hw: tuple[int, int] | None = None) -> PatchGrid | None:
        return self.vision.grid(n_keys, image_hw)

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
                "image_tokens": {
                    "token": self.image_layout.token,
                    "grid": [self.image_layout.rows, self.image_layout.cols],
                },
            }
        )
        return d

    def probe(self) -> bool:
        if all(s.heads for s in self.sites):
            return True
        spec = ip.image_spec(self.meta, self.inputs[0].shape)
        px = np.zeros((1, spec.channels, spec.height, spec.width), np.float32)
        ids = np.asarray([[self.image_layout.token] * self.image_layout.n], np.int64)
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
            if k not in known:
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
        if out["pixel_values"].shape[0] != out["input_ids"].shape[0]:
            raise AttnvizError("pixel_values and input_ids hold different batch sizes; give one image per row")
        return out

    def _decoder_feeds(self, feeds: dict, features: np.ndarray) -> dict:
        """The spliced embeddings (image features in the placeholder rows), the mask, positions, an empty cache."""
        ids = feeds["input_ids"]
        emb = self.embeddings(ids)
        placed = ids == self.image_layout.token
        per_row = placed.sum(axis=1)
        n = features.shape[1]
        if features.ndim != 3 or not np.all(per_row == n):
            raise AttnvizError(
                f"the prompt holds {int(per_row.max())} image tokens and the image gives {n} features; "
                f"write <image> once in the text (it is expanded to {n} tokens)"
            )
        emb[placed] = features.reshape(-1, features.shape[-1]).astype(emb.dtype)
        f: dict = {}
        for i in self.decoder.inputs:
            role = self.decoder.roles[i.name]
            if role == "mask":
                f[i.name] = feeds["attention_mask"].astype(np.dtype(i.dtype))
            elif i.rank == 3 and i.dtype.startswith("float"):  # inputs_embeds
                f[i.name] = emb
        bd.fill_auxiliary(self.decoder, f, ids.shape[0], ids.shape[1])
        return f

    def embeddings(self, ids: np.ndarray) -> np.ndarray:
        """embed_tokens.onnx on ``ids`` (the file has no attention: its one output, ``inputs_embeds``)."""
        return np.array(self.embed.logits({self.embed.inputs[0].name: ids.astype(np.int64)}), np.float32)

    def run(self, feeds: dict[str, np.ndarray], mode: str = "auto") -> AttentionResult:
        feeds = self.check_feeds(feeds)
        vis = self.vision.run({self.vision.inputs[0].name: feeds["pixel_values"]}, mode=mode)
        features = next(iter(vis.outputs.values()))
        dec = self.decoder.run(self._decoder_feeds(feeds, features), mode=mode)
        info = dict(
            dec.info,
            model=self.name,
            model_path=str(self.path),
            run_s=dec.info.get("run_s", 0.0) + vis.info.get("run_s", 0.0),
        )
        return AttentionResult(
            maps=vis.maps + dec.maps, sites=vis.sites + dec.sites, outputs={"logits": dec.outputs["logits"]}, info=info
        )

    def logits(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        feeds = self.check_feeds(feeds)
        vis = self.vision.run({self.vision.inputs[0].name: feeds["pixel_values"]}, mode="dense")
        return self.decoder.logits(self._decoder_feeds(feeds, next(iter(vis.outputs.values()))))


class VLMCache:
    """Generation through the decoder's KV cache: the prompt (image features spliced) runs once with an empty
    cache, then each step feeds the new token's embedding, the mask so far, its position and the cache.  The
    vision tower's maps come from the first run (the image is seen once)."""

    def __init__(self, vs: VLMSet, past: list[str], names: dict[str, str]):
        self.vs, self.past, self.names = vs, past, names
        # an If-merged decoder's use_cache_branch (optimum: bool [1]): off for the prompt (fill_auxiliary feeds
        # it false, the without-past branch), on for every cached step (the with-past branch)
        self.flags = {i.name: i.rank for i in vs.decoder.inputs if i.dtype == "bool" and i.rank <= 1}
        self.n_vis = len(vs.vision.sites)
        self.cache: dict[str, np.ndarray] = {}
        self.mask = np.ones((1, 0), np.int64)

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
        feeds = self.vs.check_feeds(feeds)
        vis = self.vs.vision.run({self.vs.vision.inputs[0].name: feeds["pixel_values"]}, mode="dense")
        r = self.vs.decoder.run(self.vs._decoder_feeds(feeds, next(iter(vis.outputs.values()))), mode="dense")
        self._keep(r)
        self.mask = feeds["attention_mask"].astype(np.int64)
        maps = {j: m.array() for j, m in enumerate(vis.maps)}
        maps.update({self.n_vis + j: m.array() for j, m in enumerate(r.maps)})
        return StepOut(r.outputs["logits"][:, -1], maps, self._info(r.info))

    def step(self, tokens: list[int]) -> StepOut:
        ids = np.asarray([[t] for t in tokens], np.int64)
        self.mask = np.concatenate([self.mask, np.ones_like(ids)], axis=1)
        dec = {i.name: i for i in self.vs.decoder.inputs}
        f = {
            self.names["embeds"]: self.vs.embeddings(ids),
            self.names["mask"]: self.mask.astype(np.dtype(dec[self.names["mask"]].dtype)),
            # the new token's position: the real tokens before it (as transformers' generate counts)
            self.names["positions"]: (self.mask.sum(axis=1, keepdims=True) - 1).astype(
                np.dtype(dec[self.names["positions"]].dtype)
            ),
            **self.cache,
            **{n: np.ones([1] * rank, bool) for n, rank in self.flags.items()},
        }
        r = self.vs.decoder.run(f, mode="dense")
        self._keep(r)
        maps = {self.n_vis + j: m.array() for j, m in enumerate(r.maps)}
        return StepOut(r.outputs["logits"][:, -1], maps, self._info(r.info))

    def steps(self, token: int, n: int, eos: int | None) -> StepsOut:
        return one_step(self, token, eos)


_: type[AttnModel] = VLMSet  # mypy checks here that a Hub VLM folder satisfies the model Protocol
