"""Garbage into the decoders the V2 parser does not cover: the snappy and deflate stream
readers, the binary MPUB body (HTTP ``/mpub?binary=true``), the youzan JSON header, the query
strings of HTTP requests, the cluster handshake (both sides, on both links) and the ``"  R1"``
replication decoders (both directions). Each gives a result or its own layer's error, never
another exception (no IndexError, struct.error, UnicodeDecodeError...), returns from every call
(a decoder fed a finite input ends), and the same outcome in any split of the input.

The garbage is random bytes, or a valid stream mutated (:func:`tests.strategies.mutated`: flips,
inserts, deletions, truncation, size-field tokens), which reaches past the frame headers into
the bodies."""

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
from protocol.cluster_auth import DIALER, LISTENER, NONCE_SIZE, Handshake, HandshakeError, Role
from protocol.errors import ClientError, ErrorCode
from protocol.ext import parse_json_header
from protocol.lookup_v1 import MAGIC_V1
from protocol.mpub import MpubFormatError, split_mpub_body
from protocol.parser import NEED_DATA
from protocol.replication import MAGIC as MAGIC_R1, Frame, ReplicationProtocolError
from protocol.replication_decoder import FollowerFrameDecoder, LeaderFrameDecoder
from protocol.replication_encoder import encode
from tests import strategies as S
from tests.unit.protocol.test_replication import (
    _follower_frames,
    _leader_frames,
    _small_records,
    _small_strings,
)

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


# ------------------------------------------------------------------ the cluster handshake

SECRET = b"fuzzed secret"
NONCES = {DIALER: b"D" * NONCE_SIZE, LISTENER: b"L" * NONCE_SIZE}
IDENTITIES = {DIALER: "127.0.0.1:4150", LISTENER: "127.0.0.1:4160"}


def _side(role: Role, link: bytes, secret: bytes = SECRET) -> Handshake:
    return Handshake(secret, role, link, IDENTITIES[role], NONCES[role])


def _sent_by(role: Role, link: bytes, secret: bytes) -> bytes:
    """Everything ``role`` sends in a whole exchange with a peer holding ``SECRET`` (with the
    fixed nonces, so that the stream is valid for :func:`_side`), its refusal included."""
    other = LISTENER if role == DIALER else DIALER
    sides = {role: _side(role, link, secret), other: _side(other, link)}
    sent = b""
    try:
        for _ in range(3):
            for source, sink in ((DIALER, LISTENER), (LISTENER, DIALER)):
                data = sides[source].data_to_send()
                sent += data if source == role else b""
                sides[sink].receive_data(data)
    except HandshakeError:
        pass  # a wrong secret: what was sent until then
    return sent


def _handshake_streams(role: Role, link: bytes) -> st.SearchStrategy[bytes]:
    """A stream ``role`` sends on ``link``: valid (the right secret) or refused (a wrong one)."""
    return st.sampled_from([SECRET, b"x"]).map(lambda secret: _sent_by(role, link, secret))


def _shake(role: Role, link: bytes, chunks: list[bytes]) -> tuple[bool, str | None, str]:
    """Feed ``chunks`` to ``role``'s side: (done, peer identity, error text or "")."""
    side = _side(role, link)
    try:
        for chunk in chunks:
            side.receive_data(chunk)
            side.data_to_send()
    except HandshakeError as exc:  # any other exception fails the test
        return side.done, side.peer_identity, f"{type(exc).__name__}: {exc}"
    return side.done, side.peer_identity, ""


@_FUZZ
@given(
    data=st.data(),
    role=st.sampled_from([DIALER, LISTENER]),
    link=st.sampled_from([MAGIC_R1, MAGIC_V1]),
)
def test_handshake_garbage(data: st.DataObject, role: Role, link: bytes) -> None:
    """Random bytes, or the peer's real stream mutated, into either side."""
    peer = DIALER if role == LISTENER else LISTENER
    wire = data.draw(_garbage(_handshake_streams(peer, link)))
    whole = _shake(role, link, [wire])
    assert whole == _shake(role, link, data.draw(S.splits(wire)))
    done, identity, error = whole
    if done:  # only a stream proving the secret completes it, as the peer it proved
        assert identity == IDENTITIES[peer]
        assert not error


def test_the_unmutated_streams_complete_the_handshake() -> None:
    for link in (MAGIC_R1, MAGIC_V1):
        for role, peer in ((LISTENER, DIALER), (DIALER, LISTENER)):
            assert _shake(role, link, [_sent_by(peer, link, SECRET)])[0]
            assert "wrong proof" in _shake(LISTENER, link, [_sent_by(DIALER, link, b"x")])[2]


# ------------------------------------------------------------------ the replication decoders


def _decode_replication(leader_side: bool, chunks: list[bytes]) -> tuple[list[Frame], str]:
    """Frames decoded, and the protocol error's text ("" without one)."""
    decoder = FollowerFrameDecoder() if leader_side else LeaderFrameDecoder()
    frames: list[Frame] = []
    try:
        for chunk in chunks:
            decoder.feed(chunk)
            while (frame := decoder.next_frame()) is not NEED_DATA:
                frames.append(frame)
    except ReplicationProtocolError as exc:  # any other exception fails the test
        return frames, str(exc)
    return frames, ""


_follower_streams = st.lists(_follower_frames(_small_strings), min_size=1, max_size=4).map(
    lambda frames: b"".join(map(encode, frames))
)
_leader_streams = st.lists(
    _leader_frames(_small_strings, _small_records), min_size=1, max_size=4
).map(lambda frames: b"".join(map(encode, frames)))


@_FUZZ
@given(data=st.data(), leader_side=st.booleans())
def test_replication_garbage(data: st.DataObject, leader_side: bool) -> None:
    """A follower's frames mutated into the leader's decoder, a leader's into the follower's."""
    wire = data.draw(_garbage(_follower_streams if leader_side else _leader_streams))
    whole = _decode_replication(leader_side, [wire])
    assert whole == _decode_replication(leader_side, data.draw(S.splits(wire)))
