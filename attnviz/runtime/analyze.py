"""The engine: an :class:`AnalyzeRequest` on a model -> a labelled :class:`AttentionResult`.

Input builders (:mod:`builders`) make the feeds, the generation generator (:mod:`generate`) picks the words,
the model runs once (or the cached steps' maps are assembled), then the axes are labelled.
``result.generated[i]`` is the word produced at decoder query position ``prompt_len - 1 + i``;
``result.key_tokens`` (or ``tokens`` for decoder-only models) are the decoder inputs.

Works on any :class:`~attnviz.runtime.protocol.AttnModel` (an :class:`AttentionModel` or a folder's ``ModelSet``)
and touches nothing else of it; it never imports model.py or folder.py, so there is no import cycle.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from attnviz import AttnvizError
from attnviz.core import metadata as md
from attnviz.core.attention import (
    IMAGE_GRIDS_KEY,
    PATCH_GRIDS_KEY,
    ROW_IMAGES_KEY,
    SPEECH_PROMPT_KEY,
    TOKEN_GRIDS_KEY,
    VISION_GRIDS_KEY,
    AttentionResult,
    DenseMap,
    MapSource,
    PatchGrid,
)
from attnviz.core.frames import FramesMap
from attnviz.core.rows import RowAxes, set_row_axes
from attnviz.core.setting_words import fix
from attnviz.core.windows import WindowedMap
from attnviz.runtime import builders as bd
from attnviz.runtime.finite import all_finite, noted
from attnviz.runtime.request import AnalyzeRequest, RunInfo

if TYPE_CHECKING:
    from attnviz.runtime import generate as gen
    from attnviz.runtime.protocol import AttnModel

# generate.py (generation), adapters.py (image patches' names) and the speech and audio modules are imported
# where a request needs them: a first map from a text model's feeds loads none (bench/RESULTS.md, first22b)


def _generate(model: AttnModel, req: AnalyzeRequest, prep: bd.Prepared, progress, cancelled) -> gen.Generation | None:
    if prep.prompts is None or not req.generate:  # prompts is None exactly when there is no decoder input
        return None
    from attnviz.runtime import generate as gen

    if prep.batch > 1:
        raise AttnvizError(fix("generate_batch", rows=prep.batch))
    prompt = prep.prompts[0]
    eos = md.section(model.meta, "special").get("eos")
    suppress = gen.suppress_of(model.meta)
    stepper = model.cache_stepper() if req.use_cache else None
    if stepper is not None:
        feeds = bd.decoder_feeds(model, prep, [prompt])
        return gen.with_cache(stepper, feeds, req.generate, eos, progress, cancelled, suppress)
    return gen.full_rerun(
        model,
        lambda ids: model.check_feeds(bd.decoder_feeds(model, prep, [ids])),
        prompt,
        req.generate,
        eos,
        progress,
        cancelled,
        suppress,
    )


def _from_steps(model: AttnModel, maps: dict, outputs: dict) -> AttentionResult:
    """The cached steps' assembled maps as a result, in the model's canonical site order."""
    sites = model.sites
    missing = [i for i in range(len(sites)) if i not in maps]
    if missing:
        raise AttnvizError(f"generation with the KV cache recorded no map for sites {missing}; use the full re-run")
    dense: list[MapSource] = [
        m if isinstance(m, FramesMap) else DenseMap(m) for m in (maps[i] for i in range(len(sites)))
    ]
    infos = [dataclasses.replace(s, heads=int(m.shape[1])) for s, m in zip(sites, dense)]
    return AttentionResult(maps=dense, sites=infos, outputs=outputs, info={"mode": "dense"})


def _run_feeds(model: AttnModel, prep: bd.Prepared, generated: list[int]) -> tuple[list[list[int]] | None, dict]:
    """(decoder rows or None, the feeds of the one run that gives the maps)."""
    if prep.prompts is not None:
        rows = [list(p) + generated[:-1] for p in prep.prompts]
        return rows, bd.decoder_feeds(model, prep, rows)
    feeds = dict(prep.feeds)
    bd.fill_auxiliary(model, feeds, prep.batch, None)
    return None, feeds


def _same_feeds(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        np.asarray(a[k]).dtype == np.asarray(b[k]).dtype and np.array_equal(a[k], b[k]) for k in a
    )


def _guessed(model: AttnModel) -> bool:
    """A single-stack graph whose encoder/decoder role is a static guess (no causal-mask pattern, no metadata):
    the real run's maps confirm it (a causal map marks a decoder), so no dummy run happens first."""
    return model.needs_probe


