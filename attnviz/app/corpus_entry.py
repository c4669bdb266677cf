"""Opening a corpus example (a row of ``examples.parquet``) in the usual views: which model, input and head."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from attnviz import AttnvizError


@dataclass(frozen=True)
class ExampleOpen:
    """What the window opens for one corpus example, and the head it then focuses."""

    model: Path
    values: dict
    stack: str
    kind: str
    layer: int
    head: int
    tokenizer: Path | None  # the corpus run's --tokenizer, so the item tokenises the same way


def example_open(example: dict, model_path: str, tokenizer: str | None = None) -> ExampleOpen:
    if not model_path or not (Path(model_path).is_file() or Path(model_path).is_dir()):
        raise AttnvizError(
            f"cannot open the example: the model {model_path} is gone; re-run 'attnviz corpus' or move it back"
        )
    values: dict[str, str | int | None]
    if example.get("image"):
        values = {"image": str(example["image"])}
    else:
        values = {"text": example["text"], "text_pair": example.get("pair")}
        if example.get("generate"):  # the corpus decoded the model's own greedy output: generate it again
            values["generate"] = int(example["generate"])
        elif example.get("pair") is not None:
            # the corpus fed the pair as it is (sentence B, or an encoder-decoder's teacher-forced target):
            # generating on top would add decoder rows the corpus never saw
            values["generate"] = 0
    tok = Path(tokenizer) if tokenizer and Path(tokenizer).is_file() else None
    return ExampleOpen(
        Path(model_path),
        values,
        str(example["stack"]),
        str(example["kind"]),
        int(example["layer"]),
        int(example["head"]),
        tok,
    )
