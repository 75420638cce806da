"""The replication protocol ``"  R1"``, sans-IO: its frames and their layouts.

Frames go between a partition's leader and a follower; :mod:`protocol.replication_encoder`
encodes them, :mod:`protocol.replication_decoder` decodes them.

A follower dials its partition's leader on the nsqd TCP port, sends :data:`MAGIC` (the server
routes on it), then :class:`Hello`. The leader answers :class:`Welcome` (where to truncate) and
streams :class:`Append` batches, :class:`HighWatermark` heartbeats and channel
:class:`Cursors`; the follower answers each applied batch with :class:`Ack` and each applied
Cursors with :class:`CursorsAck`, or with :class:`Refuse` when it already follows a newer
epoch (the fence). :class:`Error` from the
leader ends the connection. A leader whose own copy of records the follower holds is damaged
asks for them (:class:`RepairRequest`); the follower answers with its copy
(:class:`RepairRecords`, empty when it cannot read them either).

A follower that understands the topic's administrative state (paused flags, channels and
their flags) says so with a Hello carrying :data:`FEATURE_ADMIN` (type ``HELLO_EX``); only
then does the leader send :class:`Admin` frames, each answered with :class:`AdminAck`. A
leader from before ``HELLO_EX`` answers it with ``Error E_BAD_FRAME``: the follower then
dials again with a plain Hello, so either side may be upgraded first. Each later feature bit
is given up the same way, newest first (:data:`FEATURES_NEWEST_FIRST`).

A Hello with :data:`FEATURE_TOPIC_ID` ends with a third string: the id of the life of the topic
the follower's copy belongs to (lookupd gives each creation of a name a new one; empty: not
known). A leader whose topic has another id answers ``Error E_OTHER_LIFE``: the copy holds a
deleted topic's messages and must not be followed as the new one's (its node deletes it when it
applies lookupd's assignments, then follows from nothing).

Every frame, both directions, big-endian::

    Frame  => Size u32 | Type u8 | Body        Size = 1 + len(Body), 1 <= Size <= MAX_FRAME_SIZE
    String => Length u16 | UTF-8 [Length]

Bodies start with their fixed fields (one ``struct.Struct`` each, below) and end with their
strings, then their variable part; a body must be consumed exactly. Type values have the high bit
set on leader frames, so a frame sent the wrong way is told apart from garbage. :class:`Append`
carries stored records verbatim (the codec never parses them): the encoder's
``encode_append_header`` lets the sender write the record bytes after the header without copying
them, and the decoder copies them once, out of its receive buffer.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Final

from .errors import ProtocolError

MAGIC: Final = b"  R1"
#: Largest ``Size`` field either side sends or accepts: 64 MiB. A leader sizes its Append
#: batches under :data:`MAX_APPEND_RECORDS_SIZE`; a single record larger than that cannot
#: replicate (nsqd's --max-msg-size defaults to 1 MiB).
MAX_FRAME_SIZE: Final = 64 * 1024 * 1024
MAX_STRING_SIZE: Final = 0xFFFF  # bytes of UTF-8 in one string

FRAME_HEADER: Final = struct.Struct(
    ">I"  # size: bytes after this field (the type byte and the body)
    "B"  # type: FrameType
)
STRING_LENGTH: Final = struct.Struct(
    ">H"  # length: bytes of UTF-8 that follow
)
HELLO: Final = struct.Struct(
    ">H"  # partition: the partition the follower replicates
    "I"  # epoch: the leader epoch the follower follows
    "Q"  # log_end: the follower's log end offset (next offset it would write)
    "I"  # last_epoch: epoch of the follower's last record (0: empty log)
)  # then String node, String topic
HELLO_EX: Final = struct.Struct(
    ">H"  # partition: the partition the follower replicates
    "I"  # epoch: the leader epoch the follower follows
    "Q"  # log_end: the follower's log end offset (next offset it would write)
    "I"  # last_epoch: epoch of the follower's last record (0: empty log)
    "I"  # features: FEATURE_* bits the follower understands (no other bit)
)  # then String node, String topic, and with FEATURE_TOPIC_ID String topic_id
ACK: Final = struct.Struct(
    ">I"  # epoch: the leader epoch the follower follows
    "Q"  # log_end: the follower holds every record before this offset
)
REFUSE: Final = struct.Struct(
    ">I"  # epoch: the newer leader epoch the follower follows
)  # then String reason
CURSORS_ACK: Final = struct.Struct(
    ">I"  # epoch: the leader epoch the follower follows
    "Q"  # confirmed: the channel's confirmed offset the follower now holds
)  # then String channel
ADMIN_ACK: Final = struct.Struct(
    ">I"  # epoch: the leader epoch the follower follows
    "Q"  # version: the Admin version the follower now holds
)
WELCOME: Final = struct.Struct(
    ">I"  # epoch: the leader's epoch
    "Q"  # truncate_to: the follower cuts its log to end here, then expects Appends from it
    "Q"  # high_watermark: the leader's high-watermark
)
APPEND: Final = struct.Struct(
    ">I"  # epoch: the leader's epoch
    "Q"  # base_offset: offset of the first record carried
    "Q"  # high_watermark: the leader's high-watermark
    "I"  # count: number of records carried (0 if and only if no record bytes)
)  # then the records: stored record bytes, verbatim, to the end of the frame
HIGH_WATERMARK: Final = struct.Struct(
    ">I"  # epoch: the leader's epoch
    "Q"  # high_watermark: the leader's high-watermark
)
CURSORS: Final = struct.Struct(
    ">I"  # epoch: the leader's epoch
    "Q"  # confirmed: the channel's confirmed offset
    "B"  # deleted: 1 if the channel was deleted, else 0 (no other value)
    "I"  # deferred count: number of DEFERRED pairs after the channel string
)  # then String channel, DEFERRED * deferred count
REPAIR_REQUEST: Final = struct.Struct(
    ">I"  # epoch: the leader's epoch
    "Q"  # first: offset of the first record the leader's copy lost to damage
    "I"  # count: number of records wanted from ``first`` on
)
REPAIR_RECORDS: Final = struct.Struct(
    ">I"  # epoch: the leader epoch the follower follows
    "Q"  # base_offset: ``first`` of the RepairRequest answered
    "I"  # count: records carried (0 if and only if no record bytes: this copy lacks them)
)  # then the records: stored record bytes, verbatim, to the end of the frame
DEFERRED: Final = struct.Struct(
    ">Q"  # offset: a deferred message's offset
    "q"  # deliver_at_ns: when it becomes deliverable, ns since the Unix epoch
)
ADMIN: Final = struct.Struct(
    ">I"  # epoch: the leader's epoch
    "Q"  # version: the leader's count of administrative changes to the topic
    "B"  # topic flags: ADMIN_PAUSED or 0
    "H"  # channel count: number of ADMIN_CHANNEL entries that follow
)  # then, per channel, ADMIN_CHANNEL then String channel
ADMIN_CHANNEL: Final = struct.Struct(
    ">B"  # flags: ADMIN_* bits of the channel (no other bit)
)  # Error: String code, String text (no fixed fields)

FEATURE_ADMIN: Final = 0x1  # the follower takes Admin frames (and answers AdminAck)
FEATURE_REPAIR: Final = 0x2  # the follower answers RepairRequest (with RepairRecords)
#: the follower counts a leader's silence per leader node, not per stream: one heartbeat to its
#: node, on any of the streams, keeps them all
FEATURE_NODE_BEAT: Final = 0x4
#: the follower takes the Cursors frames of ``#ephemeral`` channels as marks, not channels: where
#: each one is, so that its consumer, back on a new leader, goes on from there
FEATURE_EPHEMERAL: Final = 0x8
#: the Hello carries the topic id of the follower's copy; the leader refuses another life's copy
FEATURE_TOPIC_ID: Final = 0x10
#: every feature bit this codec knows
FEATURES: Final = (
    FEATURE_ADMIN | FEATURE_REPAIR | FEATURE_NODE_BEAT | FEATURE_EPHEMERAL | FEATURE_TOPIC_ID
)
#: the bits a follower gives up, newest first, for a leader that refuses its Hello's bits
#: (a release before them); after them, none at all (a leader from before ``HELLO_EX``)
FEATURES_NEWEST_FIRST: Final = (FEATURE_TOPIC_ID, FEATURE_EPHEMERAL, FEATURE_NODE_BEAT)
ADMIN_PAUSED: Final = 0x1  # topic or channel paused
ADMIN_ORDERED: Final = 0x2  # channel ordered (SUB_ORDERED, /channel/setorder)
ADMIN_SKIPPED: Final = 0x4  # channel skipped (youzan /channel/skip)
ADMIN_SKIP_ZAN_TEST: Final = 0x8  # channel skips zan_test messages (/channel/skipZanTest)
ADMIN_CHANNEL_FLAGS: Final = ADMIN_PAUSED | ADMIN_ORDERED | ADMIN_SKIPPED | ADMIN_SKIP_ZAN_TEST

MAX_APPEND_RECORDS_SIZE: Final = MAX_FRAME_SIZE - 1 - APPEND.size


class FrameType(IntEnum):
    """The ``type`` byte: 0x0_ follower → leader, 0x8_ leader → follower."""

    HELLO = 0x01
    ACK = 0x02
    REFUSE = 0x03
    CURSORS_ACK = 0x04
    ADMIN_ACK = 0x05
    HELLO_EX = 0x06
    REPAIR_RECORDS = 0x08
    WELCOME = 0x81
    APPEND = 0x82
    HIGH_WATERMARK = 0x83
    CURSORS = 0x84
    ERROR = 0x85
    ADMIN = 0x86
    REPAIR_REQUEST = 0x88


class ReplicationErrorCode(StrEnum):
    """Codes a leader sends in :class:`Error` (the decoder accepts any code string)."""

    NOT_LEADER = "E_NOT_LEADER"  # this node does not lead the partition (any more)
    STALE_EPOCH = "E_STALE_EPOCH"  # the Hello names an epoch older than the leader's
    UNKNOWN_PARTITION = "E_UNKNOWN_PARTITION"  # no such topic partition here
    BAD_FRAME = "E_BAD_FRAME"  # the follower's frames broke this protocol
    NOT_REPLICA = "E_NOT_REPLICA"  # the authenticated follower is not placed on the partition
    OTHER_LIFE = "E_OTHER_LIFE"  # the follower's copy is of another life of the topic (its id)


class ReplicationProtocolError(ProtocolError):
    """The peer's bytes are not valid ``"  R1"`` framing; the text names the problem."""