def _confirm_for_generation(model: AttnModel, req: AnalyzeRequest) -> None:
    """--generate on a graph the static guess calls an encoder would be refused; before refusing, run the user's
    own input once (the real run is the probe): a causal map makes it a decoder and generation goes on."""
    if not (req.generate and _guessed(model) and model.kind == "encoder"):
        return
    # beams=1 with generate=0: the request is re-checked, and beams without a generation is refused
    prep = bd.prepare(model, dataclasses.replace(req, generate=0, beams=1))
    model.run(_run_feeds(model, prep, [])[1], mode=req.mode)


def analyze(model: AttnModel, req: AnalyzeRequest, progress=None, cancelled=None) -> AttentionResult:
    t0 = time.perf_counter()
    if not model.sites:
        raise AttnvizError(f"{model.path.name}: {model.no_attention_reason}")
    # a decoder file opened alone, given a text or an image: its encoder_hidden_states come from the encoder beside
    # it (folder.open_model gives the model its pairing; importing folder.py here would make an import cycle)
    if req.feeds is None:
        pair = model.pair_with_encoder()
        if pair is not None:
            result = analyze(pair.model, req, progress, cancelled)
            result.info["notes"] = list(result.info.get("notes", [])) + [pair.note]
            return result
    _confirm_for_generation(model, req)
    guessed, kind = _guessed(model), model.kind
    prep = bd.prepare(model, req)
    if req.beams > 1 and req.generate and prep.prompts is not None:
        return _analyze_beams(model, req, prep, progress, cancelled, t0)
    g = _generate(model, req, prep, progress, cancelled)
    return _labelled(model, req, prep, g, guessed, kind, progress, cancelled, t0)


def _analyze_beams(model: AttnModel, req: AnalyzeRequest, prep: bd.Prepared, progress, cancelled, t0: float):
    """Beam search: each finished hypothesis labelled as a greedy generation of its ids would be (its maps its own
    beam's rows), then the hypotheses as one result's batch rows, best first (:mod:`beam_result`)."""
    from attnviz.runtime import beams as bm
    from attnviz.runtime import generate as gen
    from attnviz.runtime.beam_result import merge_beams

    if prep.batch > 1:
        raise AttnvizError(fix("beams_batch", rows=prep.batch))
    guessed, kind = _guessed(model), model.kind
    assert prep.prompts is not None  # the caller's condition: there is a decoder input to generate from
    prompt = prep.prompts[0]
    eos = md.section(model.meta, "special").get("eos")
    search = bm.BeamSearch(req.beams, req.generate, eos, gen.suppress_of(model.meta))
    stepper = model.cache_stepper() if req.use_cache else None
    if stepper is not None and callable(getattr(stepper, "reorder", None)):
        bg = bm.cache_search(stepper, bd.decoder_feeds(model, prep, [prompt]), search, progress, cancelled)
    else:  # no cache, or one whose batch rows cannot be reordered: re-run the beams' sequences
        bg = bm.rerun_search(_beams_logits(model, prep), prompt, search, progress, cancelled)
    results = []
    for i, h in enumerate(bg.hypotheses):
        g = gen.Generation(list(h.ids), bg.seconds, bg.method, bg.maps[i] if bg.maps else None, dict(bg.info))
        results.append(_labelled(model, req, prep, g, guessed, kind, progress, cancelled, t0))
    result = merge_beams(results, bg.hypotheses)
    result.info["beam_steps"] = bg.steps  # steps run, each one a run of every running beam
    result.info["total_s"] = time.perf_counter() - t0
    return result


