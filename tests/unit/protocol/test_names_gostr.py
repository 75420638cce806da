"""Topic and channel names (protocol.names) and Go's string and integer conventions
(protocol.gostr). ``go_quote`` expectations were produced by Go 1.26's
``fmt.Sprintf("%q", string(b))``."""

from __future__ import annotations

import subprocess

import pytest

from protocol._goprint import UNICODE_VERSION, runs
from protocol.gostr import go_bytes, go_quote, parse_base10
from protocol.names import is_ephemeral, is_valid_name
from tests.daemons import TOOLS

GOPRINT = TOOLS / "bin" / "goprint-interop"


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("a", True),
        ("." * 64, True),
        ("a" * 65, False),
        ("a" * 54 + "#ephemeral", True),
        ("a" * 55 + "#ephemeral", False),  # the suffix counts towards 64
        ("#ephemeral", False),
        ("a#ephemeral#ephemeral", False),
        ("a#eph", False),
        ("", False),
        ("a b", False),
        ("abc\n", False),  # Go's $ never matches before a trailing newline
        ("é", False),
        ("UPPER_lower-0.9", True),
    ],
)
def test_names(name: str, valid: bool) -> None:
    assert is_valid_name(name) is valid


def test_ephemeral() -> None:
    assert is_ephemeral("t#ephemeral")
    assert not is_ephemeral("t")


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        (b"", 0),
        (b"0", 0),
        (b"0042", 42),
        (b"12345678901234", 12345678901234),
        (b"-1", None),
        (b"+1", None),
        (b" 1", None),
        (b"1.0", None),
        ("\u0661".encode(), None),
    ],
)
def test_parse_base10(raw: bytes, value: int | None) -> None:
    assert parse_base10(raw) == value


def test_parse_base10_wraps_like_go_uint64() -> None:
    assert parse_base10(b"18446744073709551615") == 2**64 - 1
    assert parse_base10(b"18446744073709551616") == 0
    assert parse_base10(b"18446744073709551666") == 50


# Each expectation is Go 1.26's fmt.Sprintf("%q", string(raw)).
_GO_QUOTES = [
    (b"bad!topic", '"bad!topic"'),
    (b"", '""'),
    (b"a\tb\xff", '"a\\tb\\xff"'),
    (b"caf\xc3\xa9", '"café"'),
    (b"\xe2\x80\x8b", '"\\u200b"'),  # zero width space (Cf)
    (b"\xc2\xa0", '"\\u00a0"'),  # no-break space (Zs)
    (b"\xe3\x80\x80", '"\\u3000"'),
    (b"\xf0\x9f\x98\x80", '"😀"'),
    (b"\xf3\xa0\x80\x81", '"\\U000e0001"'),
    (b"\x7f", '"\\x7f"'),
    (b"\x00\x1b", '"\\x00\\x1b"'),
    (b"\xc2\x85", '"\\u0085"'),
    (b'"\\', '"\\"\\\\"'),
    (b"'", '"\'"'),
    (b"\x07\x08\x0c\x0b\r\n\t", '"\\a\\b\\f\\v\\r\\n\\t"'),
    (b"\xed\xa0\x80", '"\\xed\\xa0\\x80"'),  # an encoded surrogate is invalid UTF-8
    (b"\xe2\x82A", '"\\xe2\\x82A"'),  # truncated sequence
    (b"\xc0\x80", '"\\xc0\\x80"'),  # overlong
    (b"\xf4\x90\x80\x80", '"\\xf4\\x90\\x80\\x80"'),  # above U+10FFFF
    (b"\xef\xbf\xbd", '"\ufffd"'),  # a real U+FFFD is printable
    (b"\xef\xbb\xbf", '"\\ufeff"'),
    (b"\xee\x80\x80", '"\\ue000"'),  # private use
    (b"\xe2\x80\xa8", '"\\u2028"'),
    (b"\xcd\xb8", '"\\u0378"'),  # unassigned
    (b"\xe0\xa4\x95\xe0\xa5\x8d", '"क्"'),
]


@pytest.mark.parametrize(("raw", "quoted"), _GO_QUOTES, ids=[repr(r) for r, _ in _GO_QUOTES])
def test_go_quote(raw: bytes, quoted: str) -> None:
    assert go_quote(raw) == quoted


def test_go_quote_unicode_15() -> None:
    """U+1F6DC is new in Unicode 15 (Go 1.21+), unknown to Python 3.11's Unicode 14 tables."""
    assert go_quote("\U0001f6dc".encode()) == '"\U0001f6dc"'
    assert go_quote("\u0378".encode()) == '"\\u0378"'  # unassigned


def test_the_printable_table_is_gos() -> None:
    """protocol/_goprint.py equals unicode.IsPrint of the Go that builds nsqd (scripts/setup
    builds the generator)."""
    assert GOPRINT.exists(), f"{GOPRINT} missing: run scripts/setup"
    out = subprocess.run([str(GOPRINT)], capture_output=True, text=True, check=True).stdout
    version, *lines = out.split()[:1] + out.splitlines()[1:]
    assert version == UNICODE_VERSION
    assert runs() == [tuple(int(x, 16) for x in line.split()) for line in lines]


def test_go_bytes_is_raw() -> None:
    assert go_bytes(b"a\xff\n").encode("utf-8", "surrogateescape") == b"a\xff\n"
