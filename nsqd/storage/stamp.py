"""The producer stamp: which producer stored a record, and its number, for idempotent
publishing (:mod:`nsqd.core.producers`). Pure: no I/O.

A record's ``ext`` (:data:`~.record.RECORD_HEADER`) is youzan's JSON header on ext topics and
empty elsewhere. A record published by a producer that numbers its messages starts its ext
with the stamp below, before that header (if any). The stamp travels with the record: to the
replicas (their producer state is rebuilt from the records they copy) and back from the disk
after a restart. JSON never starts with byte ``0xFE``, so a stamped ext is told from an
unstamped one by its first byte; readers that hand the ext to a client (youzan's ext header)
take :func:`header_of` of it.
"""

from __future__ import annotations

import struct
from typing import Final

PRODUCER_STAMP: Final = struct.Struct(
    ">B"  # magic: STAMP_MAGIC (JSON, the rest of an ext, never starts with it)
    "Q"  # producer: the publishing producer's 64-bit id (IDENTIFY's pnsq_producer, hashed)
    "Q"  # sequence: the record's number among that producer's messages to the partition
)
STAMP_MAGIC: Final = 0xFE
STAMP_SIZE: Final = PRODUCER_STAMP.size

_pack: Final = PRODUCER_STAMP.pack
_unpack_from: Final = PRODUCER_STAMP.unpack_from


def stamped(producer: int, sequence: int, header: bytes = b"") -> bytes:
    """The ext of a record ``producer`` stored as number ``sequence``, before ``header``."""
    return _pack(STAMP_MAGIC, producer, sequence) + header


def stamps(producer: int, first: int, count: int) -> list[bytes]:
    """The exts of ``count`` records ``producer`` stored as numbers ``first, first + 1, ...``
    (:func:`stamped` of each, with no header)."""
    if count == 1:  # a synchronous producer's PUB: no comprehension's frame
        return [_pack(STAMP_MAGIC, producer, first)]
    pack, magic = _pack, STAMP_MAGIC
    return [pack(magic, producer, sequence) for sequence in range(first, first + count)]


def read_stamp(ext: bytes) -> tuple[int, int] | None:
    """``(producer, sequence)`` of a stamped ext, else None."""
    if len(ext) < STAMP_SIZE or ext[0] != STAMP_MAGIC:
        return None
    _, producer, sequence = _unpack_from(ext)
    return producer, sequence


def header_of(ext: bytes) -> bytes:
    """The part of ``ext`` a client sees (youzan's header): without the stamp."""
    if len(ext) >= STAMP_SIZE and ext[0] == STAMP_MAGIC:
        return ext[STAMP_SIZE:]
    return ext