def _beams_logits(model: AttnModel, prep: bd.Prepared):
    """``next_logits(seqs)`` for :func:`attnviz.runtime.beams.rerun_search`: the running beams' sequences as one
    batch (the source and any other batch-1 feed repeated per beam: one run a step, not K); a model that refuses
    that batch (a graph exported for one row) runs them one at a time from then on."""
    from attnviz.runtime.beams import batch_rows

    batched = [True]

    def last(logits: np.ndarray) -> np.ndarray:
        return logits[:, -1] if logits.ndim == 3 else logits

    def one(seqs: list[list[int]]) -> np.ndarray:
        return np.concatenate([last(model.logits(model.check_feeds(bd.decoder_feeds(model, prep, [s])))) for s in seqs])

    def next_logits(seqs: list[list[int]]) -> np.ndarray:
        if len(seqs) == 1 or not batched[0]:
            return one(seqs)
        feeds = bd.decoder_feeds(model, prep, seqs)
        try:
            return last(model.logits(model.check_feeds(batch_rows(feeds, len(seqs)))))
        except AttnvizError:
            batched[0] = False
            return one(seqs)

    return next_logits


def _labelled(
    model: AttnModel,
    req: AnalyzeRequest,
    prep: bd.Prepared,
    g: gen.Generation | None,
    guessed: bool,
    kind: str,
    progress,
    cancelled,
    t0: float,
) -> AttentionResult:
    """The run (or the cached steps' maps) for the generated ids, its axes labelled."""
    generated = g.ids if g is not None else []
    rows, feeds = _run_feeds(model, prep, generated)

    if progress is not None:
        progress(100 if req.generate else -1, "extracting attention…")
    if g is not None and g.maps is not None:
        result = _from_steps(model, g.maps, {})
        result.info.update({k: v for k, v in g.info.items() if k != "run_s"})
    else:
        from attnviz.runtime.shorten import shortening

        try:
            with shortening(prep.shorten):  # a memory refusal names the --max-seconds that fits
                result, feeds = _run_towers(model, req, prep, feeds)
        except AttnvizError as e:
            if prep.hint:  # the likely cause first: onnxruntime's own words are long and name a node
                raise AttnvizError(f"{prep.hint} ({e})") from None
            if prep.notes:  # e.g. positions beyond the model's table: say why
                raise AttnvizError(f"{e} ({'; '.join(prep.notes)})") from None
            raise
    refuse_non_finite(result)
    refuse_empty(result)
    if guessed and model.kind != kind:  # the run's maps overturned the static guess: inputs for the real kind
        prep2 = bd.prepare(model, req)
        rows2, feeds2 = _run_feeds(model, prep2, [])
        if g is not None or not _same_feeds(feeds, feeds2):
            return analyze(model, req, progress, cancelled)  # confirmed now: this runs once more, correctly
        prep, rows = prep2, rows2  # the same feeds: the run stands, labelled as what it showed
    info = RunInfo(
        kind=model.kind,
        text=req.text,
        text_pair=req.text_pair,
        texts=list(req.texts) if req.texts else None,
        batch=prep.batch,
        notes=list(result.info.get("notes", [])) + list(prep.notes),
        image=_image_name(req.image),
        images=[_image_name(i) or "image" for i in req.image]
        if isinstance(req.image, (list, tuple)) and len(req.image) > 1
        else None,
        image_preprocessing=prep.image_info,
        audio=prep.audio,
        alignment=_declared_alignment(model),
    )

    if prep.track is not None and rows is None:  # an encoder alone on the sound (wav2vec2 and kin)
        from attnviz.runtime.ctc import label_frames
        from attnviz.runtime.waveform import frames_note

        info.notes += frames_note(result, prep.src_rows)
        if "logits" in result.outputs:  # a CTC head on the sound's frames: its letters
            prep.src_rows, said = label_frames(model.path, result.outputs["logits"], prep.src_rows)
            info.notes += said

    # axes -------------------------------------------------------------------------------
    dec_rows = bd.decoder_axes(model, prep, rows, feeds) if rows is not None else [None] * prep.batch
    if prep.decoder_is_tokens and model.kind == "decoder":
        axes = [RowAxes(d, None) for d in dec_rows]
    else:
        axes = [RowAxes(s, d) for s, d in zip(prep.src_rows, dec_rows)]
    if prep.img_in is not None:
        from attnviz.runtime.adapters import patch_axis, patch_axis_each

        n_keys = None
        # the image's encoder (a dual encoder's text tower is an encoder too, over the text)
        enc_sites = [i for i, s in enumerate(result.sites) if s.stack == "encoder" and s.tower != "text"]
        cross_sites = [i for i, s in enumerate(result.sites) if s.kind == "cross"]
        if enc_sites:
            n_keys = result.maps[enc_sites[-1]].shape[-1]
        elif cross_sites:
            n_keys = result.maps[cross_sites[-1]].shape[-1]
        img = feeds.get(prep.img_in.name)
        hw = tuple(np.shape(img)[-2:]) if img is not None else None  # the size actually fed decides the grid
        staged = next((m for m in result.maps if isinstance(m, WindowedMap)), None)
        grid: PatchGrid | None
        # one prompt's several images: each image's patches among the vision tower's keys, one after another
        each = model.vision_grids(n_keys) if n_keys and staged is None else []
        if staged is not None:  # a Swin's grid is its first stage's (the image's patches); later stages halve it
            grid, n_keys = staged.layout.grid, staged.layout.tokens
        else:
            # one prompt's several images: the vision tower's keys are every image's patches, on no one grid
            grid = model.grid(n_keys, hw) if n_keys and not prep.images else None
        result.patch_grid = grid
        # a padded batch whose rows hold different numbers of frames (Idefics3's tiles): each row's own grid
        own = model.tower_rows(n_keys) if n_keys and grid is not None and not each else []
        if n_keys and len(own) == len(axes) > 1:
            grid = result.patch_grid = own[0]
            result.info[PATCH_GRIDS_KEY] = [g.to_dict() for g in own]
            axes = [
                RowAxes(patch_axis(g, n_keys), a.key_tokens if a.key_tokens is not None else a.tokens)
                for g, a in zip(own, axes)
            ]
        elif each and n_keys:  # each key named by its image and patch (img2(r,c)); the first image's grid drawn
            grid = result.patch_grid = each[0]
            result.info[VISION_GRIDS_KEY] = [g.to_dict() for g in each]
            axes = [
                RowAxes(patch_axis_each(each, n_keys), a.key_tokens if a.key_tokens is not None else a.tokens)
                for a in axes
            ]
        elif grid is not None and n_keys:
            # a dual encoder's text (no decoder: the only other axis) becomes the second axis, the one its text
            # tower's blocks take (core.attention._axes_for)
            axes = [
                RowAxes(patch_axis(grid, n_keys), a.key_tokens if a.key_tokens is not None else a.tokens) for a in axes
            ]
        result.image = prep.shown
        if prep.pair_images and prep.pair_layout is not None:  # a dual encoder's images: each row shows its own
            result.images = list(prep.pair_images)
            result.info[ROW_IMAGES_KEY] = list(prep.pair_layout.row_image)
    set_row_axes(result, axes)
    if model.kind in ("vision", "encoder"):  # a dual encoder's scores (or why a tower alone has none)
        info.notes += _text_scores(model, req, prep, result)
    if prep.img_in is None and prep.audio is None:
        refuse_off_tokens(model, result, feeds)
    result.audio = prep.track
    if rows is not None and prep.tgt_tok is not None:  # a vision–language decoder: its image tokens on the image
        # the prompt's image tokens only: a generated placeholder is a word (runtime/builders.labels)
        given = len(prep.prompts[0]) if prep.prompts else None
        grids = [prep.tgt_tok.image_grid(r[:given]) for r in rows]
        result.token_grid = grids[0]
        if any(g != grids[0] for g in grids[1:]):  # a padded batch (left padding shifts a row's image tokens)
            result.info[TOKEN_GRIDS_KEY] = [g.to_dict() if g is not None else None for g in grids]
        several = prep.tgt_tok.image_grids(rows[0][:given]) if len(rows) == 1 else []
        if len(several) > 1:  # one prompt's several images: where each one's tokens lie, in order (and each image)
            result.info[IMAGE_GRIDS_KEY] = [g.to_dict() for g in several]
            result.images = prep.images or []
    if prep.prompts is not None:
        result.prompt_len = len(prep.prompts[0])
        if prep.speech_prompt:  # the transcript's words follow it (core/head_stats.word_rows: "monotonic"'s rows)
            result.info[SPEECH_PROMPT_KEY] = prep.speech_prompt
        result.decoder_ids = [list(map(int, r)) for r in rows] if rows is not None else []
        tok = prep.tgt_tok
        result.generated = [tok.label(i) if tok else str(i) for i in generated]
        info.generated_ids = generated
        if g is not None:
            info.generation = g.method
    info.generate_s = g.seconds if g is not None else 0.0
    info.total_s = time.perf_counter() - t0
    result.info.update(info.to_dict())
    if result.audio is not None:  # a speech folder that names its alignment heads: its words' times for the view
        from attnviz.runtime.audio_words import attach_word_times

        attach_word_times(model, result)
        result.info["total_s"] = time.perf_counter() - t0
    return result


