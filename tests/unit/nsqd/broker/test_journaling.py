"""Saving a partition's state through the cursor journal (nsqd/broker/journaling.py): cursor
moves are appended, anything else writes the checkpoint (of a new generation), and reading the
state back replays only the records of the checkpoint's generation."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from nsqd.broker import journaling
from nsqd.broker.journaling import JOURNAL_KEY, journal_entry, last_generation, save_state
from nsqd.broker.partition import Partition
from nsqd.broker.persistence import STATE_FILE, load_state
from nsqd.core.ownership import STANDALONE
from nsqd.storage.cache import CacheBudget
from nsqd.storage.checkpoint import write_checkpoint
from nsqd.storage.cursor_journal import JOURNAL_FILE, append_record
from nsqd.storage.log import PartitionLog


async def _disk(fn: Callable[..., None], *args: object) -> bool:
    fn(*args)  # the test runs the blocking call inline
    return True


def _partition(directory: Path) -> Partition:
    log = PartitionLog.open(directory, partition=0, cache=CacheBudget(0))
    return Partition(0, log, directory, 0, STANDALONE)


def _state(partition: Partition, **cursors: tuple[int, list[int]]) -> dict[str, object]:
    channels = {name: {"confirmed": c, "acked": a} for name, (c, a) in cursors.items()}
    return {
        "topic_start": 0,
        "channels": channels,
        "producers": {},
        JOURNAL_KEY: partition.journal_generation,
    }


def test_only_cursor_moves_of_the_same_channels_go_to_the_journal() -> None:
    saved = {"topic_start": 0, "channels": {"a": 1, "b": 2}, JOURNAL_KEY: 3}
    assert journal_entry(None, saved) is None
    assert journal_entry(saved, {**saved, "channels": {"a": 1, "b": 5}}) == {"b": 5}
    assert journal_entry(saved, {**saved, "channels": {"a": 1}}) is None  # a channel went
    assert journal_entry(saved, {**saved, "topic_start": 7}) is None
    assert journal_entry(saved, {**saved, "extra": 1}) is None


async def test_cursor_moves_are_journaled_and_read_back_over_the_checkpoint(
    tmp_path: Path,
) -> None:
    partition = _partition(tmp_path)
    checkpoint = tmp_path / STATE_FILE
    assert await save_state(partition, _state(partition, c=(0, [])), checkpoint, _disk)
    assert partition.journal_generation == 1  # the first save writes the checkpoint
    written = checkpoint.read_bytes()
    assert await save_state(partition, _state(partition, c=(0, [3, 4])), checkpoint, _disk)
    assert await save_state(partition, _state(partition, c=(7, [])), checkpoint, _disk)
    assert checkpoint.read_bytes() == written  # the moves went to the journal
    assert partition.journal_bytes == (tmp_path / JOURNAL_FILE).stat().st_size > 0
    state = load_state(tmp_path, "STAMP")
    assert state["channels"] == {"c": {"confirmed": 7, "acked": []}}
    assert state[JOURNAL_KEY] == 1
    append_record(tmp_path / JOURNAL_FILE, 6, b"{}")  # a record of a lost generation
    assert last_generation(tmp_path, state) == 6  # the next checkpoint's is past them all
    # anything else changed: a checkpoint of the next generation, the journal cut back
    moved = {**_state(partition, c=(9, [])), "topic_start": 5}
    assert await save_state(partition, moved, checkpoint, _disk)
    assert partition.journal_generation == 2
    assert (tmp_path / JOURNAL_FILE).read_bytes() == b""
    assert load_state(tmp_path, "STAMP")["channels"] == {"c": {"confirmed": 9, "acked": []}}


async def test_records_of_an_older_generation_are_not_replayed(tmp_path: Path) -> None:
    """A crash between a checkpoint and the journal's cut leaves records of the generation
    before it: they do not move the newer checkpoint's cursors (back, after a rewind)."""
    partition = _partition(tmp_path)
    checkpoint = tmp_path / STATE_FILE
    assert await save_state(partition, _state(partition, c=(0, [])), checkpoint, _disk)
    assert await save_state(partition, _state(partition, c=(50, [])), checkpoint, _disk)
    stale = (tmp_path / JOURNAL_FILE).read_bytes()
    rewound = {**_state(partition, c=(10, [])), "topic_start": 1}  # setoffset back, say
    assert await save_state(partition, rewound, checkpoint, _disk)
    (tmp_path / JOURNAL_FILE).write_bytes(stale)  # the cut did not reach the disk
    assert load_state(tmp_path, "STAMP")["channels"] == {"c": {"confirmed": 10, "acked": []}}


async def test_a_long_journal_is_folded_into_a_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journaling, "JOURNAL_LIMIT", 100)
    partition = _partition(tmp_path)
    checkpoint = tmp_path / STATE_FILE
    for confirmed in range(10):
        assert await save_state(partition, _state(partition, c=(confirmed, [])), checkpoint, _disk)
    assert partition.journal_bytes <= 100 + 64
    assert partition.journal_generation > 1
    saved = json.loads(checkpoint.read_text())
    assert saved[JOURNAL_KEY] == partition.journal_generation
    assert load_state(tmp_path, "STAMP")["channels"] == {"c": {"confirmed": 9, "acked": []}}


async def test_a_damaged_record_leaves_the_cursors_of_the_last_good_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_checkpoint(
        tmp_path / STATE_FILE,
        {"topic_start": 0, "channels": {"c": {"confirmed": 1, "acked": []}}, JOURNAL_KEY: 4},
    )
    journal = tmp_path / JOURNAL_FILE
    append_record(journal, 4, b'{"c":{"confirmed":2,"acked":[]}}')
    append_record(journal, 4, b'{"c":{"confirmed":3,"acked":[]}}')
    journal.write_bytes(journal.read_bytes()[:-1])  # torn
    with caplog.at_level(logging.WARNING, "nsqd.broker"):
        state = load_state(tmp_path, "STAMP")
    assert state["channels"] == {"c": {"confirmed": 2, "acked": []}}
    assert any("short record" in m for m in caplog.messages)


async def test_a_save_nobody_waits_for_folds_the_journal_into_the_checkpoint(
    tmp_path: Path,
) -> None:
    partition = _partition(tmp_path)
    checkpoint = tmp_path / STATE_FILE
    assert await save_state(partition, _state(partition, c=(0, [])), checkpoint, _disk)
    assert await save_state(partition, _state(partition, c=(4, [])), checkpoint, _disk)
    assert (tmp_path / JOURNAL_FILE).stat().st_size > 0
    moved = _state(partition, c=(6, [8]))
    assert await save_state(partition, moved, checkpoint, _disk, journal=False)
    assert (tmp_path / JOURNAL_FILE).read_bytes() == b""
    saved = json.loads(checkpoint.read_text())
    assert saved["channels"] == {"c": {"confirmed": 6, "acked": [8]}}
