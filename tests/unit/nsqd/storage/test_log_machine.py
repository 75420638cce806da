"""PartitionLog as a Hypothesis state machine against a plain list model (DESIGN.md §7)."""

from __future__ import annotations

import itertools
import logging
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from nsqd.storage import CacheBudget, NewRecord, OffsetOutOfRangeError, PartitionLog, Record
from nsqd.storage.handles import HandleCache
from nsqd.storage.record import HEADER_SIZE

PARTITION = 5
MAX_BYTES = 300  # a handful of records per segment, so rotation happens all the time
INTERVAL = 64  # several index entries per segment

entries_st = st.lists(
    st.builds(
        NewRecord,
        timestamp_ns=st.integers(0, 40),  # small range: duplicates and clocks going backwards
        body=st.binary(max_size=90),
        trace_id=st.integers(0, 2**64 - 1),
        deliver_at_ns=st.integers(0, 2**40),
        ext=st.one_of(st.just(b""), st.binary(max_size=12)),
    ),
    max_size=6,
)


class _ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _size(record: Record) -> int:
    return HEADER_SIZE + len(record.ext) + len(record.body)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="pnsq-log-"))
        self.handler = _ListHandler()
        self.logger = logging.getLogger(f"test.storage.machine.{id(self)}")
        self.logger.propagate = False
        self.logger.addHandler(self.handler)
        self.model: list[Record] = []  # index == offset; offsets below self.start are deleted
        self.start = 0
        self.cache_bytes = 0
        self.log: PartitionLog | None = None
        # one fd at most: every use of the neighbour closes this log's idle files
        self.handles = HandleCache(max_fds=1)
        self.neighbour: PartitionLog | None = None

    def _open(self) -> PartitionLog:
        return PartitionLog.open(
            self.directory,
            partition=PARTITION,
            max_bytes_per_file=MAX_BYTES,
            index_interval_bytes=INTERVAL,
            cache=CacheBudget(self.cache_bytes),
            logger=self.logger,
            handles=self.handles,
        )

    @initialize(cache_bytes=st.sampled_from([0, 600, 200_000]))
    def open_log(self, cache_bytes: int) -> None:
        self.cache_bytes = cache_bytes
        self.log = self._open()
        self.neighbour = PartitionLog.open(
            self.directory / "neighbour", partition=0, handles=self.handles
        )

    @rule()
    def neighbour_append(self) -> None:
        """Another partition's write: over the bound, so this log's files are closed."""
        assert self.neighbour is not None
        self.neighbour.append([NewRecord(timestamp_ns=1, body=b"n")])
        assert self.handles.open_fds == 2  # the neighbour's active segment alone

    @property
    def plog(self) -> PartitionLog:
        assert self.log is not None
        return self.log

    def teardown(self) -> None:
        if self.log is not None:
            self.log.close()
        if self.neighbour is not None:
            self.neighbour.close()
        self.logger.removeHandler(self.handler)
        shutil.rmtree(self.directory, ignore_errors=True)

    def _bases(self) -> list[int]:
        return sorted(int(p.stem) for p in self.directory.glob("*.log"))

    # -- rules ---------------------------------------------------------------------------------

    @rule(entries=entries_st)
    def append(self, entries: list[NewRecord]) -> None:
        got = self.plog.append(entries)
        first = len(self.model)
        expected = [
            Record(
                offset=first + i,
                timestamp_ns=e.timestamp_ns,
                internal_id=(PARTITION << 50) | (first + i + 1),
                trace_id=e.trace_id,
                deliver_at_ns=e.deliver_at_ns,
                body=e.body,
                ext=e.ext,
            )
            for i, e in enumerate(entries)
        ]
        assert got == expected
        self.model.extend(expected)

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        end = len(self.model)
        offset = data.draw(st.integers(max(self.start - 2, 0), end + 2), label="offset")
        n = data.draw(st.integers(0, 12), label="n")
        if offset < self.start or offset > end:
            with pytest.raises(OffsetOutOfRangeError):
                self.plog.read(offset, n)
        else:
            assert self.plog.read(offset, n) == self.model[offset : offset + n]

    @rule()
    def read_everything(self) -> None:
        assert self.plog.read(self.start, len(self.model) + 1) == self.model[self.start :]

    @rule(timestamp=st.integers(-1, 42))
    def offset_for_timestamp(self, timestamp: int) -> None:
        expected = next(
            (r.offset for r in self.model[self.start :] if r.timestamp_ns >= timestamp),
            len(self.model),
        )
        assert self.plog.offset_for_timestamp(timestamp) == expected

    @rule()
    def sync(self) -> None:
        self.plog.sync()

    @rule()
    def reopen(self) -> None:
        self.plog.close()
        self.log = self._open()
        assert not self.handler.records, "a clean close must not need repairs"

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.start, len(self.model)), label="truncate_to")
        self.plog.truncate(offset)
        del self.model[offset:]

    @rule(data=st.data())
    def delete_segments(self, data: st.DataObject) -> None:
        before = data.draw(st.integers(self.start, len(self.model) + 1), label="before_offset")
        older = data.draw(st.integers(0, 45), label="older_than_ns")
        bases = self._bases()
        expected = 0
        for base, next_base in itertools.pairwise(bases):
            if next_base > before:
                break
            newest = max((r.timestamp_ns for r in self.model[base:next_base]), default=None)
            if newest is not None and newest >= older:
                break
            expected += 1
        assert self.plog.delete_segments(before_offset=before, older_than_ns=older) == expected
        self.start = bases[expected]
        assert self._bases() == bases[expected:]

    @rule(data=st.data(), garbage=st.booleans())
    def damage_tail(self, data: st.DataObject, garbage: bool) -> None:
        """Kill-like damage to the last segment, then recovery: only torn records are lost."""
        self.plog.close()
        self.log = None
        base = self._bases()[-1]
        path = self.directory / f"{base:020d}.log"
        size = path.stat().st_size
        assert size == sum(_size(r) for r in self.model[base:])
        if garbage:
            junk = data.draw(st.binary(min_size=1, max_size=80), label="junk")
            with path.open("ab") as f:
                f.write(junk)
            survivors = len(self.model)
        else:
            chop = data.draw(st.integers(0, size), label="chop")
            with path.open("r+b") as f:
                f.truncate(size - chop)
            survivors, position = base, 0
            while survivors < len(self.model) and position + _size(self.model[survivors]) <= (
                size - chop
            ):
                position += _size(self.model[survivors])
                survivors += 1
            torn = position != size - chop
        self.log = self._open()
        warnings = [r for r in self.handler.records if r.levelno == logging.WARNING]
        self.handler.records.clear()
        if garbage or torn:
            assert len(warnings) == 1
            message = warnings[0].getMessage()
            assert path.name in message
            assert f"offset {survivors}" in message
        else:
            assert not warnings
        del self.model[survivors:]

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def offsets_match(self) -> None:
        if self.log is None:
            return
        assert self.log.start_offset == self.start
        assert self.log.end_offset == len(self.model)
        assert self.log.size_bytes == sum(_size(r) for r in self.model[self.start :])

    @invariant()
    def tail_matches(self) -> None:
        if self.log is None:
            return
        tail = max(self.start, len(self.model) - 3)
        assert self.log.read(tail, 3) == self.model[tail:]


LogMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestPartitionLogMachine = LogMachine.TestCase
