"""Garbage into the decoders the V2 parser does not cover: the snappy and deflate stream
readers, the binary MPUB body (HTTP ``/mpub?binary=true``), the youzan JSON header, and the
query strings of HTTP requests. Each gives a result or its own layer's error, never another
exception, and the same outcome in any split of the input."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from nsqd.tcp.compression import (
    STREAM_IDENTIFIER,
    CompressionError,
    DeflateDecoder,
    DeflateEncoder,
    SnappyDecoder,
    SnappyEncoder,
)
from pnsq._netio.http import HTTPError, QueryArgs
from protocol.errors import ClientError, ErrorCode
from protocol.ext import parse_json_header
from protocol.mpub import MpubFormatError, split_mpub_body
from tests import strategies as S

_FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# compressible (repeated) as well as random messages: the encoders send the first kind as
# compressed chunks, the second often as stored ones
_messages = st.lists(
    st.binary(max_size=300) | st.binary(min_size=1, max_size=30).map(lambda b: b * 20),
    min_size=1,
    max_size=4,
)


def _decode(decoder: SnappyDecoder | DeflateDecoder, chunks: list[bytes]) -> bytes | str:
    """Everything decoded, or the error text."""
    out = b""
    try:
        for chunk in chunks:
            out += decoder.decode(chunk)
            while decoder.pending:
                out += decoder.decode(b"")
    except CompressionError as exc:
        return str(exc)
    return out


def _garbage(valid: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """Random bytes, or a valid stream mutated (flips, inserts, size-field tokens...)."""
    return st.one_of(st.binary(max_size=400), valid.flatmap(S.mutated))


_snappy_streams = _messages.map(lambda ms: b"".join(SnappyEncoder().encode(m) for m in ms))
_deflate_streams = _messages.map(lambda ms: b"".join(DeflateEncoder(6).encode(m) for m in ms))


@_FUZZ
@given(data=st.data(), wire=_garbage(_snappy_streams) | _garbage(st.just(STREAM_IDENTIFIER)))
def test_snappy_garbage(data: st.DataObject, wire: bytes) -> None:
    whole = _decode(SnappyDecoder(), [wire])
    split = _decode(SnappyDecoder(), data.draw(S.splits(wire)))
    assert type(split) is type(whole)
    if isinstance(whole, bytes):
        assert split == whole


@_FUZZ
@given(data=st.data(), wire=_garbage(_deflate_streams))
def test_deflate_garbage(data: st.DataObject, wire: bytes) -> None:
    whole = _decode(DeflateDecoder(), [wire])
    split = _decode(DeflateDecoder(), data.draw(S.splits(wire)))
    assert type(split) is type(whole)
    if isinstance(whole, bytes):
        assert split == whole


def _mpub(bodies: list[bytes]) -> bytes:
    return len(bodies).to_bytes(4, "big") + b"".join(len(b).to_bytes(4, "big") + b for b in bodies)


@_FUZZ
@given(_garbage(st.lists(st.binary(min_size=1, max_size=50), min_size=1, max_size=5).map(_mpub)))
def test_mpub_body_garbage(body: bytes) -> None:
    error: MpubFormatError | None = None
    try:
        messages = split_mpub_body(body, max_msg_size=64, max_body_size=4096)
    except MpubFormatError as exc:
        error = exc
    if error is not None:
        assert error.code in (ErrorCode.BAD_BODY, ErrorCode.BAD_MESSAGE)
        return
    assert messages
    assert all(1 <= len(m) <= 64 for m in messages)
    assert body.startswith(_mpub(messages))  # each message exactly as its size field says


_headers = st.dictionaries(
    st.sampled_from(["##trace_id", "##channel_filter_tag", "key", ""]),
    st.one_of(st.text(max_size=20), st.integers(), st.none(), st.booleans()),
).map(lambda d: json.dumps(d).encode())


@_FUZZ
@given(_garbage(_headers))
def test_json_header_garbage(header: bytes) -> None:
    error: ClientError | None = None
    try:
        parse_json_header(header)
    except ClientError as exc:
        error = exc
    assert error is None or not error.fatal


class _Request(QueryArgs):
    def __init__(self, raw_query: str) -> None:
        self.raw_query = raw_query
        self._query = None


@_FUZZ
@given(
    st.one_of(
        st.text(max_size=100),
        st.binary(max_size=100).map(lambda b: b.decode("latin-1")),
        _garbage(st.just(b"topic=t&binary=true&channel=c%20d")).map(lambda b: b.decode("latin-1")),
    )
)
def test_query_string_garbage(raw: str) -> None:
    request = _Request(raw)
    error: HTTPError | None = None
    try:
        request.arg("topic")
    except HTTPError as exc:
        error = exc
    assert error is None or (error.status, error.message) == (400, "INVALID_REQUEST")


def test_a_bad_escape_is_invalid_request() -> None:
    with pytest.raises(HTTPError):
        _Request("topic=%zz").arg("topic")
