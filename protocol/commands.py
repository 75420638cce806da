"""Client commands of protocol V2, as the parser emits them.

Every command is a frozen, slotted value (the per-message ones, :class:`Pub` and :class:`Fin`,
frozen to the type checker only: :func:`_per_message`); :data:`Command` is the closed union a
server matches on.
Partitioned forms (youzan) carry ``partition``: ``None`` when the client did not name one.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from enum import Enum
from typing import Final, TypeVar, dataclass_transform

_C = TypeVar("_C")


@dataclass_transform(frozen_default=True)
def _per_message(cls: type[_C]) -> type[_C]:
    """A slotted dataclass, equal and hashable by value, that mypy --strict treats as frozen,
    without a frozen dataclass's run-time guard: that one's ``__init__`` sets each field
    through ``object.__setattr__``, and the parser makes one of these per message (a
    ``Pub`` of four fields took a quarter of a single PUB's parsing)."""
    return dataclass(slots=True, unsafe_hash=True)(cls)


class SubMode(Enum):
    """How a subscription wants its messages."""

    PLAIN = "SUB"
    ORDERED = "SUB_ORDERED"  # also reached through the documented name SUB_ORDER
    ADVANCED = "SUB_ADVANCED"


@dataclass(frozen=True, slots=True)
class Identify:
    """``IDENTIFY`` + JSON body (validated by :func:`protocol.identify.parse_identify`)."""

    body: bytes


@dataclass(frozen=True, slots=True)
class Auth:
    """``AUTH`` + secret."""

    secret: bytes


@dataclass(frozen=True, slots=True)
class Sub:
    """``SUB``/``SUB_ORDERED``/``SUB_ADVANCED`` ``<topic> <channel> [<partition> [<start>]]``."""

    topic: str
    channel: str
    partition: int | None = None
    mode: SubMode = SubMode.PLAIN
    consume_start: str | None = (
        None  # SUB_ADVANCED: timestamp:<s>|msgcount:<n>|virtual_queue:<o>|special:-1
    )


@_per_message
class Pub:
    """``PUB <topic> [<partition> [<sequence>]]`` + body."""

    topic: str
    body: bytes
    partition: int | None = None
    #: pnsq: the number of its (first) message, from a producer that named itself in
    #: IDENTIFY (``pnsq_producer``): a retry of stored numbers is acknowledged, not stored again
    sequence: int | None = None


@dataclass(frozen=True, slots=True)
class Mpub:
    """``MPUB <topic> [<partition> [<sequence>]]`` + ``[n]([len][body])*``; atomic."""

    topic: str
    bodies: list[bytes]
    partition: int | None = None
    #: pnsq: the number of its (first) message, from a producer that named itself in
    #: IDENTIFY (``pnsq_producer``): a retry of stored numbers is acknowledged, not stored again
    sequence: int | None = None


@dataclass(frozen=True, slots=True)
class Dpub:
    """``DPUB <topic> <defer ms> [<partition> [<sequence>]]`` + body (pnsq: the partition and
    number; stock nsqd has neither)."""

    topic: str
    defer_ms: int
    body: bytes
    partition: int | None = None
    #: pnsq: the number of its (first) message, from a producer that named itself in
    #: IDENTIFY (``pnsq_producer``): a retry of stored numbers is acknowledged, not stored again
    sequence: int | None = None


@dataclass(frozen=True, slots=True)
class PubTrace:
    """``PUB_TRACE <topic> [<partition> [<sequence>]]`` + ``[u64 trace id][body]``."""

    topic: str
    trace_id: int
    body: bytes
    partition: int | None = None
    #: pnsq: the number of its (first) message, from a producer that named itself in
    #: IDENTIFY (``pnsq_producer``): a retry of stored numbers is acknowledged, not stored again
    sequence: int | None = None


@dataclass(frozen=True, slots=True)
class MpubTrace:
    """``MPUB_TRACE <topic> [<partition> [<sequence>]]``: like MPUB, each element
    ``[u64 trace id][body]``."""

    topic: str
    messages: list[tuple[int, bytes]]
    partition: int | None = None
    #: pnsq: the number of its (first) message, from a producer that named itself in
    #: IDENTIFY (``pnsq_producer``): a retry of stored numbers is acknowledged, not stored again
    sequence: int | None = None


@dataclass(frozen=True, slots=True)
class PubExt:
    """``PUB_EXT <topic> [<partition> [<sequence>]]`` + ``[u16 json len][json header][body]``."""

    topic: str
    header: bytes
    body: bytes
    partition: int | None = None
    #: pnsq: the number of its (first) message, from a producer that named itself in
    #: IDENTIFY (``pnsq_producer``): a retry of stored numbers is acknowledged, not stored again
    sequence: int | None = None


@dataclass(frozen=True, slots=True)
class MpubExt:
    """``MPUB_EXT <topic> [<partition> [<sequence>]]``: like MPUB, each element
    ``[u16 len][json][body]``."""

    topic: str
    messages: list[tuple[bytes, bytes]]
    partition: int | None = None
    #: pnsq: the number of its (first) message, from a producer that named itself in
    #: IDENTIFY (``pnsq_producer``): a retry of stored numbers is acknowledged, not stored again
    sequence: int | None = None


@dataclass(frozen=True, slots=True)
class Rdy:
    """``RDY <count>``: at most ``count`` messages in flight on this connection."""

    count: int


@_per_message
class Fin:
    """``FIN <16-byte id>``."""

    message_id: bytes


#: One well-formed ``FIN`` as consumers send it: 21 bytes read at fixed offsets.
FIN_COMMAND: Final = struct.Struct(
    ">4s"  # b"FIN "
    "Q"  # the message id's first 8 bytes: the internal id (protocol.message.MESSAGE_ID)
    "8s"  # the message id's last 8 bytes: the trace id
    "c"  # b"\n"
)
#: The same 21 bytes read for the internal id alone (the rest checked by the parser): one int
#: per FIN, no bytes object made for the other fields.
FIN_INTERNAL_ID: Final = struct.Struct(
    ">4x"  # b"FIN "
    "Q"  # the internal id
    "8x"  # the trace id
    "x"  # b"\n"
)


_IDS_PER_CALL = 1024  # FIN ids read per C call (a layout of that many is ~100 KB)


@functools.lru_cache(maxsize=64)
def _fin_ids_layout(count: int) -> struct.Struct:
    """:data:`FIN_INTERNAL_ID` ``count`` times over: up to :data:`_IDS_PER_CALL` of a run's
    ids in one C call."""
    return struct.Struct(">" + FIN_INTERNAL_ID.format.lstrip(">") * count)


@dataclass(frozen=True, slots=True)
class FinRun:
    """Consecutive well-formed ``FIN <16-byte id>\n`` commands, kept as the bytes that came in
    (``len(data)`` is a multiple of :data:`FIN_COMMAND`'s size): a consumer's FINs in one event.
    The ids are read from it in one C-level pass (:meth:`internal_ids`)."""

    data: bytes

    def __len__(self) -> int:
        return len(self.data) // FIN_COMMAND.size

    def internal_ids(self) -> list[int]:
        """Each FIN's internal id (the id's first 8 bytes, big-endian), in order."""
        data, count = self.data, len(self)
        full, rest = divmod(count, _IDS_PER_CALL)
        ids: list[int] = []
        step = _IDS_PER_CALL * FIN_COMMAND.size
        layout = _fin_ids_layout(_IDS_PER_CALL)
        for position in range(0, full * step, step):
            ids.extend(layout.unpack_from(data, position))
        if rest:
            ids.extend(_fin_ids_layout(rest).unpack_from(data, full * step))
        return ids

    def message_id(self, index: int) -> bytes:
        """The 16 id bytes of FIN number ``index``."""
        start = index * FIN_COMMAND.size + 4
        return self.data[start : start + 16]

    def message_ids(self) -> list[bytes]:
        """The 16 id bytes of every FIN, in order."""
        return [self.message_id(i) for i in range(len(self))]


@dataclass(frozen=True, slots=True)
class Req:
    """``REQ <16-byte id> <timeout ms>``; the timeout is not yet clamped."""

    message_id: bytes
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class Touch:
    """``TOUCH <16-byte id>``."""

    message_id: bytes


@dataclass(frozen=True, slots=True)
class Cls:
    """``CLS``: the client is about to close; answer ``CLOSE_WAIT``."""


@dataclass(frozen=True, slots=True)
class Nop:
    """``NOP``: no reply; counts as activity."""


@dataclass(frozen=True, slots=True)
class InternalCreateTopic:
    """youzan's ``INTERNAL_CREATE_TOPIC <topic> <partition> [<ext bool>]``: create that
    partition of the topic (an ext topic when ``ext``); accepted in any state. ``ext`` is None
    when the client did not say."""

    topic: str
    partition: int
    ext: bool | None = None


Command = (
    Identify
    | Auth
    | Sub
    | Pub
    | Mpub
    | Dpub
    | PubTrace
    | MpubTrace
    | PubExt
    | MpubExt
    | Rdy
    | Fin
    | Req
    | Touch
    | Cls
    | Nop
    | InternalCreateTopic
)

PublishCommand = Pub | Mpub | Dpub | PubTrace | MpubTrace | PubExt | MpubExt
