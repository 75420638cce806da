"""A partition's cursor journal: channel cursors changed since its last checkpoint, each change
appended with one ``fdatasync``.

Rewriting ``state.json`` atomically costs a temporary file's fsync, two renames and the
directory's fsync; a sync pass in which only channel cursors moved (FINs, an HTTP consume ack)
appends the cursors that changed here instead, and the next pass that must write the checkpoint
anyway (or finds the journal long) folds them into it.

A record replaces the cursors of the channels it names. Records apply in order on top of the
checkpoint whose *generation* they carry: every checkpoint written starts a new generation, so
records of an older one are ignored (the journal is then cut back to nothing, which is a
saving of space, not a step that correctness waits for). Reading stops at the first record that
is short or fails its CRC (a torn tail, or damage): the cursors are then those of the last good
record, so messages FINed after it are delivered again (at-least-once), never skipped.

Blocking file I/O, no clock; the broker calls it from a worker thread.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import crc32c as _crc32c

from pnsq._fileio import fsync_directory, read_all, write_all

from .errors import StorageError

JOURNAL_FILE: Final = "cursors.journal"

# Record => Length u32 | Crc32c u32 | Generation u64 | Payload [Length]
# The CRC-32C covers Generation and Payload; Payload is the compact JSON object
# {"<channel>": {"confirmed": <int>, "acked": [<int>, ...], "runs": [[<start>, <stop>], ...]}, ...}
# of the channels changed ("runs" only when there are any: nsqd.core.offset_runs).
JOURNAL_RECORD: Final = struct.Struct(
    ">I"  # length of the payload
    "I"  # crc32c of the generation field and the payload
    "Q"  # generation of the checkpoint the record applies on top of
)
_CRC_START: Final = struct.calcsize(">II")  # the CRC covers the record from here on
_O_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)


def _crc(record: bytes | memoryview) -> int:
    return int(_crc32c.crc32c(record))


def append_record(path: Path, generation: int, payload: bytes) -> int:
    """Append one record; durable on return (``fdatasync``, and the directory's fsync when this
    created the file). Returns the journal's size after it. Raises :class:`StorageError`."""
    covered = JOURNAL_RECORD.pack(len(payload), 0, generation)[_CRC_START:]  # the generation
    crc = int(_crc32c.crc32c(payload, _crc32c.crc32c(covered)))  # then the payload, uncopied
    record = JOURNAL_RECORD.pack(len(payload), crc, generation) + payload
    try:
        created = not path.exists()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | _O_CLOEXEC, 0o644)
        try:
            end = os.lseek(fd, 0, os.SEEK_END)
            write_all(fd, record, end)
            os.fdatasync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_directory(path.parent)
    except OSError as exc:
        raise StorageError(f"cannot append to {path}: {exc}") from exc
    return end + len(record)


@dataclass(frozen=True, slots=True)
class JournalRead:
    """What :func:`read_records` found."""

    #: the payloads of the generation asked for, in order
    payloads: list[bytes]
    #: what stopped the reading before the end of the file (None: nothing did)
    problem: str | None
    #: the highest generation of the records read (0: none)
    highest: int


def read_records(path: Path, generation: int) -> JournalRead:
    """The payloads of ``generation``'s records, in order, up to the first record that is short
    or fails its CRC. Raises :class:`StorageError` if the file cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
    except FileNotFoundError:
        return JournalRead([], None, 0)
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    try:
        data = read_all(fd)
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    finally:
        os.close(fd)
    view = memoryview(data)
    payloads: list[bytes] = []
    position = highest = 0
    while position < len(data):
        if len(data) - position < JOURNAL_RECORD.size:
            return JournalRead(payloads, f"a short record at byte {position}", highest)
        length, crc, found = JOURNAL_RECORD.unpack_from(data, position)
        end = position + JOURNAL_RECORD.size + length
        if end > len(data):
            return JournalRead(payloads, f"a short record at byte {position}", highest)
        if _crc(view[position + _CRC_START : end]) != crc:
            return JournalRead(payloads, f"a record failing its CRC at byte {position}", highest)
        if found == generation:
            payloads.append(bytes(view[position + JOURNAL_RECORD.size : end]))
        highest = max(highest, found)
        position = end
    return JournalRead(payloads, None, highest)


def reset_journal(path: Path) -> None:
    """Cut the journal back to nothing (its records belong to an older generation now). Not
    fsynced: records left behind by a crash are ignored all the same. Raises
    :class:`StorageError`."""
    try:
        os.truncate(path, 0)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StorageError(f"cannot reset {path}: {exc}") from exc