def _run_towers(model: AttnModel, req: AnalyzeRequest, prep: bd.Prepared, feeds: dict) -> tuple[AttentionResult, dict]:
    """The run, and the feeds it ran on.  A dual encoder's images and texts fed apart (each once:
    runtime/dual_towers.py) make the pairs' rows after the run; a graph that refuses the two batches, or whose maps
    do not follow them, runs the pairs as rows.  Raw feeds pair image i with text i, their counts checked."""
    from attnviz.runtime import dual_towers as dt

    layout = prep.pair_layout
    if not prep.towers_apart or layout is None:
        result = model.run(feeds, mode=req.mode)
        if prep.img_in is not None and layout is None:
            dt.refuse_unpaired(model.path.name, result)
        return result, feeds
    try:
        result = model.run(feeds, mode=req.mode)
        if dt.follows(result, layout):
            return dt.spread(result, layout), feeds
    except AttnvizError:
        pass  # (the rows' run below says what is wrong, if anything still is)
    prep.towers_apart = False
    feeds = prep.feeds = dt.as_rows(model, feeds, layout)
    return model.run(feeds, mode=req.mode), feeds


def _text_scores(model: AttnModel, req: AnalyzeRequest, prep: bd.Prepared, result: AttentionResult) -> list[str]:
    """Each row's score against its image, from the model's own pair logits (runtime/dual_scores.py)."""
    from attnviz.runtime.dual_scores import attach_scores, row_text

    layout = prep.pair_layout
    given = list(req.texts) if req.texts else [req.text] if req.text is not None else None
    if layout is not None and given is not None:  # typed texts (and images): each row's own
        texts = [given[j] for j in layout.row_text]
        names = prep.pair_image_names
        images = [names[i] for i in layout.row_image] if names else None
        return attach_scores(model, result, texts, images, layout)
    if given is not None and prep.batch == 1:
        return attach_scores(model, result, given)
    # raw feeds: each row's text as its tokens say it
    return attach_scores(model, result, [row_text(a) for a in prep.src_rows])


