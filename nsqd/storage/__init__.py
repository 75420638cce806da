"""Blocking, synchronous file storage: partition logs (segments, sparse index, recovery) and
atomic checkpoint files.

May use the stdlib, ``crc32c``, ``sortedcontainers`` and the message-id layout of
``protocol.message`` (declared there once); never Trio or ``nsqd.core`` (import-linter
contracts). The broker calls it from the event loop for page-cache
work and offloads only ``PartitionLog.sync`` to a worker thread.
"""

from .cache import CacheBudget as CacheBudget
from .checkpoint import (
    atomic_write as atomic_write,
    read_json as read_json,
    write_json as write_json,
)
from .errors import (
    CorruptRecordError as CorruptRecordError,
    LogClosedError as LogClosedError,
    OffsetOutOfRangeError as OffsetOutOfRangeError,
    StorageError as StorageError,
)
from .frame_runs import FrameLayout as FrameLayout, FrameRun as FrameRun
from .handles import HandleCache as HandleCache
from .log import PartitionLog as PartitionLog
from .record import (
    RECORD_HEADER as RECORD_HEADER,
    NewRecord as NewRecord,
    Record as Record,
    decode_record as decode_record,
    encode_record as encode_record,
    internal_id_for as internal_id_for,
)

__all__ = [
    "RECORD_HEADER",
    "CacheBudget",
    "CorruptRecordError",
    "FrameLayout",
    "FrameRun",
    "HandleCache",
    "LogClosedError",
    "NewRecord",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "Record",
    "StorageError",
    "atomic_write",
    "decode_record",
    "encode_record",
    "internal_id_for",
    "read_json",
    "write_json",
]
