"""nsqlookupd's TCP protocol V1, sans-IO: the server's command parser and both sides' encoders.

The wire, as nsqlookupd 1.3.0 speaks it (``nsqlookupd/lookup_protocol_v1.go``, ``tcp.go``):

* the client sends the magic ``"  V1"``; anything else gets ``E_BAD_PROTOCOL`` and a close;
* commands are lines ending in ``\\n``, trimmed of white space and split on single spaces:
  ``PING``, ``IDENTIFY`` (followed by ``[i32 size][JSON]``), ``REGISTER <topic> [<channel>]``,
  ``UNREGISTER <topic> [<channel>]``;
* every reply, errors included, is ``[i32 BE size][data]`` with **no frame type**; every error is
  fatal (the server sends it, then closes).

pnsq's extension (never sent to a peer that did not ask for it): a peer whose IDENTIFY body
lists ``"partitions"`` in ``"pnsq_extensions"`` and whose lookupd echoes it in the reply
registers partitions, in youzan nsqlookupd's form ``REGISTER <topic> <partition> [<channel>]``
(the server sets :attr:`LookupV1Parser.partitioned` once it has granted the extension).

:class:`LookupV1Parser` is the server side: ``receive_data(bytes)`` (``b""`` = EOF), then
``next_event()`` until :data:`NEED_DATA`; a :class:`LookupV1Error` is the reply to send before
closing. The client side is :func:`encode_identify`, :func:`encode_command` and
:class:`ResponseReader`.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from enum import Enum, auto
from typing import Final

from .names import is_valid_channel_name, is_valid_topic_name

MAGIC_V1: Final = b"  V1"
EXTENSIONS_KEY: Final = "pnsq_extensions"  # in both IDENTIFY bodies: the extensions spoken
EXT_PARTITIONS: Final = "partitions"  # REGISTER/UNREGISTER <topic> <partition> [<channel>]
RACK_KEY: Final = "pnsq_rack"  # in a partitioned peer's IDENTIFY body: its failure domain
MAX_PARTITION_ID: Final = 254  # youzan nsqlookupd's range for a registered partition id
DEFAULT_MAX_LINE: Final = 64 * 1024  # nsqlookupd has no limit; pnsq closes past this
DEFAULT_MAX_BODY: Final = 1024 * 1024  # nsqlookupd allocates whatever size is sent

_SIZE = struct.Struct(">i")
# Go's unicode.IsSpace (strings.TrimSpace): ASCII white space, NEL, NBSP and the Z categories
_GO_SPACE: Final = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000"
)
_ATOI = re.compile(r"[+-]?[0-9]+")


class LookupV1Error(Exception):
    """A fatal protocol error; ``str(exc)`` is the exact reply text (``E_CODE description``)."""

    def __init__(self, code: str, description: str = "") -> None:
        self.code = code
        self.description = description
        super().__init__(f"{code} {description}" if description else code)

    @property
    def reply(self) -> bytes:
        """The error as a size-prefixed reply."""
        return encode_response(str(self).encode("utf-8", "surrogateescape"))


class NeedData(Enum):
    """More bytes are needed before the next event."""

    NEED_DATA = auto()


NEED_DATA: Final = NeedData.NEED_DATA


@dataclass(frozen=True, slots=True)
class PeerIdentity:
    """What an nsqd says about itself in IDENTIFY (youzan's ``distributed_id`` included)."""

    broadcast_address: str
    tcp_port: int
    http_port: int
    version: str
    hostname: str = ""
    distributed_id: str = ""
    extensions: tuple[str, ...] = ()
    rack: str = ""  # pnsq: the failure domain the peer says it is in ("" if it says none)

    @property
    def node_id(self) -> str:
        """``broadcast_address:tcp_port``: how pnsq's placement names an nsqd."""
        return f"{self.broadcast_address}:{self.tcp_port}"


@dataclass(frozen=True, slots=True)
class Ping:
    """``PING``: refreshes the peer's last update."""


@dataclass(frozen=True, slots=True)
class Identify:
    """``IDENTIFY`` with its decoded body."""

    peer: PeerIdentity


@dataclass(frozen=True, slots=True)
class Register:
    """``REGISTER``: ``partition`` is None for a stock (unpartitioned) peer."""

    topic: str
    channel: str | None = None
    partition: int | None = None


@dataclass(frozen=True, slots=True)
class Unregister:
    """``UNREGISTER``: without a channel it removes the topic (and its channels) for the peer."""

    topic: str
    channel: str | None = None
    partition: int | None = None


@dataclass(frozen=True, slots=True)
class Closed:
    """The peer closed the connection (EOF, possibly in the middle of a line)."""


LookupCommand = Ping | Identify | Register | Unregister
Event = LookupCommand | Closed


class _State(Enum):
    MAGIC = auto()
    LINE = auto()
    BODY_SIZE = auto()
    BODY = auto()
    CLOSED = auto()


class LookupV1Parser:
    """The server side of one V1 connection (see the module docstring)."""

    def __init__(
        self, *, max_line: int = DEFAULT_MAX_LINE, max_body: int = DEFAULT_MAX_BODY
    ) -> None:
        self._buf = bytearray()
        self._eof = False
        self._state = _State.MAGIC
        self._body_size = 0
        self.max_line = max_line
        self.max_body = max_body
        #: an IDENTIFY was decoded (a rejected one closes the connection anyway)
        self.identified = False
        #: REGISTER/UNREGISTER carry a partition (set by the server when it grants the extension)
        self.partitioned = False

    def receive_data(self, data: bytes | bytearray) -> None:
        """Buffer ``data``; ``b""`` means the peer closed its side."""
        if data:
            self._buf += data
        else:
            self._eof = True

    def next_event(self) -> Event | NeedData:
        """The next command, :class:`Closed`, or :data:`NEED_DATA`. Raises
        :class:`LookupV1Error`: send its :attr:`~LookupV1Error.reply`, then close."""
        if self._state is _State.CLOSED:
            return Closed()
        try:
            event = self._next()
        except LookupV1Error:
            self._state = _State.CLOSED
            raise
        if isinstance(event, Closed):
            self._state = _State.CLOSED
        return event

    def _next(self) -> Event | NeedData:
        if self._state is _State.MAGIC:
            if len(self._buf) < len(MAGIC_V1):
                return Closed() if self._eof else NEED_DATA
            magic = bytes(self._buf[:4])
            del self._buf[:4]
            if magic != MAGIC_V1:
                raise LookupV1Error("E_BAD_PROTOCOL")
            self._state = _State.LINE
        if self._state is _State.LINE:
            end = self._buf.find(b"\n")
            if end < 0:
                if len(self._buf) > self.max_line:
                    raise LookupV1Error("E_INVALID", "line too long")
                return Closed() if self._eof else NEED_DATA
            line = bytes(self._buf[:end]).decode("utf-8", "surrogateescape")
            del self._buf[: end + 1]
            return self._command(line.strip(_GO_SPACE).split(" "))
        return self._identify_body()

    def _command(self, params: list[str]) -> Event | NeedData:
        name, args = params[0], params[1:]
        if name == "PING":
            return Ping()
        if name == "IDENTIFY":
            if self.identified:
                raise LookupV1Error("E_INVALID", "cannot IDENTIFY again")
            self._state = _State.BODY_SIZE
            return self._identify_body()
        if name in ("REGISTER", "UNREGISTER"):
            if not self.identified:
                raise LookupV1Error("E_INVALID", "client must IDENTIFY")
            topic, channel, partition = _registration(name, args, self.partitioned)
            if name == "REGISTER":
                return Register(topic, channel, partition)
            return Unregister(topic, channel, partition)
        raise LookupV1Error("E_INVALID", f"invalid command {name}")

    def _identify_body(self) -> Event | NeedData:
        if self._state is _State.BODY_SIZE:
            if len(self._buf) < _SIZE.size:
                if self._eof:
                    raise LookupV1Error("E_BAD_BODY", "IDENTIFY failed to read body size")
                return NEED_DATA
            (self._body_size,) = _SIZE.unpack_from(self._buf)
            del self._buf[: _SIZE.size]
            if not 0 <= self._body_size <= self.max_body:  # nsqlookupd: a panic or a huge alloc
                raise LookupV1Error("E_BAD_BODY", "IDENTIFY failed to read body")
            self._state = _State.BODY
        if len(self._buf) < self._body_size:
            if self._eof:
                raise LookupV1Error("E_BAD_BODY", "IDENTIFY failed to read body")
            return NEED_DATA
        body = bytes(self._buf[: self._body_size])
        del self._buf[: self._body_size]
        self._state = _State.LINE
        peer = decode_identify(body)
        self.identified = True
        return Identify(peer)


def _registration(
    command: str, params: list[str], partitioned: bool
) -> tuple[str, str | None, int | None]:
    """nsqlookupd's ``getTopicChan`` (and youzan's, with the partition after the topic)."""
    need = 2 if partitioned else 1
    if len(params) < need:
        raise LookupV1Error("E_INVALID", f"{command} insufficient number of params")
    topic = params[0]
    at = 2 if partitioned else 1
    channel = params[at] if len(params) > at else ""
    if not is_valid_topic_name(topic):
        raise LookupV1Error("E_BAD_TOPIC", f"{command} topic name '{topic}' is not valid")
    if channel and not is_valid_channel_name(channel):
        raise LookupV1Error("E_BAD_CHANNEL", f"{command} channel name '{channel}' is not valid")
    partition = None
    if partitioned:
        raw = params[1]
        if not _ATOI.fullmatch(raw) or not 0 <= int(raw) <= MAX_PARTITION_ID:
            raise LookupV1Error("E_BAD_PARTITIONID", f"{command} partition id '{raw}' is not valid")
        partition = int(raw)
    return topic, channel or None, partition


# ---------------------------------------------------------------- IDENTIFY body

_STRING_FIELDS = ("remote_address", "hostname", "broadcast_address", "version", "distributed_id")
_INT_FIELDS = ("tcp_port", "http_port")
_INT64 = 1 << 63


def _reject_constant(name: str) -> object:
    raise ValueError(name)  # NaN, Infinity: not JSON to Go


def decode_identify(body: bytes) -> PeerIdentity:
    """Decode an IDENTIFY body as nsqlookupd's ``json.Unmarshal`` into its ``PeerInfo`` does:
    keys match case-insensitively, unknown keys are ignored, ``null`` leaves a field alone, a
    value of the wrong type is an error; then the four required fields are checked."""
    bad_json = LookupV1Error("E_BAD_BODY", "IDENTIFY failed to decode JSON body")
    try:
        text = body.decode("utf-8", "replace")  # Go replaces invalid UTF-8 with U+FFFD
        document = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):  # too deep nesting: a decode error too
        raise bad_json from None
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise bad_json
    fields: dict[str, object] = {}
    extensions: tuple[str, ...] = ()
    rack = ""
    for key, value in document.items():
        if key == EXTENSIONS_KEY:
            if isinstance(value, list):
                extensions = tuple(str(item) for item in value if isinstance(item, str))
            continue
        if key == RACK_KEY:
            rack = value if isinstance(value, str) else ""
            continue
        name = _field_name(key)
        if name is None or value is None:
            continue
        if name in _INT_FIELDS:
            if isinstance(value, bool) or not isinstance(value, int):
                raise bad_json
            if not -_INT64 <= value < _INT64:
                raise bad_json
        elif not isinstance(value, str):
            raise bad_json
        fields[name] = value
    broadcast = str(fields.get("broadcast_address", ""))
    tcp_port = int(str(fields.get("tcp_port", 0)))
    http_port = int(str(fields.get("http_port", 0)))
    version = str(fields.get("version", ""))
    if not broadcast or not tcp_port or not http_port or not version:
        raise LookupV1Error("E_BAD_BODY", "IDENTIFY missing fields")
    return PeerIdentity(
        broadcast_address=broadcast,
        tcp_port=tcp_port,
        http_port=http_port,
        version=version,
        hostname=str(fields.get("hostname", "")),
        distributed_id=str(fields.get("distributed_id", "")),
        extensions=extensions,
        rack=rack,
    )