def _image_name(image) -> str | None:
    """The image file's path as the run info keeps it (the first of several; None: an image given in memory)."""
    if isinstance(image, (list, tuple)):
        image = image[0] if image else None
    return str(image) if isinstance(image, (str, Path)) else None


def refuse_non_finite(result: AttentionResult) -> None:
    """NaN or Inf attention (a NaN scale, NaN weights) is refused in one line: drawn, it would show as all-zero
    maps with no word of why.  Dense maps only: checking on-demand ones would compute every head."""
    for site, m in zip(result.sites, result.maps):
        if not isinstance(m, (DenseMap, FramesMap)):
            continue
        # a tower's frames: their own maps, not laid out; a dense map's rows: the array held, each row once
        a = m.blocks if isinstance(m, FramesMap) else m.held
        known = noted(a)  # the crash-isolation child's check right after the run (attnviz.runtime.finite)
        if not (all_finite(a) if known is None else known):
            if result.info.get("map_dtype") == "float16":
                raise AttnvizError(
                    f"the float16 graph produced NaN/Inf attention at {site.label} (float16's range overflowing, "
                    "a row with every key masked, or NaN/Inf in its weights or inputs); try the full-precision file "
                    f"{fix('full_variant')}"
                )
            raise AttnvizError(
                f"the model produced NaN/Inf attention at {site.label} (a NaN scale, or weights or inputs holding "
                "NaN/Inf); check the model's weights and inputs"
            )


