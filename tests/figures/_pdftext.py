"""A minimal PDF text extractor: proves that text in a figure is real, searchable text.

It does what a PDF viewer's search does: inflate the streams, read each font's /ToUnicode CMap,
then decode the strings shown by Tj/TJ in the page content with the font selected by Tf.
Text drawn as paths (or rasterised) yields nothing here.
"""

from __future__ import annotations

import re
import zlib

_OBJ = re.compile(rb"(\d+) 0 obj\s*")
_INT_OBJ = re.compile(rb"(\d+) 0 obj\s*(\d+)\s*endobj")


def _objects(data: bytes) -> dict[int, tuple[bytes, bytes | None]]:
    """object id -> (dictionary text, inflated stream or None); streams are cut by their /Length."""
    ints = {int(a): int(b) for a, b in _INT_OBJ.findall(data)}
    out = {}
    pos = 0
    while True:
        m = _OBJ.search(data, pos)
        if not m:
            break
        end = data.find(b"endobj", m.end())
        st = data.find(b"stream", m.end())
        if st != -1 and (end == -1 or st < end):
            head = data[m.end() : st]
            lm = re.search(rb"/Length (\d+)( 0 R)?", head)
            n = ints[int(lm.group(1))] if lm.group(2) else int(lm.group(1))
            start = st + len(b"stream")
            start += 2 if data[start : start + 2] == b"\r\n" else 1
            stream = data[start : start + n]
            if b"/FlateDecode" in head:
                stream = zlib.decompress(stream)
            out[int(m.group(1))] = (head, stream)
            pos = data.find(b"endobj", start + n) + 6
        else:
            out[int(m.group(1))] = (data[m.end() : end], None)
            pos = end + 6
    return out


def _cmap(stream: bytes) -> dict[int, str]:
    table: dict[int, str] = {}

    def uni(h: bytes) -> str:
        return bytes.fromhex(h.decode()).decode("utf-16be")

    for block in re.findall(rb"beginbfchar(.*?)endbfchar", stream, re.S):
        for src, dst in re.findall(rb"<([0-9a-fA-F]+)>\s*<([0-9a-fA-F]+)>", block):
            table[int(src, 16)] = uni(dst)
    for block in re.findall(rb"beginbfrange(.*?)endbfrange", stream, re.S):
        for a, b, rest in re.findall(rb"<([0-9a-fA-F]+)>\s*<([0-9a-fA-F]+)>\s*(\[[^\]]*\]|<[0-9a-fA-F]+>)", block):
            a, b = int(a, 16), int(b, 16)
            if rest.startswith(b"["):
                for k, h in enumerate(re.findall(rb"<([0-9a-fA-F]+)>", rest)):
                    table[a + k] = uni(h)
            else:
                start = uni(rest[1:-1])
                for k in range(b - a + 1):
                    table[a + k] = start[:-1] + chr(ord(start[-1]) + k)
    return table


_ESC = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"b": b"\b", b"f": b"\f", b"(": b"(", b")": b")", b"\\": b"\\"}


def _literal(s: bytes, i: int) -> tuple[bytes, int]:
    """Parse a PDF literal string starting after '(' at i; return (bytes, index after ')')."""
    out = bytearray()
    depth = 1
    while True:
        c = s[i : i + 1]
        if c == b"\\":
            n = s[i + 1 : i + 2]
            if n in _ESC:
                out += _ESC[n]
                i += 2
            elif n.isdigit():
                m = re.match(rb"[0-7]{1,3}", s[i + 1 : i + 4])
                out.append(int(m.group(0), 8))
                i += 1 + len(m.group(0))
            else:
                i += 2
            continue
        if c == b"(":
            depth += 1
        elif c == b")":
            depth -= 1
            if depth == 0:
                return bytes(out), i + 1
        out += c
        i += 1


_TOKEN = re.compile(rb"\(|<[0-9a-fA-F]*>|/[^\s/\[\]()<>]+|[-+.\d]+|[A-Za-z'\"*]+|\[|\]")


def pdf_text(data: bytes) -> list[str]:
    """Every BT..ET text object of every page content stream, decoded to Unicode."""
    objs = _objects(data)
    fonts: dict[int, dict[int, str]] = {}  # font object id -> cmap
    two_byte: dict[int, bool] = {}
    for oid, (head, _) in objs.items():
        m = re.search(rb"/ToUnicode (\d+) 0 R", head)
        if m and b"/Font" in head:
            fonts[oid] = _cmap(objs[int(m.group(1))][1] or b"")
            two_byte[oid] = b"/Type0" in head
    names: dict[bytes, int] = {}  # resource name (/F1) -> font object, wherever the font dictionary is
    for head, _ in objs.values():
        for name, ref in re.findall(rb"/([^\s/\[\]()<>]+)\s+(\d+) 0 R", head):
            if int(ref) in fonts:
                names[name] = int(ref)
    texts: list[str] = []
    for head, stream in objs.values():
        if stream is None or b"BT" not in stream or b"/Font" in head or b"/Subtype" in head:
            continue
        cur = None
        chunk: list[str] = []
        i = 0
        while i < len(stream):
            m = _TOKEN.search(stream, i)
            if not m:
                break
            tok = m.group(0)
            i = m.end()
            if tok == b"(":
                raw, i = _literal(stream, i)
            elif tok.startswith(b"<") and tok.endswith(b">"):
                raw = bytes.fromhex(tok[1:-1].decode())
            else:
                raw = None
                if tok.startswith(b"/"):
                    cur = names.get(tok[1:])
                elif tok == b"BT":
                    chunk = []
                elif tok == b"ET":
                    texts.append("".join(chunk))
                continue
            if cur in fonts:
                table = fonts[cur]
                if two_byte[cur]:
                    codes = [int.from_bytes(raw[k : k + 2], "big") for k in range(0, len(raw) - 1, 2)]
                else:
                    codes = list(raw)
                chunk.append("".join(table.get(c, "\ufffd") for c in codes))
    return texts
