"""The cluster credential's challenge-response (protocol.cluster_auth): two sides holding the
secret agree, byte at a time or in one piece; a wrong secret, a replayed proof, a reflected
proof or arbitrary bytes give a clear error, never a completed handshake."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from hypothesis import given, settings, strategies as st

from protocol.cluster_auth import (
    DIALER,
    FRAME_HEADER,
    LISTENER,
    PROOF,
    FrameType,
    Handshake,
    HandshakeError,
    HandshakeRefused,
    encode_refusal,
    http_credential,
    proof,
)
from protocol.replication import MAGIC, Error
from protocol.replication_decoder import LeaderFrameDecoder

SECRET = b"cluster secret"


def pair(
    dialer_secret: bytes = SECRET, listener_secret: bytes = SECRET, link: bytes = MAGIC
) -> tuple[Handshake, Handshake]:
    return (
        Handshake(dialer_secret, DIALER, link, "127.0.0.1:4150"),
        Handshake(listener_secret, LISTENER, link, "127.0.0.1:4250"),
    )


def run(dialer: Handshake, listener: Handshake, step: int = 1 << 20) -> None:
    """Shuttle bytes (``step`` at a time) until neither side has anything to send."""
    while True:
        moved = False
        for source, sink in ((dialer, listener), (listener, dialer)):
            data = source.data_to_send()
            for i in range(0, len(data), step):
                sink.receive_data(data[i : i + step])
            moved |= bool(data)
        if not moved:
            return


@pytest.mark.parametrize("step", [1, 2, 7, 1 << 20])
def test_both_sides_holding_the_secret_agree(step: int) -> None:
    dialer, listener = pair()
    run(dialer, listener, step)
    assert dialer.done
    assert listener.done
    assert listener.peer_identity == "127.0.0.1:4150"
    assert dialer.peer_identity == "127.0.0.1:4250"


def test_bytes_after_the_handshake_are_left_for_the_link() -> None:
    dialer, listener = pair()
    listener.receive_data(dialer.data_to_send())
    dialer.receive_data(listener.data_to_send())
    listener.receive_data(dialer.data_to_send() + b"HELLO...")
    assert listener.done
    assert listener.unused() == b"HELLO..."
    dialer.receive_data(listener.data_to_send())
    assert dialer.done


def test_wrong_secret_fails_at_the_listener_before_it_proves() -> None:
    dialer, listener = pair(dialer_secret=b"guess")
    listener.receive_data(dialer.data_to_send())
    challenge = listener.data_to_send()
    dialer.receive_data(challenge)
    with pytest.raises(HandshakeError, match="wrong proof"):
        listener.receive_data(dialer.data_to_send())
    assert not listener.done
    assert listener.data_to_send() == b""  # the listener proves nothing to a stranger
    with pytest.raises(HandshakeError, match="wrong proof"):  # sticky
        listener.receive_data(b"")


def _proof_frame(mac: bytes) -> bytes:
    return FRAME_HEADER.pack(1 + PROOF.size, FrameType.PROOF) + mac


NONCES = (b"\x01" * 32, b"\x02" * 32)
IDS = ("127.0.0.1:4150", "127.0.0.1:4250")


def test_a_listener_with_the_wrong_secret_fails_at_the_dialer() -> None:
    dialer = Handshake(SECRET, DIALER, MAGIC, IDS[0], nonce=NONCES[0])
    impostor = Handshake(b"impostor", LISTENER, MAGIC, IDS[1], nonce=NONCES[1])
    impostor.receive_data(dialer.data_to_send())
    dialer.receive_data(impostor.data_to_send())
    dialer.data_to_send()
    # the impostor skips checking the dialer and proves with the secret it has
    forged = proof(b"impostor", LISTENER, MAGIC, NONCES, IDS)
    with pytest.raises(HandshakeError, match="wrong proof"):
        dialer.receive_data(_proof_frame(forged))
    assert not dialer.done


def test_a_proof_replayed_from_another_connection_fails() -> None:
    # a stranger recorded a genuine dialer's challenge and proof, and replays both on a new
    # connection: the listener's new nonce makes the recorded proof wrong
    genuine = Handshake(SECRET, DIALER, MAGIC, IDS[0], nonce=NONCES[0])
    recorded_challenge = genuine.data_to_send()
    recorded_proof = _proof_frame(proof(SECRET, DIALER, MAGIC, NONCES, IDS))
    listener = Handshake(SECRET, LISTENER, MAGIC, IDS[1])  # a fresh random nonce
    listener.receive_data(recorded_challenge)
    with pytest.raises(HandshakeError, match="wrong proof"):
        listener.receive_data(recorded_proof)
    assert not listener.done


def test_the_dialers_own_proof_reflected_back_fails() -> None:
    dialer = Handshake(SECRET, DIALER, MAGIC, IDS[0], nonce=NONCES[0])
    mirror = Handshake(b"stranger", LISTENER, MAGIC, IDS[1], nonce=NONCES[1])
    mirror.receive_data(dialer.data_to_send())
    dialer.receive_data(mirror.data_to_send())
    own = dialer.data_to_send()
    assert own == _proof_frame(proof(SECRET, DIALER, MAGIC, NONCES, IDS))
    with pytest.raises(HandshakeError, match="wrong proof"):  # the role is in the MAC input
        dialer.receive_data(own)


def test_a_listener_speaks_only_in_answer_to_a_challenge() -> None:
    first = Handshake(SECRET, LISTENER, MAGIC, "a")
    second = Handshake(SECRET, LISTENER, MAGIC, "b")
    assert first.data_to_send() == b""  # not even its nonce before the dialer's challenge
    assert second.data_to_send() == b""
    with pytest.raises(HandshakeError, match="not a cluster handshake"):
        first.receive_data(b"\x00\x00\x00\x05\x01HELO")
    assert first.data_to_send() == b""


def test_the_listener_sees_the_identity_the_dialer_proved_with() -> None:
    # a stranger swaps the identity in a genuine challenge: the genuine proof no longer holds
    genuine = Handshake(SECRET, DIALER, MAGIC, IDS[0], nonce=NONCES[0])
    challenge = genuine.data_to_send()
    swapped = challenge.replace(IDS[0].encode(), b"127.0.0.1:4999")
    listener = Handshake(SECRET, LISTENER, MAGIC, IDS[1], nonce=NONCES[1])
    listener.receive_data(swapped)
    assert listener.peer_identity == "127.0.0.1:4999"
    with pytest.raises(HandshakeError, match="wrong proof"):
        listener.receive_data(_proof_frame(proof(SECRET, DIALER, MAGIC, NONCES, IDS)))


def test_a_proof_for_another_link_kind_fails() -> None:
    dialer = Handshake(SECRET, DIALER, b"  V1", "n")
    listener = Handshake(SECRET, LISTENER, MAGIC, "l")
    listener.receive_data(dialer.data_to_send())
    dialer.receive_data(listener.data_to_send())
    with pytest.raises(HandshakeError, match="wrong proof"):
        listener.receive_data(dialer.data_to_send())


def test_an_echoed_nonce_fails() -> None:
    dialer = Handshake(SECRET, DIALER, MAGIC, "n")
    challenge = dialer.data_to_send()
    with pytest.raises(HandshakeError, match="echoed"):
        dialer.receive_data(challenge)


def test_a_replication_hello_is_not_a_challenge() -> None:
    listener = Handshake(SECRET, LISTENER, MAGIC, "l")
    with pytest.raises(HandshakeError, match="not a cluster handshake"):
        listener.receive_data(b"\x00\x00\x00\x20\x01" + b"\x00" * 31)


def test_a_refusal_raises_refused_and_reads_as_a_replication_error() -> None:
    refusal = encode_refusal("wrong proof")
    dialer = Handshake(SECRET, DIALER, MAGIC, "n")
    with pytest.raises(HandshakeRefused, match="E_CLUSTER_AUTH: wrong proof"):
        dialer.receive_data(refusal)
    decoder = LeaderFrameDecoder()
    decoder.feed(refusal)
    assert decoder.next_frame() == Error("E_CLUSTER_AUTH", "wrong proof")


@settings(max_examples=300)
@given(st.binary(max_size=300), st.sampled_from([DIALER, LISTENER]), st.integers(1, 64))
def test_arbitrary_bytes_give_progress_or_a_clear_error(
    data: bytes, role: bytes, step: int
) -> None:
    side = Handshake(SECRET, DIALER if role == DIALER else LISTENER, MAGIC, "n")
    reason = ""
    try:
        for i in range(0, len(data), step):
            side.receive_data(data[i : i + step])
    except HandshakeError as exc:  # any other exception fails the test
        reason = str(exc) or "no text"
    assert reason != "no text"
    assert not side.done  # no bytes without the secret complete it


@settings(max_examples=100)
@given(st.binary(min_size=1, max_size=64), st.binary(min_size=1, max_size=64))
def test_only_equal_secrets_agree(first: bytes, second: bytes) -> None:
    dialer, listener = pair(first, second)
    if first == second:
        run(dialer, listener)
        assert dialer.done
        assert listener.done
    else:
        with pytest.raises(HandshakeError):
            run(dialer, listener)
        assert not listener.done
        assert not dialer.done


@given(st.integers(1, 200))
def test_byte_at_a_time_any_split(step: int) -> None:
    dialer, listener = pair()
    run(dialer, listener, step)
    assert dialer.done
    assert listener.done


def test_http_credential_is_the_documented_hmac() -> None:
    expected = hmac.new(SECRET, b"pnsq-lookupd-http", hashlib.sha256).hexdigest()
    assert http_credential(SECRET) == expected
    assert http_credential(b"other") != expected


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        Handshake(b"", DIALER, MAGIC, "n")
    with pytest.raises(ValueError, match="32 bytes"):
        Handshake(SECRET, DIALER, MAGIC, "n", nonce=b"short")
    with pytest.raises(ValueError, match="255 bytes"):
        Handshake(SECRET, DIALER, MAGIC, "n" * 256)