def refuse_empty(result: AttentionResult) -> None:
    """A map with an empty axis (inputs of 0 tokens: ``--inputs`` with ``input_ids`` of shape [1, 0]) is refused
    here, in one line: written, it made a .npz that ``figure`` and the window then refuse (core/io.py)."""
    for site, amap in zip(result.sites, result.maps):
        shape = [int(d) for d in getattr(amap, "shape", ())]
        if 0 in shape:
            raise AttnvizError(
                f"the attention at {site.label} has an empty axis {shape} [B, H, Tq, Tk]: the inputs hold no tokens "
                "(or no image); give at least one"
            )


def refuse_off_tokens(model: AttnModel, result: AttentionResult, feeds: dict) -> None:
    """A text encoder's self-attention map must run over its tokens on both axes.  Attention computed in local
    blocks (LongT5's local encoder: ``[B, blocks, H, L, 3L]``, each block of L queries against its own and its two
    neighbours' keys) reaches here as blocks merged into heads, a map right number by number but over the wrong
    axes: 16 "heads" of 3 queries x 9 keys for 11 tokens.  Refused in one line, never shown.  Only where token
    ids were fed ([B, T]): a model fed other arrays has no token count to hold its maps to."""
    tok = bd.by_role(model, "tokens")
    ids = feeds.get(tok.name) if tok is not None else None
    if ids is None or np.ndim(ids) != 2:
        return
    n = int(np.shape(ids)[1])
    for site, amap in zip(result.sites, result.maps):
        if site.stack != "encoder" or site.kind != "self" or site.tower == "image" or isinstance(amap, WindowedMap):
            continue
        shape = [int(d) for d in getattr(amap, "shape", ())]
        if len(shape) == 4 and shape[2:] != [n, n]:
            raise AttnvizError(
                f"{model.path.name}: the attention at {site.label} is a {shape} [B, H, Tq, Tk] map for {n} tokens: "
                "it is not computed as one [query, key] map over the tokens (local attention in blocks, as "
                "LongT5's and Longformer's), which attnviz cannot show yet; a model with full attention opens"
            )


def analyze_call(model: AttnModel, progress=None, cancelled=None, **fields) -> AttentionResult:
    """``model.analyze(**keywords)`` for every model kind (one file or a folder): build the request (which checks
    its values, :func:`attnviz.runtime.request.validate`), run."""
    return analyze(model, AnalyzeRequest(**fields), progress=progress, cancelled=cancelled)


def _declared_alignment(model: AttnModel) -> dict | None:
    declared = md.alignment_heads(model.meta)
    if declared is None:
        return None
    heads, convention = declared
    return {"heads": [list(h) for h in heads], "convention": convention}


class AnalyzeMethod:
    """The ``analyze`` method every model kind shares (one file, a folder): request building and checks live in
    :func:`analyze_call`, so a new kind of model gets the same entry point by inheriting this."""

    def prompt_feed(self) -> str | None:
        """No feed marks where the prompt ends (a VLM's does: :meth:`attnviz.runtime.vlm.VLMSet.prompt_feed`)."""
        return None

    def analyze(
        self: AttnModel,
        text: str | list[str] | None = None,
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
        beams: int = 1,
    ) -> AttentionResult:
        """Build feeds from text / image / audio / raw feeds, optionally generate greedily, run, and label axes.
        ``text`` a list: a dual encoder's candidate texts against the one image (one batch row each, scored).

        ``progress(percent, text)`` is called per generation step; ``cancelled() -> bool`` is polled between
        steps and raises :class:`Cancelled`; inside a :func:`attnviz.runtime.host.cancel_scope` a cancel during a
        run stops the crash-isolation child, which really interrupts onnxruntime.
        """
        return analyze_call(
            self,
            progress=progress,
            cancelled=cancelled,
            text=text,
            text_pair=text_pair,
            image=image,
            feeds=feeds,
            generate=generate,
            mode=mode,
            image_size=image_size,
            image_mean=image_mean,
            image_std=image_std,
            use_cache=use_cache,
            max_tokens=max_tokens,
            audio=audio,
            max_seconds=max_seconds,
            beams=beams,
        )

    def analyze_request(self: AttnModel, req: AnalyzeRequest, progress=None, cancelled=None) -> AttentionResult:
        """The engine on a built request (the window's input panel and the CLI's flags build one, checked once)."""
        return analyze(self, req, progress=progress, cancelled=cancelled)