def _field_name(key: str) -> str | None:
    if key in _STRING_FIELDS or key in _INT_FIELDS:
        return key
    folded = key.lower()
    for name in (*_STRING_FIELDS, *_INT_FIELDS):
        if name == folded:
            return name
    return None


def identify_reply(
    *,
    broadcast_address: str,
    hostname: str,
    http_port: int,
    tcp_port: int,
    version: str,
    extensions: tuple[str, ...] = (),
) -> bytes:
    """nsqlookupd's IDENTIFY reply (a Go map: keys sorted), plus the granted extensions."""
    reply: dict[str, object] = {
        "broadcast_address": broadcast_address,
        "hostname": hostname,
        "http_port": http_port,
        "tcp_port": tcp_port,
        "version": version,
    }
    if extensions:
        reply[EXTENSIONS_KEY] = list(extensions)
    return json.dumps(reply, sort_keys=True, separators=(",", ":")).encode()


# ---------------------------------------------------------------- client side and replies


def encode_response(data: bytes) -> bytes:
    """A V1 reply: ``[i32 BE size][data]``."""
    return _SIZE.pack(len(data)) + data


def encode_identify(fields: dict[str, object]) -> bytes:
    """``IDENTIFY\\n[i32 size][JSON]`` (the client side, as nsqd sends it)."""
    body = json.dumps(fields, separators=(",", ":")).encode()
    return b"IDENTIFY\n" + _SIZE.pack(len(body)) + body


def encode_command(name: str, *params: str | int | None) -> bytes:
    """A command line: ``encode_command("REGISTER", "t", 0, "c")`` → ``b"REGISTER t 0 c\\n"``;
    None parameters are left out."""
    words = [name, *(str(p) for p in params if p is not None)]
    return " ".join(words).encode() + b"\n"


class ResponseReader:
    """Splits the size-prefixed replies a lookupd sends (the client side)."""

    def __init__(self, max_size: int = DEFAULT_MAX_BODY) -> None:
        self._buf = bytearray()
        self.max_size = max_size

    def receive_data(self, data: bytes | bytearray) -> None:
        """Buffer ``data``."""
        self._buf += data

    def next_response(self) -> bytes | None:
        """The next complete reply, or None. Raises ValueError for a size out of range."""
        if len(self._buf) < _SIZE.size:
            return None
        (size,) = _SIZE.unpack_from(self._buf)
        if not 0 <= size <= self.max_size:
            raise ValueError(f"response body size ({size}) is out of range")
        if len(self._buf) < _SIZE.size + size:
            return None
        data = bytes(self._buf[_SIZE.size : _SIZE.size + size])
        del self._buf[: _SIZE.size + size]
        return data
