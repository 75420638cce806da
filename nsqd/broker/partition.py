"""One partition of a topic on this node: its log and where a first channel starts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from ..core.delayed import DelayedIndex
from ..core.ownership import STANDALONE, PartitionState, Placement
from ..core.producers import Producers
from ..storage.corruption import SkippedRegions
from ..storage.frame_runs import FrameLayout, FrameRun
from ..storage.record import NewRecord, Record
from .read_guard import DamagedTail, ReadGuard

#: defaults of --producer-state-ttl (seconds) and of the producers a partition keeps at most
PRODUCER_STATE_TTL = 24 * 3600.0
MAX_PRODUCERS = 10_000


class Log(Protocol):
    """The log API the broker uses (``PartitionLog`` on disk, ``MemoryLog`` for #ephemeral)."""

    @property
    def start_offset(self) -> int: ...
    @property
    def end_offset(self) -> int: ...
    def append(
        self, entries: Sequence[NewRecord], epoch: int | None = None
    ) -> Sequence[Record]: ...
    def read(
        self, offset: int, max_records: int, max_bytes: int | None = None, *, hold: bool = False
    ) -> list[Record]: ...
    def read_written(
        self, offset: int, max_bytes: int, hard_limit: int
    ) -> tuple[int, bytes] | None: ...
    def read_frames(
        self, offset: int, max_records: int, max_bytes: int, now_ns: int, layout: FrameLayout
    ) -> FrameRun | None: ...
    def bytes_from(self, offset: int) -> int: ...
    def truncate(self, offset: int) -> None: ...
    def sync(self) -> None: ...
    def close(self) -> None: ...


class Partition:
    """A partition log plus the partition-level state a topic keeps in it."""

    def __init__(
        self,
        number: int,
        log: Log,
        directory: Path | None,
        topic_start: int,
        placement: Placement = STANDALONE,
        producers: Producers | None = None,
    ) -> None:
        self.number = number
        #: role, leader epoch, log end and high-watermark on this node (lookupd's placement;
        #: leader when standalone)
        self.state = PartitionState(placement, log.end_offset)
        self.log = log
        self.directory = directory  # None for #ephemeral topics
        #: where a topic's *first* channel starts: messages published while a topic has no
        #: channel are kept for it (nsqd semantics); moves to end_offset when channels go away.
        self.topic_start = topic_start
        self.unsynced = 0  # records appended since the last fsync
        self.dirty = True  # cursors changed since the last checkpoint
        self.saved_state: dict[str, object] | None = None  # the last checkpoint written
        #: its directory was created by this node's open: no ``state.json`` is on disk until
        #: its state differs from a new partition's (:func:`~.persistence.as_new`)
        self.created = False
        #: the generation of the last checkpoint written (or read) and the size of its cursor
        #: journal (:mod:`nsqd.storage.cursor_journal`)
        self.journal_generation = 0
        self.journal_bytes = 0
        self.message_count = 0  # records appended by this process (stats)
        #: its storage errors on the consume path, contained (:mod:`.read_guard`)
        self.read_guard = ReadGuard(str(directory) if directory is not None else str(number))
        skipped = getattr(log, "skipped", None)
        if isinstance(skipped, SkippedRegions):  # on disk: damage may be repaired
            state = self.state
            skipped.healing = lambda: state.leads and bool(state.followers)
            self.read_guard.settle = skipped.settle
        self.message_bytes = 0
        #: per in-sync follower node, the channels whose state goes to it at once, not at the
        #: next interval (an HTTP consume ack waits for it); each stream takes its node's
        self.cursor_push: dict[str, set[str]] = {}
        #: on a follower: where each ``#ephemeral`` channel of the leader's is (its confirmed
        #: offset; not saved, as the channel is not); once this node leads, a consumer that
        #: makes the channel again here goes on from there (``FEATURE_EPHEMERAL``)
        self.ephemeral_marks: dict[str, int] = {}
        #: follower node -> the topic's admin version it acknowledged (-1: none yet), for the
        #: followers whose stream takes Admin frames (:mod:`.admin_state`)
        self.admin_acks: dict[str, int] = {}
        #: DPUB'd records not due yet (channels count them as deferred, not depth)
        self.delayed = DelayedIndex()
        #: what each numbering producer stored here (idempotent publishing, :mod:`.idempotence`)
        # (not "producers or ...": an empty Producers is falsy, and the options were lost)
        self.producers = (
            producers if producers is not None else Producers(PRODUCER_STATE_TTL, MAX_PRODUCERS)
        )
        #: the producer state changed since the last checkpoint, last saved then (monotonic)
        self.producers_changed = False
        self.producers_saved = -math.inf

    def read_for_delivery(
        self, offset: int, max_records: int, max_bytes: int | None
    ) -> list[Record]:
        """The log's read for delivery: a damaged region an in-sync replica may repair is
        held, not skipped (:class:`~nsqd.storage.errors.RepairPending`, :mod:`.read_guard`).
        Raises :class:`DamagedTail` when nothing from ``offset`` to the log's end is readable
        (a reader would otherwise ask again at once, forever)."""
        records = self.log.read(offset, max_records, max_bytes, hold=True)
        if not records and offset < self.log.end_offset and max_records > 0:
            raise DamagedTail(f"offsets {offset}-{self.log.end_offset - 1} unreadable")
        return records
