"""The metadata file's journal (``nsqlookupd.meta.journal``): what each save changed, appended
after the last snapshot (``nsqlookupd.meta.json``, :mod:`.store`) instead of writing every
placement again, so a decision's save costs the topics it changed, not the cluster.

Each record is one save: a :data:`JOURNAL_RECORD` header, then a JSON document of what changed
since the save before it — ``{"topics": {name: placement | null}}`` (null: the topic is gone)
and, when they changed, the whole ``"deleted"``, ``"removing"`` and ``"switches"``, as the
snapshot holds them. A record is durable once :func:`append` returns (``fdatasync``).

A record belongs to the snapshot it follows: its header carries the snapshot's generation (the
snapshot's ``"journal"`` key), and a new snapshot takes the next one before the journal is
emptied. So the records a crash left between a snapshot's rename and the journal's truncation,
older than that snapshot, are never applied to it. Reading stops at the first record that is
not whole (a crash cut the last append short: it was never acknowledged) or is of another
generation. A record whose header fails its checksum, or whose document does with more after
it, is damage, not a cut: :class:`JournalError`. (An append never writes over old bytes that
a crash could leave behind it: what it replaces is cut off durably first.)

Blocking file I/O, no Trio (the store runs in a worker thread).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import crc32c

from pnsq._fileio import write_all

JOURNAL_RECORD: Final = struct.Struct(
    ">I"  # head_crc: CRC-32C of the rest of this header (a cut record never has a whole
    #       header that fails it: one that does is damaged)
    "I"  # size: the JSON document's bytes, after this header
    "Q"  # generation: the snapshot's ("journal" in nsqlookupd.meta.json) this record follows
    "I"  # crc: CRC-32C of the document
)
#: the header's two parts: head_crc, and the fields it covers (``JOURNAL_RECORD``'s own)
_HEAD_CRC: Final = struct.Struct(JOURNAL_RECORD.format[:2])
_COVERED: Final = struct.Struct(">" + JOURNAL_RECORD.format[2:])
_REST_OF_HEAD: Final = _HEAD_CRC.size  # where the fields head_crc covers start
assert _HEAD_CRC.size + _COVERED.size == JOURNAL_RECORD.size


class JournalError(Exception):
    """The journal is damaged: a record's header fails its checksum, or a record's document
    does with more records after it."""


def record(generation: int, document: bytes) -> bytes:
    """The journal record of one save: ``document`` (JSON bytes) after its header."""
    covered = _COVERED.pack(len(document), generation, crc32c.crc32c(document))
    return _HEAD_CRC.pack(crc32c.crc32c(covered)) + covered + document


def document(
    topics: Mapping[str, bytes | None],
    rest: Mapping[str, Any],
) -> bytes:
    """The JSON of a record: ``topics`` (each changed topic's stored placement JSON, None for
    a topic gone) and ``rest`` (``deleted``, ``removing``, ``switches``: those that changed)."""
    encoded = b",".join(
        json.dumps(name).encode() + b":" + (b"null" if entry is None else entry)
        for name, entry in sorted(topics.items())
    )
    head = json.dumps(dict(rest), sort_keys=True, separators=(",", ":")).encode()
    joint = b"," if rest else b""
    return b"".join((head[:-1], joint, b'"topics":{', encoded, b"}}"))


def read(data: bytes, generation: int) -> tuple[list[dict[str, Any]], int]:
    """The documents of the records of ``generation`` at the start of ``data`` (a journal's
    bytes), in order, and where the last of them ends (what follows it is a cut record or
    older ones: the next append overwrites it). Raises :class:`JournalError`."""
    documents: list[dict[str, Any]] = []
    at = 0
    header = JOURNAL_RECORD.size
    while at + header <= len(data):
        head_crc, size, written_generation, crc = JOURNAL_RECORD.unpack_from(data, at)
        if crc32c.crc32c(data[at + _REST_OF_HEAD : at + header]) != head_crc:
            raise JournalError(f"record at byte {at}: its header fails its checksum")
        start, stop = at + header, at + header + size
        if stop > len(data):
            break  # cut short by a crash: never acknowledged
        payload = data[start:stop]
        if crc32c.crc32c(payload) != crc:
            if stop < len(data):
                raise JournalError(f"record at byte {at} fails its checksum")
            break  # the last one, cut short
        if written_generation != generation:
            break  # older than the snapshot (a crash before the journal was emptied)
        try:
            documents.append(json.loads(payload))
        except ValueError as exc:
            raise JournalError(f"record at byte {at} is not JSON: {exc}") from exc
        at = stop
    return documents, at


def append(path: Path, data: bytes, at: int) -> None:
    """Write ``data`` (records) at byte ``at`` of the journal and make it durable. What
    followed ``at`` (a record a crash cut short, or records older than the snapshot) is cut
    off first, durably: a crash during this write then leaves a cut record at the end, never
    one over the old bytes, which would read as damage. Raises ``OSError``."""
    fd = os.open(path, os.O_WRONLY)
    try:
        if os.fstat(fd).st_size != at:
            os.ftruncate(fd, at)
            os.fsync(fd)
        write_all(fd, data, at)
        os.fdatasync(fd)
    finally:
        os.close(fd)


def empty(path: Path) -> None:
    """Create the journal, or empty it (a new snapshot took in its records), durably (for
    the same reason as :func:`append`'s cut); the caller fsyncs the directory for a new one.
    Raises ``OSError``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
