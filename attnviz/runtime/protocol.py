"""The model surface: what every model the engine and the window open offers, and all they may touch.

One ONNX file (:class:`~attnviz.runtime.model.AttentionModel`) and an export folder run as one model
(:class:`~attnviz.runtime.folder.ModelSet`) both satisfy :class:`AttnModel` with real attributes, properties and
methods (a kind that has nothing to offer returns the default: no cache stepper, no encoder to pair with, no
position limit).  Callers annotate ``model: AttnModel`` and use plain attribute access: no probing with
getattr / hasattr, no per-instance patching.  A new kind of model (vision–language set, speech set) plugs in by
satisfying this Protocol; mypy checks the classes against it (the assignments at the end of model.py and folder.py)
and tests/runtime/test_model_protocol.py checks every kind the suite builds.  The pattern is napari's
``LayerDataProtocol``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol, runtime_checkable

if TYPE_CHECKING:  # types only: this module is imported by model.py and folder.py, and imports neither
    import numpy as np

    from attnviz.core.attention import AttentionResult, PatchGrid, SiteInfo
    from attnviz.runtime.generate import CacheStepper
    from attnviz.runtime.inputs import ImageSpec, IOInfo, TextEncoder
    from attnviz.runtime.limits import PositionLimit
    from attnviz.runtime.request import AnalyzeRequest
    from attnviz.runtime.vlm_families import LoadedImage


class EncoderPair(NamedTuple):
    """A decoder file opened alone, run behind the encoder beside it: the set that runs both, and the note the
    result carries saying so."""

    model: AttnModel
    note: str


@runtime_checkable
class AttnModel(Protocol):
    """A model with its attention found: described, fed, run, analysed."""

    # -- description (read-only: a class may hold a plain attribute or compute a property) ------------------
    @property
    def path(self) -> Path: ...  # the file or folder that was opened

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...  # encoder | decoder | encoder-decoder (text or audio) | vision | vision-decoder

    @property
    def meta(self) -> dict: ...  # attnviz metadata, parsed (core.metadata), with the folder's config merged in

    @property
    def metadata(self) -> dict[str, str]: ...  # the raw ONNX metadata_props

    @property
    def inputs(self) -> list[IOInfo]: ...

    @property
    def outputs(self) -> list[IOInfo]: ...

    @property
    def roles(self) -> dict[str, str]: ...  # input name -> role (tokens, mask, image, past, ...)

    @property
    def sites(self) -> list[SiteInfo]: ...  # canonical order; [] when the graph has no attention

    @property
    def no_attention_reason(self) -> str | None: ...

    @property
    def provider(self) -> str: ...  # the execution provider used (creates the session)

    @property
    def provider_note(self) -> str: ...

    @property
    def timings(self) -> dict[str, float]: ...

    @property
    def needs_probe(self) -> bool: ...  # labels are a static guess a first run confirms (False: settled)

    @property
    def tokenizers(self) -> tuple[TextEncoder | None, TextEncoder | None]: ...  # (encoder side, decoder side)

    @property
    def position_limit(self) -> PositionLimit | None: ...  # the longest token input (None: nothing says)

    @property
    def vision_tower(self) -> bool: ...  # its encoder sites are a VLM's vision tower (shown "vision", not "encoder")

    # -- behaviour ----------------------------------------------------------------------------------------
    def probe(self) -> bool: ...  # a short dummy run for head counts; False when none could run

    def describe(self) -> dict: ...

    def check_feeds(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...

    def run(self, feeds: dict[str, np.ndarray], mode: str = "auto") -> AttentionResult: ...

    def logits(self, feeds: dict[str, np.ndarray]) -> np.ndarray: ...

    def grid(self, n_keys: int, image_hw: tuple[int, int] | None = None) -> PatchGrid | None: ...

    # one prompt's several images (a vision–language set): each image's patch grid among the ``n_keys`` keys of the
    # latest run's vision block, in order (each image's maps on the diagonal); [] for one image or another model
    def vision_grids(self, n_keys: int) -> list[PatchGrid]: ...

    # a padded batch whose rows hold different numbers of frames (Idefics3's tiles, padding frames dropped): each
    # row's patch grid among the ``n_keys`` keys of the latest run's vision block; [] where one grid serves all
    def tower_rows(self, n_keys: int) -> list[PatchGrid]: ...

    def cache_stepper(self) -> CacheStepper | None: ...  # None: generation re-runs the whole sequence

    def pair_with_encoder(self) -> EncoderPair | None: ...  # None: the model runs on its own inputs

    # an image through the model's own processor (a VLM family's: Idefics3's tiles); None: attnviz's resize /
    # rescale / normalise to ``spec``
    def load_image(self, source: str | Path, spec: ImageSpec) -> LoadedImage | None: ...

    # one prompt's ``count`` images (a vision–language family that takes several): refused in one line where the
    # model takes one image a run; returns the feed that takes each image's own size where the images' sizes differ
    # (None: they must share one size)
    def several_images(self, count: int) -> str | None: ...

    # the feed that says how many of input_ids' leading tokens are the prompt, where a model treats a generated
    # token otherwise than the same token in the prompt (a VLM: only the prompt's image tokens take the image's
    # features); None: the model needs none (a re-run of prompt + generated ids is one sequence to it)
    def prompt_feed(self) -> str | None: ...

    def analyze(
        self,
        text: str | None = None,
        text_pair: str | None = None,
        image=None,
        feeds: dict | None = None,
        generate: int = 0,
        mode: str = "auto",
        image_size: tuple[int, int] | None = None,
        image_mean: list[float] | None = None,
        image_std: list[float] | None = None,
        progress=None,
        cancelled=None,
        use_cache: bool = True,
        max_tokens: int | None = None,
        audio=None,
        max_seconds: float | None = None,
        beams: int = 1,  # beam search: the K finished hypotheses as the result's batch rows, best first
    ) -> AttentionResult: ...

    # a request built and checked once (the window's input panel, the CLI's flags): the same engine as analyze()
    def analyze_request(self, req: AnalyzeRequest, progress=None, cancelled=None) -> AttentionResult: ...


# the member names, for tests and docs: properties (values) and methods (callables)
PROPERTIES = tuple(n for n, v in vars(AttnModel).items() if isinstance(v, property))
METHODS = tuple(n for n, v in vars(AttnModel).items() if callable(v) and not n.startswith("_"))
