"""Why a ``tokenizers.Tokenizer`` could not encode a text, in words a user can act on: the text is not valid Unicode,
a word has no token and the model no unknown token to use instead, the post_processor's template reads a second
text a single text does not have, or the step (normalizer, pre_tokenizer, model, post_processor) it failed in.

Never the library's own text: a Rust panic says "index out of bounds: the len is 1 but the index is 1", a model
"WordLevel error: Missing [UNK] token from the vocabulary", a lone surrogate "TextInputSequence must be str" — the
words of the code that failed, not of the file or the text.  Asked only once an encode has failed, so the steps are
run again one at a time here (each guarded: a step may panic again) to find the one that fails.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

SHOWN = 40  # a word of the text quoted up to this many characters


@dataclass(frozen=True)
class Problem:
    """What is wrong (``words``), whose it is (``param``: "text" or "tokenizer") and what to do (``fix``)."""

    words: str
    param: str
    fix: str


def text_problem(texts: list[tuple[str, object]]) -> Problem | None:
    """A text that is not a valid Unicode string (``texts``: (what it is, the value)): a lone surrogate (an
    argument or file in another encoding read with Python's surrogateescape, or a ``\\ud800`` JSON escape), which
    tokenizers refuses; or no string at all."""
    for what, t in texts:
        if not isinstance(t, str):
            param = "text_pair" if what == "pair text" else "text"
            return Problem(f"the {what} is a {type(t).__name__}, not a string", param, f"give the {what} as text")
        at = next((k for k, ch in enumerate(t) if 0xD800 <= ord(ch) <= 0xDFFF), None)
        if at is not None:
            return Problem(
                f"the {what} holds U+{ord(t[at]):04X} at character {at + 1}, half of a UTF-16 surrogate pair and no "
                "character (bytes that were not UTF-8, or a \\ud800-style escape)",
                "text_pair" if what == "pair text" else "text",
                f"give the {what} as UTF-8",
            )
    return None


def tokenizer_problem(tok, texts: list, again: Callable, pair: bool, guard: Callable) -> Problem:
    """The step of ``tok`` (a ``tokenizers.Tokenizer``) that fails on ``texts`` (one text, a pair, or a text's
    words), each run again alone under ``guard`` (a context manager keeping a panic's report off the terminal);
    ``again(t)``: the failed encode with tokenizer ``t`` (here a copy without the post_processor: a template runs
    even where no special tokens are asked for)."""
    cfg = _config(tok, guard)
    added = set(_run(guard, lambda: [t.content for t in tok.get_added_tokens_decoder().values()]) or ())
    for text in texts:
        normalized = text
        if tok.normalizer is not None:
            normalized = _run(guard, lambda t=text: tok.normalizer.normalize_str(t))
            if normalized is None:
                return _step("normalizer", cfg)
        pieces = [normalized]
        if tok.pre_tokenizer is not None:
            split = _run(guard, lambda n=normalized: [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(n)])
            if split is None:
                return _step("pre_tokenizer", cfg)
            pieces = split
        for piece in pieces:  # an added token is matched before the model sees the text
            if piece not in added and _run(guard, lambda p=piece: tok.model.tokenize(p)) is None:
                return _model(cfg.get("model"), piece)
    if tok.post_processor is not None and _run(guard, lambda: again(_without_post(tok))) is not None:
        return _post(cfg.get("post_processor"), pair)
    return Problem("the tokenizers library fails on it in a step attnviz cannot single out", "tokenizer", _SAVED)


_SAVED = "give the tokenizer.json that save_pretrained (or tokenizer.save) wrote for the model"


def _run(guard: Callable, fn: Callable):
    """``fn()``, or None where it raises or panics (a Rust panic is a BaseException)."""
    try:
        with guard():
            return fn()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:
        return None


def _without_post(tok):
    from tokenizers import Tokenizer

    bare = Tokenizer.from_str(tok.to_str())
    bare.post_processor = None
    return bare


def _config(tok, guard: Callable) -> dict:
    """The tokenizer's sections, as tokenizers writes them back (its file passed the JSON guard on load: so does
    this; no size cap, the file's was checked then)."""
    from attnviz import AttnvizError
    from attnviz.core.untrusted import parse_json

    text = _run(guard, tok.to_str)
    try:
        cfg = parse_json(text, "the tokenizer", limit_bytes=None) if text else {}
    except AttnvizError:
        cfg = {}
    return cfg if isinstance(cfg, dict) else {}


def _kind(section) -> str:
    kind = section.get("type") if isinstance(section, dict) else None
    return f" ({kind})" if isinstance(kind, str) and kind.isidentifier() else ""


def _step(name: str, cfg: dict) -> Problem:
    return Problem(f"its {name}{_kind(cfg.get(name))} fails on it", "tokenizer", _SAVED)


def _quote(piece: str) -> str:
    return repr(piece if len(piece) <= SHOWN else piece[:SHOWN] + "…")


def _model(model, piece: str) -> Problem:
    """A word the model has no token for: the unknown token it would use instead is missing (the usual cause), or
    the model fails on the word some other way."""
    model = model if isinstance(model, dict) else {}
    kind = _kind(model).strip(" ()") or "tokenizer"
    word = f"the word {_quote(piece)} of the text"
    fix = (
        "give a tokenizer.json whose vocabulary holds its unknown token (the one save_pretrained wrote for the model), "
        "or text within its vocabulary"
    )
    if kind == "Unigram":  # its pieces must spell the word from each character on, else it needs its unk_id
        if model.get("unk_id") is None:
            return Problem(
                f"its Unigram model's pieces do not spell {word} and it has no unknown piece (unk_id)", "tokenizer", fix
            )
    elif "unk_token" in model:
        unk, vocab = model.get("unk_token"), model.get("vocab")
        if unk is None:
            return Problem(
                f"its {kind} model has no token for (part of) {word} and no unknown token (unk_token)", "tokenizer", fix
            )
        if isinstance(vocab, dict) and unk not in vocab:
            return Problem(
                f"its {kind} model has no token for (part of) {word}, and its unknown token {_quote(str(unk))} is "
                "not in its vocabulary either",
                "tokenizer",
                fix,
            )
    return Problem(f"its {kind} model fails on {word}", "tokenizer", _SAVED)


def _post(post, pair: bool) -> Problem:
    """The post_processor fails (the text encodes without the special tokens): a template whose one-text form reads
    the second text (``$B``) indexes a text that is not there."""
    procs = [post] if isinstance(post, dict) else []
    if isinstance(post, dict) and isinstance(post.get("processors"), list):
        procs += [p for p in post["processors"] if isinstance(p, dict)]
    for proc in procs:
        undefined = _undefined(proc) if proc.get("type") == "TemplateProcessing" else None
        if undefined is not None:  # (a file is refused for it on load: this is a tokenizer built otherwise)
            return Problem(
                f"its post_processor's template uses special token {_quote(undefined)} that it does not define",
                "tokenizer",
                _SAVED,
            )
        if proc.get("type") == "TemplateProcessing" and not pair and _reads_b(proc.get("single")):
            return Problem(
                "its post_processor's template for one text (single) reads a second text ($B) that one text does "
                "not have",
                "tokenizer",
                f"{_SAVED}, whose single template reads $A only",
            )
    what = "a pair of texts" if pair else "one text"
    return Problem(f"its post_processor{_kind(post)} fails on {what}", "tokenizer", _SAVED)


def _reads_b(template) -> bool:
    return isinstance(template, list) and any(
        isinstance(p, dict) and isinstance(p.get("Sequence"), dict) and p["Sequence"].get("id") == "B" for p in template
    )


def _undefined(proc: dict) -> str | None:
    """The first special token ``proc``'s templates use and its ``special_tokens`` do not define."""
    defined = proc.get("special_tokens")
    defined = defined if isinstance(defined, dict) else {}
    for part in ("single", "pair"):
        for piece in proc.get(part) or []:
            tok = piece.get("SpecialToken") if isinstance(piece, dict) else None
            if isinstance(tok, dict) and isinstance(tok.get("id"), str) and tok["id"] not in defined:
                return tok["id"]
    return None
