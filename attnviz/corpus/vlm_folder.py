"""``attnviz corpus REPO --images DIR`` on a vision–language model's Hub folder (``onnx/vision_encoder.onnx``,
``embed_tokens.onnx``, ``decoder_model_merged.onnx``: :class:`~attnviz.runtime.vlm.VLMLayout`).

A corpus over images reduces an image encoder's self-attention; the whole VLM has none to reduce over a folder of
images without prompts (its decoder reads a prompt, and there is no prompt).  What a researcher who points it at the
folder asks for is the folder's vision tower, so:

- a family whose vision file runs alone through the family's own processor (``Family.tower_alone``: Idefics3 /
  SmolVLM; :mod:`attnviz.runtime.vlm_tower`) runs the corpus on that file: the images are split and normalised as
  the whole model's run does it, and the statistics are the tower block's that ``attnviz open REPO --image`` shows.
  The folder's full-precision file (the one ``attnviz open REPO`` opens), said in one line before the run;
- any other family's vision file alone would go through attnviz's own resize, not its processor (or not run at
  all: Qwen2-VL's takes the processor's flattened patches): one line naming the file to give, exit 2, rather than a
  corpus over pixels the whole model never sees.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from attnviz import AttnvizError


def vision_file(model: str, images: str | None) -> tuple[str, str]:
    """``(the model to run, a note)``: the vision file of a tower-alone family's VLM folder and why (see the
    module), else ``(model, "")`` unchanged; a VLM folder of another family is one line."""
    p = Path(model)
    if images is None or not p.is_dir():
        return model, ""
    from attnviz.runtime.sidecar import sidecar_json
    from attnviz.runtime.vlm import FULL, STEMS, VLMLayout
    from attnviz.runtime.vlm_families import FAMILIES

    found = next(((d, v) for d in (p / "onnx", p) if (v := VLMLayout.variants_in(d))), None)
    if found is None:
        return model, ""  # not a vision–language folder: the usual checks say what it is
    d, variants = found
    # the full-precision file (what 'attnviz open REPO' opens), else the first variant's for the one-line refusals
    vision = d / (f"{STEMS[0]}.onnx" if FULL in variants else f"{STEMS[0]}_{variants[0]}.onnx")
    kind = sidecar_json(vision, "config.json").get("model_type")
    family = FAMILIES.get(kind) if isinstance(kind, str) else None
    named = f"{p.name} ({kind})" if isinstance(kind, str) else p.name
    if family is None or not family.tower_alone:
        alone = sorted(k for k, f in FAMILIES.items() if f.tower_alone)
        raise AttnvizError(
            f"{named} is a vision–language model; a corpus over --images runs on an image encoder, and attnviz "
            f"runs such a folder's vision encoder through the family's processor only for {', '.join(alone)}; to "
            "run its vision file with attnviz's own resize (where it takes [batch, 3, H, W] pixel values), give it: "
            f"attnviz corpus {shlex.quote(str(vision))} --images {shlex.quote(images)}"
        )
    if FULL not in variants:  # the corpus has no --variant: the file itself says which
        files = ", ".join(str(d / f"{STEMS[0]}_{v}.onnx") for v in variants)
        raise AttnvizError(
            f"{p.name} has no full-precision {STEMS[0]}.onnx; give the vision encoder to run the corpus on: {files}"
        )
    return str(vision), (
        f"{named} is a vision–language model: the corpus runs on its vision encoder, {vision}, each image through "
        "the family's processor as 'attnviz open' runs the tower"
    )
