"""A byte-level BPE's tokens as the text they stand for (GPT-2, RoBERTa, Llama 3, Qwen, Whisper).

Such a tokenizer stores each token's UTF-8 bytes as printable stand-ins (GPT-2's ``bytes_to_unicode``: the space is
``Ġ``, the newline ``Ċ``, 'é' is ``Ã©``, '注' is ``æ³¨``).  Shown as stored, every curly quote, accented letter,
CJK character or emoji reads as mojibake (``âĢĻ`` for '’').  A token is turned back into its bytes and read as
UTF-8; the bytes of a character the tokenizer split over several tokens cannot be read alone and are named as
SentencePiece's byte tokens are (``<0xE6>``), so a reader sees they are part of the neighbouring character.
"""

from __future__ import annotations

import functools

from attnviz import AttnvizError
from attnviz.core.untrusted import parse_json


@functools.cache
def _byte_of() -> dict[str, int]:
    """GPT-2's table inverted: the stand-in character of each byte -> the byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: chr(b) for b in printable}
    shifted = [b for b in range(256) if b not in chars]  # the rest in order, from U+0100
    chars.update({b: chr(256 + n) for n, b in enumerate(shifted)})
    return {c: b for b, c in chars.items()}


def is_byte_level(decoder_state: bytes | str | None) -> bool:
    """Whether a tokenizers ``decoder`` (its ``__getstate__()`` JSON) is or holds a ``ByteLevel`` decoder."""
    if not decoder_state:
        return False
    try:
        spec = parse_json(decoder_state, "the tokenizer's decoder")
    except AttnvizError:
        return False
    parts = spec.get("decoders") if isinstance(spec, dict) else None
    specs = [spec, *(parts if isinstance(parts, list) else [])]
    return any(isinstance(s, dict) and s.get("type") == "ByteLevel" for s in specs)


def token_text(token: str) -> str | None:
    """The text a byte-level token stands for, or None when it holds no byte past ASCII (the label as stored reads
    right: ``Ġthe``) or a character that is no byte's stand-in (an added token, kept as written)."""
    if token.isascii():  # (every stand-in past ASCII is itself past ASCII)
        return None
    table = _byte_of()
    try:
        data = bytes(table[c] for c in token)
    except KeyError:
        return None
    if data.isascii():
        return None
    text = data.decode("utf-8", errors="surrogateescape")  # a split character's bytes -> U+DC80..U+DCFF
    return "".join(f"<0x{ord(c) - 0xDC00:02X}>" if 0xDC80 <= ord(c) <= 0xDCFF else c for c in text)
