"""The cluster credential's challenge-response, sans-IO: how two pnsq processes prove to each
other that they hold the cluster secret without sending it.

Every pnsq-to-pnsq link opens with it (docs/security.md). Both sides send a
:data:`CHALLENGE`: a fresh 32-byte nonce and the sender's identity (an nsqd's node id,
``host:tcp_port``), the dialer first, the listener in answer. The dialer then proves first:
``HMAC-SHA256(secret, LABEL ‖ role ‖ link ‖ nonce_dialer ‖ nonce_listener ‖ identity_dialer ‖
identity_listener)`` with role ``D``; the
listener checks it (:func:`hmac.compare_digest`) before it proves in turn with role ``L``, so a
stranger learns nothing from a listener but its nonce and one :data:`REFUSAL`. Why each input:

* both nonces: a proof holds for one connection only (no replay from another connection);
* the role: a listener's proof cannot be reflected back to it as a dialer's;
* the link (the protocol magic, ``"  R1"`` or ``"  V1"``): a proof for one kind of link opens
  no other;
* both identities: a node claims its node id inside the proof, so a peer without the secret
  can claim none, and the identity the listener sees is the one the dialer proved with. (With
  one secret shared by the cluster, any holder of it can prove any identity: the credential
  tells pnsq's processes from strangers, not one node from another.)

Frames, big-endian, the shape of ``"  R1"``'s (:mod:`protocol.replication`)::

    Frame => Size u32 | Type u8 | Body      Size = 1 + len(Body), 1 <= Size <= MAX_FRAME_SIZE

A :data:`REFUSAL` has the type and layout of ``"  R1"``'s Error frame (String code, String
text), so a peer that speaks ``"  R1"`` without the handshake reads why it was turned away.
Errors: :class:`HandshakeError` (the peer broke the exchange or proved wrong),
:class:`HandshakeRefused` (the peer turned us away), :class:`NotAHandshake` (the peer answered
with something else entirely).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import struct
from collections.abc import Iterable
from enum import IntEnum
from typing import Final

from .errors import ProtocolError

LABEL: Final = b"pnsq-cluster-auth-v1"  # domain separation: these MACs prove nothing else
VERSION: Final = 1
NONCE_SIZE: Final = 32
MAC_SIZE: Final = 32  # HMAC-SHA256
MAX_IDENTITY_SIZE: Final = 255  # bytes of UTF-8
MAX_TEXT_SIZE: Final = 1024  # bytes of UTF-8 in a refusal's code or text
REFUSED_CODE: Final = "E_CLUSTER_AUTH"  # the code of every refusal

FRAME_HEADER: Final = struct.Struct(
    ">I"  # size: bytes after this field (the type byte and the body)
    "B"  # type: FrameType
)
CHALLENGE: Final = struct.Struct(
    ">B"  # version: VERSION (no other value is accepted)
    "32s"  # nonce: NONCE_SIZE random bytes, fresh for this connection
    "B"  # identity length: bytes of UTF-8 identity that follow (0..MAX_IDENTITY_SIZE)
)  # then the identity
PROOF: Final = struct.Struct(
    ">32s"  # mac: HMAC-SHA256(secret, proof input; see the module doc)
)
TEXT_LENGTH: Final = struct.Struct(
    ">H"  # length: bytes of UTF-8 that follow (a refusal's code, then its text)
)
MAC_FIELD_LENGTH: Final = struct.Struct(
    ">H"  # length of the link and of each identity inside the MAC input (no ambiguity)
)
MAX_FRAME_SIZE: Final = 1 + 2 * (TEXT_LENGTH.size + MAX_TEXT_SIZE)


class FrameType(IntEnum):
    """The ``type`` byte of a handshake frame."""

    CHALLENGE = 0x21
    PROOF = 0x22
    REFUSAL = 0x85  # "  R1"'s Error


class Role(bytes):
    """Which end of the connection proves: the one that dialed, or the one that listened."""


DIALER: Final = Role(b"D")
LISTENER: Final = Role(b"L")


class HandshakeError(ProtocolError):
    """The peer broke the handshake, or does not hold the cluster secret."""


class HandshakeRefused(HandshakeError):
    """The peer turned this side away (its :data:`REFUSAL`); the text is the peer's."""


class NotAHandshake(HandshakeError):
    """The peer answered with something that is no handshake frame at all (its first frame
    type is none of :class:`FrameType`): a peer that does not speak the handshake, such as a
    stock nsqlookupd answering ``E_INVALID``, or garbage."""


