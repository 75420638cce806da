"""Message frames for a subscribed connection: the stock layout, and youzan's optional blocks.

``[size][2][timestamp][attempts][16-byte id]`` then, youzan (reference §2.2):

* the ext block ``[u8 version][u16 len][json]`` (version 0 alone: no header) for clients that
  IDENTIFYed ``extend_support`` on an ext topic;
* the detail block ``[u64 log offset][u32 raw size]`` for SUB_ORDERED / SUB_ADVANCED;

then the body. A plain SUB gets exactly the stock layout through :func:`write_plain`, the hot
path: one pack (header and id) and two in-place extends of the output queue per message; a run
read from disk comes with its frames written, which become the queue when it is empty.
"""

from __future__ import annotations

import random

from protocol.frames import FrameType
from protocol.message import (
    MESSAGE_DETAIL,
    MESSAGE_FRAME_FIXED,
    MESSAGE_FRAME_PREFIX,
    MESSAGE_ID,
    RecordLike,
    encode_ext_block,
    message_frame_header,
    partition_of,
)

from ..broker import Channel, FrameLayout, ext_header
from ..core.inflight import Deliveries
from .output import OutputBuffer

#: a stock message frame, first attempt, for the log's frame reads (:func:`write_plain`)
PLAIN_FRAME = FrameLayout(MESSAGE_FRAME_PREFIX.pack, MESSAGE_FRAME_FIXED, int(FrameType.MESSAGE))


def raw_size(record: RecordLike, ext: bytes = b"") -> int:
    """youzan's "raw size" of a stored message, as the detail block and the traced reply give
    it: the body (and ext header) with a 4-byte length prefix."""
    return len(record.body) + len(ext) + 4


def write_plain(output: OutputBuffer, taken: Deliveries) -> None:
    """Stock message frames: the records', then the runs the log read as frames in
    :data:`PLAIN_FRAME` (their frames are dropped once queued)."""
    queue = output.queue
    pack = MESSAGE_FRAME_PREFIX.pack
    frame_type = int(FrameType.MESSAGE)
    for record, attempts in zip(taken.records, taken.attempts, strict=True):
        body = record.body
        queue += pack(
            MESSAGE_FRAME_FIXED + len(body),
            frame_type,
            record.timestamp_ns,
            attempts,
            record.internal_id,
            record.trace_id,
        )
        queue += body
    for run in taken.framed:
        output.append_owned(run.frames)  # the queue itself when empty: no copy
        run.frames = bytearray()


def _every(taken: Deliveries) -> zip[tuple[RecordLike, int]]:
    """Each record with its attempts, the framed runs' too (decoded: not the hot path)."""
    records = [*taken.records, *(record for run in taken.framed for record in run)]
    attempts = [*taken.attempts, *(1 for run in taken.framed for _ in range(len(run)))]
    return zip(records, attempts, strict=True)


def write_extended(output: OutputBuffer, taken: Deliveries, *, ext: bool, detail: bool) -> None:
    """Frames with the ext block (``ext``) and/or the detail block (``detail``)."""
    append = output.append
    for record, attempts in _every(taken):
        stored_ext = ext_header(record.ext)  # youzan's header, without a producer stamp
        extra = encode_ext_block(stored_ext) if ext else b""
        if detail:
            extra += MESSAGE_DETAIL.pack(record.offset, raw_size(record, stored_ext))
        body = record.body
        append(message_frame_header(record.timestamp_ns, attempts, len(extra) + len(body)))
        append(MESSAGE_ID.pack(record.internal_id, record.trace_id))
        append(extra)
        append(body)


def sample(channel: Channel, taken: Deliveries, sample_rate: int, owner: object) -> Deliveries:
    """IDENTIFY sample_rate: like nsqd, a message this client skips is taken from the channel
    and dropped (never sent, never requeued)."""
    kept = Deliveries()
    for record, attempts in _every(taken):
        if random.randrange(100) > sample_rate:  # noqa: S311 - sampling, not security
            partition = partition_of(record.internal_id)
            channel.cursor_for(partition).finish(record.offset, owner)
            channel.topic.partition(partition).dirty = True
        else:
            kept.records.append(record)
            kept.attempts.append(attempts)
    return kept
