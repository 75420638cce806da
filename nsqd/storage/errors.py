"""Errors raised by the storage layer.

Every ``OSError`` from a file operation is translated once, at the public method that caught it,
into :class:`StorageError` (``raise StorageError(...) from exc``); callers never see a raw
``OSError`` from this package.
"""

from __future__ import annotations


class StorageError(Exception):
    """Base class for every error raised by :mod:`nsqd.storage`."""


class CorruptRecordError(StorageError):
    """A stored record failed validation (length, CRC, or offset sequence).

    Reads and recovery step over a damaged record that intact ones follow (reported through
    :class:`~.corruption.SkippedRegions`); recovery cuts a torn tail instead.
    ``position`` is the byte position of the bad record in its segment file and ``offset`` the
    log offset that was expected there, when known.
    """

    def __init__(
        self, message: str, *, position: int | None = None, offset: int | None = None
    ) -> None:
        super().__init__(message)
        self.position = position
        self.offset = offset


def corrupt_in_segment(
    name: str, exc: CorruptRecordError, *, position: int, offset: int | None
) -> CorruptRecordError:
    """``exc`` (a record's own check) placed in segment file ``name``: at byte ``position``,
    where ``offset`` was expected. The caller raises it ``from exc`` (recovery logs the
    ``__cause__``)."""
    return CorruptRecordError(
        f"{name}: {exc} at byte {position} (expected offset {offset})",
        position=position,
        offset=offset,
    )


class RepairPending(StorageError):
    """A read for delivery met damaged records ``[first, resumed)`` that an in-sync replica
    may still hold: they are not skipped yet. The read is tried again once the replica's copy
    was written in their place, or the wait given up (:meth:`~.corruption.SkippedRegions.settle`:
    then skipped)."""

    def __init__(self, message: str, *, first: int, resumed: int) -> None:
        super().__init__(message)
        self.first = first
        self.resumed = resumed


class OffsetOutOfRangeError(StorageError):
    """A read or seek below ``start_offset`` or above ``end_offset``."""


class LogClosedError(StorageError):
    """The log was closed; no further operation is possible."""
