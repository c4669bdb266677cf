"""Where a figure's attention comes from: a model run by the runtime, or an ``attnviz extract`` .npz."""

from __future__ import annotations

import os
from pathlib import Path

from attnviz import AttnvizError
from attnviz.core.attention import AttentionResult


def load_result(
    model: str | os.PathLike | None = None,
    maps: str | os.PathLike | None = None,
    text: str | None = None,
    text_pair: str | None = None,
    image: str | os.PathLike | list[str] | None = None,
    feeds: str | os.PathLike | None = None,
    tokenizer: str | os.PathLike | None = None,
    generate: int | None = 0,
    provider: str = "auto",
    mode: str = "auto",
    image_size=None,
    image_mean=None,
    image_std=None,
    max_tokens: int | None = None,
    audio: str | os.PathLike | None = None,
    max_seconds: float | None = None,
    variant: str | None = None,
    beams: int | None = None,
) -> AttentionResult:
    """Run ``model`` on the inputs (through :func:`attnviz.runtime.open_model`) or read a maps file.

    ``generate`` None: as many steps as the window takes for this kind of model
    (:func:`attnviz.core.steps_default.default_generate`); the number used is kept in ``result.info["generate"]``."""
    if maps is not None:
        if model is not None:
            raise AttnvizError("give a model or --maps, not both")
        if any(v for v in (text, text_pair, image, audio, feeds, tokenizer, generate, variant)) or (beams or 1) > 1:
            raise AttnvizError(
                "--maps already holds the attention; drop --text/--text-pair/--image/--inputs/--tokenizer/--generate"
                + ("/--beams" if (beams or 1) > 1 else "")
            )
        from attnviz.core.io import load_npz

        return load_npz(maps)
    if model is None:
        raise AttnvizError("give a model file (MODEL.onnx) or --maps MAPS.npz from 'attnviz extract'")
    if text_pair is not None and text is None and audio is None:  # a speech model's transcript goes with --audio
        raise AttnvizError("--text-pair needs --text")
    if feeds is not None and (text is not None or image is not None or audio is not None):
        raise AttnvizError("give --inputs or --text/--image/--audio, not both")
    try:
        from attnviz.runtime import open_model
    except ImportError as e:
        raise AttnvizError(
            f"running a model needs the attnviz runtime ({e}); use --maps from 'attnviz extract'"
        ) from None
    m = open_model(
        str(model),
        provider=provider,
        tokenizer=str(tokenizer) if tokenizer is not None else None,
        variant=variant,
    )
    if generate is None:
        from attnviz.runtime.default_steps import default_steps

        generate = default_steps(m, {"text": text, "text_pair": text_pair, "feeds": feeds})
    result = m.analyze(
        text=text,
        text_pair=text_pair,
        image=[str(i) for i in image] if isinstance(image, list) else str(image) if image is not None else None,
        feeds=str(feeds) if feeds is not None else None,  # the runtime loads and checks the .npz
        generate=int(generate or 0),
        mode=mode or "auto",
        image_size=tuple(image_size) if image_size else None,
        image_mean=list(image_mean) if image_mean else None,
        image_std=list(image_std) if image_std else None,
        # 0 is passed on, for the request's own refusal (``if max_tokens`` read it as "keep every token")
        **({"max_tokens": int(max_tokens)} if max_tokens is not None else {}),
        audio=str(audio) if audio is not None else None,
        max_seconds=max_seconds,
        beams=int(beams or 1),
    )
    result.info.setdefault("model", Path(model).stem)
    result.info["generate"] = int(generate or 0)
    return result
