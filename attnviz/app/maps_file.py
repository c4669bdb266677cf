"""What an ``attnviz extract`` maps file (.npz) holds, as the window shows it when it opens one: the file itself,
the model its run recorded and the input and generation steps that run took.

Opened on a .npz, the window showed "generate 0" for maps generated with 8 steps and named no file at all
(gen30): the input panel kept whatever it held before, and the Model sidebar's Model section needs a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath

from attnviz.core.words import count

NOT_RECORDED = "not recorded in the file"


@dataclass(frozen=True)
class MapsFile:
    path: PurePath
    model: str | None  # the source model's name, as its run recorded it (None: an .npz written without it)
    model_path: str | None  # the path the run was given (as typed: relative to where it ran)
    kind: str | None
    steps: int  # the generation steps the run took (0: none)
    generated: int  # the tokens it generated (fewer than ``steps`` where it stopped at the end token)
    text: str | None = None
    text_pair: str | None = None
    image: str | list[str] | None = None
    audio: str | None = None

    @classmethod
    def of(cls, path, result) -> MapsFile:
        info = dict(result.info or {})
        ids = info.get("generated_ids")
        generated = len(ids) if isinstance(ids, list) else len(result.generated or [])
        # written before extract recorded its steps: a beam search's, else the tokens it generated
        recorded = [v for v in (info.get("generate"), info.get("beam_steps")) if isinstance(v, int) and _whole(v)]
        steps = recorded[0] if recorded else generated
        return cls(
            path=PurePath(path),
            model=_text(info.get("model")),
            model_path=_text(info.get("model_path")),
            kind=_text(info.get("kind")),
            steps=steps,
            generated=generated,
            text=_text(info.get("text")),
            text_pair=_text(info.get("text_pair")),
            image=_image(info.get("image")),
            audio=_text(info.get("audio")),
        )

    def steps_said(self) -> str:
        """The generation in words: "8 steps", "32 steps (stopped after 8 tokens)", "none (generate 0)"."""
        if not self.steps:
            return "none (generate 0)"
        if self.generated < self.steps:
            return f"{count(self.steps, 'step')} (stopped after {count(self.generated, 'token')})"
        return count(self.steps, "step")

    def rows(self) -> list[tuple[str, object]]:
        """The Model sidebar's "Maps file" section (the Model section's place when no model is open)."""
        model = self.model or NOT_RECORDED
        if self.model_path and self.model_path != self.model:
            model = f"{model} ({self.model_path})"
        rows: list[tuple[str, object]] = [("file", self.path), ("model", model)]
        if self.kind:
            rows.append(("kind", self.kind))
        rows.append(("generate", self.steps_said()))
        return rows

    def input_values(self) -> dict:
        """The input panel's fields for the run the file holds (an empty field where the run had no such input,
        never the previous model's)."""
        return {
            "text": self.text or "",
            "text_pair": self.text_pair or "",
            "image": self.image or "",
            "audio": self.audio or "",
            "generate": self.steps,
        }


def _whole(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _text(v) -> str | None:
    return v if isinstance(v, str) and v else None


def _image(v) -> str | list[str] | None:
    if isinstance(v, list) and v and all(isinstance(x, str) for x in v):
        return list(v)
    return _text(v)