@dataclass(frozen=True, slots=True)
class Hello:
    """Follower → leader, first frame: who I am and where my log ends."""

    node: str
    topic: str
    partition: int
    epoch: int
    log_end: int
    last_epoch: int
    features: int = 0  # FEATURE_* bits; non-zero is sent as HELLO_EX
    #: the topic id of the follower's copy ("": not known); sent only with FEATURE_TOPIC_ID
    topic_id: str = ""


@dataclass(frozen=True, slots=True)
class Ack:
    """Follower → leader, after each applied Append: I hold everything before ``log_end``."""

    epoch: int
    log_end: int


@dataclass(frozen=True, slots=True)
class CursorsAck:
    """Follower → leader, after each applied Cursors: I hold ``channel`` up to ``confirmed``
    (an ordered channel's next message waits for it)."""

    epoch: int
    channel: str
    confirmed: int


@dataclass(frozen=True, slots=True)
class Refuse:
    """Follower → leader: I follow ``epoch``, newer than yours; you are deposed."""

    epoch: int
    reason: str


@dataclass(frozen=True, slots=True)
class Welcome:
    """Leader → follower, answer to Hello: truncate to ``truncate_to``, Appends follow from it."""

    epoch: int
    truncate_to: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class Append:
    """Leader → follower: ``count`` stored records from ``base_offset``, bytes as in the log."""

    epoch: int
    base_offset: int
    high_watermark: int
    count: int
    records: bytes