def proof(
    secret: bytes,
    role: Role,
    link: bytes,
    nonces: tuple[bytes, bytes],
    identities: tuple[str, str],
) -> bytes:
    """The MAC ``role`` sends: ``nonces`` and ``identities`` are (dialer's, listener's)."""
    parts = [LABEL, role, MAC_FIELD_LENGTH.pack(len(link)), link, *nonces]
    for identity in identities:
        data = identity.encode()
        parts += [MAC_FIELD_LENGTH.pack(len(data)), data]
    return hmac.new(secret, b"".join(parts), hashlib.sha256).digest()


def encode_refusal(text: str) -> bytes:
    """The one frame a side sends before closing on a peer that failed (code
    :data:`REFUSED_CODE`, ``text`` cut to :data:`MAX_TEXT_SIZE` bytes)."""
    body = b""
    for part in (REFUSED_CODE, text):
        data = part.encode("utf-8", "replace")[:MAX_TEXT_SIZE]
        body += TEXT_LENGTH.pack(len(data)) + data
    return FRAME_HEADER.pack(1 + len(body), FrameType.REFUSAL) + body


def starts_handshake(first: int) -> bool:
    """Whether ``first``, the first byte a dialer sends after a link's magic, opens the
    handshake: a frame's size is below 2**24 (:data:`MAX_FRAME_SIZE`), so its first byte is
    always 0, while every ``"  V1"`` command starts with a letter. A listener that serves both
    secured and plain peers tells them apart by it without reading further."""
    return first == 0


def _frame(frame_type: FrameType, body: bytes) -> bytes:
    return FRAME_HEADER.pack(1 + len(body), frame_type) + body


