"""``--text-file FILE``: the text of a long document read from a file (``extract``, ``figure``, ``compare``,
``open``).  A text given as ``--text "$(cat doc.txt)"`` stops at the kernel's limit on one argument (128 KiB on
Linux: "Argument list too long", before attnviz runs) and is quoted by hand on Windows.

Read as UTF-8 (a byte-order mark dropped), its final line breaks dropped as ``$(cat FILE)`` drops them (a byte-level
tokenizer would make a token of a trailing newline); then it is the command's ``--text``.
"""

from __future__ import annotations

import argparse

from attnviz import AttnvizError

# far past any model's positions (a 32,768-token context is about 150 kB of English): a bigger file is not a text
MAX_TEXT_FILE_BYTES = 64 * 2**20


def text_from_file(args: argparse.Namespace) -> None:
    """Set ``args.text`` from ``args.text_file`` where one is given; AttnvizError naming the fix otherwise."""
    path = getattr(args, "text_file", None)
    if path is None:
        return
    if getattr(args, "text", None):
        raise AttnvizError("give --text or --text-file, not both", param="text")
    from attnviz.core.untrusted import regular_file  # (only when a file is given: every command imports this module)

    p = regular_file(path, "--text-file")
    size = p.stat().st_size
    if size > MAX_TEXT_FILE_BYTES:
        raise AttnvizError(
            f"--text-file {p}: {size / 2**20:.0f} MB is not a text to run (at most {MAX_TEXT_FILE_BYTES // 2**20} MB);"
            " give the part to analyse",
            param="text",
        )
    try:
        text = p.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise AttnvizError(
            f"--text-file {p}: not UTF-8 text (byte {e.start}); save it as UTF-8", param="text"
        ) from None
    text = text.rstrip("\r\n")
    if not text.strip():
        raise AttnvizError(f"--text-file {p}: holds no text; give a file with the text to analyse", param="text")
    args.text = text
