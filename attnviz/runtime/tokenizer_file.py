"""What is wrong with a tokenizer.json that does not load, in plain words.

The Rust ``tokenizers`` library says why it refused a file in serde's words ("data did not match any variant of
untagged enum ModelWrapper at line 1 column 1689", "expected `,` or `}` at line 1 column 5"): true, but no help to
whoever gave the file.  Only when a load has failed (no cost on a good file), this module looks at the text itself
and says what it is instead: empty, binary, cut short, a vocab.txt, another Hugging Face file (config.json,
tokenizer_config.json, vocab.json), JSON of another shape, or which section the installed library cannot read
(found by loading each section alone beside a one-word model) and, for a model, which type or field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from attnviz.core.untrusted import where_json_breaks

# a one-word model that every tokenizers version reads: each of the file's sections is tried beside it alone
_TRIVIAL_MODEL = {"type": "WordLevel", "vocab": {"[UNK]": 0}, "unk_token": "[UNK]"}
_SECTIONS = ("version", "model", "normalizer", "pre_tokenizer", "post_processor", "decoder", "added_tokens",
             "truncation", "padding")  # fmt: skip
# the fields a model type cannot do without (tokenizers' own serde structs), to name the one that is missing
_MODEL_NEEDS = {"BPE": ("vocab", "merges"), "WordPiece": ("vocab",), "WordLevel": ("vocab",), "Unigram": ("vocab",)}
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)  # as core.untrusted's: linear, no backtracking


class TemplateError(ValueError):
    """A TemplateProcessing that names a special token it does not define (tokenizers panics on encode)."""


def binary_problem() -> str:
    return "binary, not text (a sentencepiece .model or tokenizer.model?)"


def text_problem(text: str) -> str | None:
    """Why ``text`` is not JSON, in plain words; None where it is JSON (then the JSON guard's own line stands)."""
    if not text.strip():
        return "the file is empty"
    at = where_json_breaks(text)
    if at is None:
        return None
    if text.lstrip()[:1] in ("{", "[") and _cut_short(text):
        return f"cut short, its JSON stops part-way after {len(text.encode()):,} bytes (a partial download or copy?)"
    if _word_list(text):
        return "a list of words, one a line (a vocab.txt or merges.txt?), not JSON"
    return f"not JSON, malformed at line {at[0]}, column {at[1]}"


def _cut_short(text: str) -> bool:
    """More brackets opened than closed outside strings: the file's end is missing (a string cut part-way leaves
    its object's brackets open too)."""
    bare = _JSON_STRING.sub('""', text)
    return bare.count("{") + bare.count("[") > bare.count("}") + bare.count("]")


def _word_list(text: str) -> bool:
    """Lines of one or two bare words (vocab.txt: a token a line; merges.txt: a pair a line), not JSON's lines."""
    lines = [ln.strip() for ln in text.splitlines()[:1000] if ln.strip()]
    bare = [ln for ln in lines if len(ln.split()) <= 2 and not ln.endswith((",", "{", "[", ":")) and '":' not in ln]
    return len(lines) >= 2 and len(bare) >= 0.9 * len(lines)


def _kind(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true or false", type(None): "null"}.get(
        type(value), "a number"
    )


@dataclass(frozen=True)
class Lookalike:
    """Another file a tokenizer.json is mistaken for: it has no 'model' section, and this shape."""

    name: str
    matches: Callable[[dict], bool]


# the files a Hugging Face model folder holds beside tokenizer.json, first match wins
LOOKALIKES = (
    Lookalike("a tokenizer_config.json", lambda d: "tokenizer_class" in d or "model_max_length" in d),
    Lookalike("a model's config.json", lambda d: "architectures" in d or "model_type" in d),
    Lookalike("a special_tokens_map.json", lambda d: bool(d) and all(k.endswith("_token") for k in d)),
    Lookalike("a vocab.json (words to ids)", lambda d: bool(d) and all(type(v) is int for v in d.values())),
)


def json_problem(cfg, loads: Callable[[str], object], version: str) -> str:
    """Why parsed JSON ``cfg`` is not a tokenizer ``loads`` (tokenizers' ``Tokenizer.from_str``) accepts."""
    if not isinstance(cfg, dict):
        return f"JSON holding {_kind(cfg)}, where a tokenizer.json is one object with a 'model' section"
    if "model" not in cfg:
        what = next((k.name for k in LOOKALIKES if k.matches(cfg)), "JSON of another kind")
        return f"{what}: it has no 'model' section"
    for section in _SECTIONS:
        if section in cfg and not _reads({"model": _TRIVIAL_MODEL} | {section: cfg[section]}, loads):
            return _section_problem(section, cfg[section], version)
    return f"its sections each read, but not together, by tokenizers {version} (made by a newer version?)"


def _reads(cfg: dict, loads) -> bool:
    try:
        loads(json.dumps(cfg))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # a Rust panic is a BaseException
        return False
    return True


def _section_problem(section: str, value, version: str) -> str:
    if section == "version":
        return f"its version {value!r} is not one tokenizers {version} reads ('1.0')"
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        shape = "names no type" if isinstance(value, dict) else f"is {_kind(value)}"
        return f"its '{section}' section {shape} and is not one tokenizers {version} reads"
    kind = value["type"]
    known = known_types(section)
    if known and kind not in known:
        listed = f"; it reads {', '.join(sorted(known))}" if section == "model" else " (made by a newer version?)"
        return f"an unknown {section} type {kind!r} for tokenizers {version}{listed}"
    missing = [f for f in _MODEL_NEEDS.get(kind, ()) if section == "model" and f not in value]
    if missing:
        return f"its {kind} model has no {' or '.join(repr(f) for f in missing)}"
    return f"its {section} ({kind}) is not in the form tokenizers {version} reads: a field missing or of another kind"


def known_types(section: str) -> frozenset[str]:
    """The ``type`` names the installed tokenizers reads in ``section`` (its Python classes bear the same names)."""
    import tokenizers

    module = {
        "model": ("models", "Model"),
        "normalizer": ("normalizers", "Normalizer"),
        "pre_tokenizer": ("pre_tokenizers", "PreTokenizer"),
        "post_processor": ("processors", "PostProcessor"),
        "decoder": ("decoders", "Decoder"),
    }.get(section)
    if module is None:
        return frozenset()
    mod = getattr(tokenizers, module[0])
    root = getattr(mod, module[1])
    return frozenset(n for n, c in vars(mod).items() if isinstance(c, type) and c is not root and issubclass(c, root))