class Handshake:
    """One side of the exchange. Send :meth:`data_to_send` (the dialer's challenge is ready at
    once),
    feed what arrives to :meth:`receive_data` until :attr:`done`, then send
    :meth:`data_to_send` once more (the listener's proof). Bytes received after the handshake
    are :meth:`unused`: the link's protocol starts there.

    Args:
        secret: the cluster secret (not empty).
        role: :data:`DIALER` or :data:`LISTENER`.
        link: the link kind both sides bind the proofs to (the protocol magic).
        identity: this side's identity (its node id).
        nonce: this side's nonce (:data:`NONCE_SIZE` bytes); a fresh random one if None.
    """

    def __init__(
        self, secret: bytes, role: Role, link: bytes, identity: str, nonce: bytes | None = None
    ) -> None:
        if not secret:
            raise ValueError("the cluster secret is empty")
        self._nonce = secrets.token_bytes(NONCE_SIZE) if nonce is None else nonce
        encoded = identity.encode()  # UnicodeEncodeError (a ValueError) for lone surrogates
        if len(self._nonce) != NONCE_SIZE or len(encoded) > MAX_IDENTITY_SIZE:
            raise ValueError("a nonce of 32 bytes and an identity of at most 255 bytes")
        self._secret, self._role, self._link, self._identity = secret, role, link, identity
        challenge = _frame(FrameType.CHALLENGE, self._challenge_body(encoded))
        # the listener answers a challenge with its own: a peer that opens with anything else
        # gets the refusal and nothing more, not even a nonce
        self._challenge = b"" if role == DIALER else challenge
        self._out = bytearray(challenge if role == DIALER else b"")
        self._buf = bytearray()
        self._peer_nonce = b""
        self.peer_identity: str | None = None  #: the identity the peer proved, once done
        self.done = False
        self._error: HandshakeError | None = None

    def _challenge_body(self, encoded: bytes) -> bytes:
        return CHALLENGE.pack(VERSION, self._nonce, len(encoded)) + encoded

    def data_to_send(self) -> bytes:
        """What to send now (taken: a second call returns only what came since)."""
        out, self._out = bytes(self._out), bytearray()
        return out

    def unused(self) -> bytes:
        """Bytes received after the peer's last handshake frame (taken)."""
        rest, self._buf = bytes(self._buf), bytearray()
        return rest

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Take the peer's bytes; they may split anywhere.

        Raises:
            HandshakeError: the bytes are not the exchange, or the peer's proof is wrong (again
                on every later call).
            HandshakeRefused: the peer sent its refusal.
        """
        if self._error is not None:
            raise self._error
        self._buf += data
        try:
            while not self.done:
                body = self._next_frame()
                if body is None:
                    return
                self._take(*body)
        except HandshakeError as exc:
            self._error = exc
            raise

    def _next_frame(self) -> tuple[int, bytes] | None:
        """The next complete frame as ``(type, body)``, or None until it has arrived."""
        if len(self._buf) < FRAME_HEADER.size:
            return None
        size, frame_type = FRAME_HEADER.unpack_from(self._buf)
        if frame_type not in tuple(FrameType):
            raise NotAHandshake(f"not a cluster handshake (frame type {frame_type:#04x})")
        if not 1 <= size <= MAX_FRAME_SIZE:
            raise HandshakeError(f"handshake frame size {size} outside 1..{MAX_FRAME_SIZE}")
        end = 4 + size
        if len(self._buf) < end:
            return None
        body = bytes(self._buf[FRAME_HEADER.size : end])
        del self._buf[:end]
        return frame_type, body

    def _take(self, frame_type: int, body: bytes) -> None:
        if frame_type == FrameType.REFUSAL:
            raise HandshakeRefused(_refusal_text(body))
        if not self._peer_nonce:
            if frame_type != FrameType.CHALLENGE:
                raise HandshakeError("expected the peer's CHALLENGE")
            self._take_challenge(body)
            if self._role == DIALER:  # the dialer proves first
                self._out += _frame(FrameType.PROOF, self._proof(DIALER))
            else:
                self._out += self._challenge
            return
        if frame_type != FrameType.PROOF or len(body) != PROOF.size:
            raise HandshakeError("expected the peer's PROOF")
        (mac,) = PROOF.unpack(body)
        peer_role = LISTENER if self._role == DIALER else DIALER
        if not hmac.compare_digest(mac, self._proof(peer_role)):
            raise HandshakeError("wrong proof: the peer does not hold the cluster secret")
        if self._role == LISTENER:
            self._out += _frame(FrameType.PROOF, self._proof(LISTENER))
        self.done = True

    def _take_challenge(self, body: bytes) -> None:
        if len(body) < CHALLENGE.size:
            raise HandshakeError("short CHALLENGE")
        version, nonce, length = CHALLENGE.unpack_from(body)
        if version != VERSION:
            raise HandshakeError(f"cluster handshake version {version}, expected {VERSION}")
        if len(body) != CHALLENGE.size + length:
            raise HandshakeError("CHALLENGE identity length disagrees with the frame size")
        if nonce == self._nonce:  # our own challenge reflected back
            raise HandshakeError("the peer echoed this side's nonce")
        try:
            identity = body[CHALLENGE.size :].decode()
        except UnicodeDecodeError as exc:
            raise HandshakeError(f"CHALLENGE identity: {exc}") from None
        self._peer_nonce, self.peer_identity = nonce, identity

    def _proof(self, role: Role) -> bytes:
        assert self.peer_identity is not None
        mine, theirs = (self._nonce, self._identity), (self._peer_nonce, self.peer_identity)
        dialer, listener = (mine, theirs) if self._role == DIALER else (theirs, mine)
        nonces, identities = (dialer[0], listener[0]), (dialer[1], listener[1])
        return proof(self._secret, role, self._link, nonces, identities)


def _refusal_text(body: bytes) -> str:
    """A refusal's ``code: text``, as far as it reads (it ends the connection either way)."""
    parts: list[str] = []
    pos = 0
    while pos + TEXT_LENGTH.size <= len(body) and len(parts) < 2:
        (length,) = TEXT_LENGTH.unpack_from(body, pos)
        pos += TEXT_LENGTH.size
        parts.append(body[pos : pos + length].decode("utf-8", "replace"))
        pos += length
    return ": ".join(parts) or "refused"


def http_credential(secret: bytes) -> str:
    """The value of :data:`HTTP_HEADER` for lookupd's cluster-control endpoints: hex
    ``HMAC-SHA256(secret, "pnsq-lookupd-http")`` (the secret itself never travels)."""
    return hmac.new(secret, b"pnsq-lookupd-http", hashlib.sha256).hexdigest()


HTTP_HEADER: Final = "X-Pnsq-Cluster-Auth"


def carries_credential(headers: Iterable[tuple[bytes, bytes]], credential: bytes) -> bool:
    """Whether a request's raw ``headers`` carry :data:`HTTP_HEADER` once, with ``credential``
    (:func:`http_credential`; compared in constant time, so timing tells a stranger nothing
    of it)."""
    name = HTTP_HEADER.lower().encode()
    given = [value for key, value in headers if key.lower() == name]
    return len(given) == 1 and hmac.compare_digest(given[0], credential)


def http_headers(secret: bytes) -> dict[str, str]:
    """The headers an nsqd sends with every call to lookupd's HTTP port: the credential with a
    secret, none without one (a lookupd without a secret asks for nothing, as before)."""
    return {HTTP_HEADER: http_credential(secret)} if secret else {}
