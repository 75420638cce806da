"""Go formatting helpers, so error texts match nsqd byte for byte."""

from __future__ import annotations

from ._goprint import go_printable

_ESCAPES = {
    0x07: "\\a",
    0x08: "\\b",
    0x0C: "\\f",
    0x0A: "\\n",
    0x0D: "\\r",
    0x09: "\\t",
    0x0B: "\\v",
    0x5C: "\\\\",
    0x22: '\\"',
}


def go_quote(raw: bytes) -> str:
    """Format like Go's ``%q`` (``strconv.Quote``): printable UTF-8 kept, the rest escaped."""
    out = ['"']
    text = raw.decode("utf-8", errors="surrogateescape")
    for ch in text:
        cp = ord(ch)
        if 0xDC80 <= cp <= 0xDCFF:  # an invalid UTF-8 byte, kept by surrogateescape
            out.append(f"\\x{cp - 0xDC00:02x}")
        elif cp in _ESCAPES:
            out.append(_ESCAPES[cp])
        elif cp < 0x20 or cp == 0x7F:
            out.append(f"\\x{cp:02x}")
        elif cp < 0x80 or go_printable(cp):
            out.append(ch)
        elif cp < 0x10000:
            out.append(f"\\u{cp:04x}")
        else:
            out.append(f"\\U{cp:08x}")
    out.append('"')
    return "".join(out)


def go_bytes(raw: bytes) -> str:
    """Format like Go's ``%s`` of a byte slice: the bytes as they are."""
    return raw.decode("utf-8", errors="surrogateescape")


def parse_base10(raw: bytes) -> int | None:
    """nsqd's ``ByteToBase10``: ASCII digits only (no sign); empty is 0; None if not digits.

    The result is a Go uint64: it wraps modulo 2**64, as nsqd's does.
    """
    n = 0
    for c in raw:
        if c < 0x30 or c > 0x39:
            return None
        n = (n * 10 + (c - 0x30)) & 0xFFFF_FFFF_FFFF_FFFF
    return n


def go_int64(n: int) -> int:
    """Go's ``int64(n)`` and int64 arithmetic: ``n`` wrapped into [-2**63, 2**63)."""
    return (n + (1 << 63)) % (1 << 64) - (1 << 63)