@dataclass(frozen=True, slots=True)
class HighWatermark:
    """Leader → follower: heartbeat, or a high-watermark advance without data."""

    epoch: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class Cursors:
    """Leader → follower: a channel's state in the partition, for the follower to take over.

    ``confirmed``: every offset below it is finished. ``deferred`` holds ``(offset,
    deliver_at_ns)`` pairs for the offsets above it: ``deliver_at_ns`` 0 marks an offset
    already finished (FIN out of order), a time marks a message held back until then (REQ
    with a delay, DPUB). ``deleted``: the channel is gone.
    """

    epoch: int
    channel: str
    confirmed: int
    deferred: tuple[tuple[int, int], ...] = ()
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class ChannelAdmin:
    """One channel's administrative flags in an :class:`Admin` frame."""

    name: str
    paused: bool = False
    ordered: bool = False
    skipped: bool = False
    skip_zan_test: bool = False


@dataclass(frozen=True, slots=True)
class Admin:
    """Leader → follower: the topic's administrative state, whole: its paused flag and every
    durable channel with its flags. The follower creates the channels it lacks and takes the
    flags (channels are deleted by :class:`Cursors`). ``version`` counts the leader's
    administrative changes; the follower acknowledges it with :class:`AdminAck`."""

    epoch: int
    version: int
    paused: bool
    channels: tuple[ChannelAdmin, ...] = ()


@dataclass(frozen=True, slots=True)
class AdminAck:
    """Follower → leader, after each applied (and saved) Admin: I hold ``version``."""

    epoch: int
    version: int


@dataclass(frozen=True, slots=True)
class Error:
    """Leader → follower: ``code`` (see :class:`ReplicationErrorCode`) and text; then close."""

    code: str
    text: str


@dataclass(frozen=True, slots=True)
class RepairRequest:
    """Leader → follower: send your copy of records ``[first, first + count)``; the leader's
    is damaged."""

    epoch: int
    first: int
    count: int


@dataclass(frozen=True, slots=True)
class RepairRecords:
    """Follower → leader, answer to a RepairRequest: ``count`` stored records from
    ``base_offset`` (none: this copy lacks them or is damaged too)."""

    epoch: int
    base_offset: int
    count: int
    records: bytes


FollowerFrame = Hello | Ack | Refuse | CursorsAck | AdminAck | RepairRecords
LeaderFrame = Welcome | Append | HighWatermark | Cursors | Error | Admin | RepairRequest
Frame = FollowerFrame | LeaderFrame
