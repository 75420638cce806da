"""Atomic metadata files."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from nsqd.storage import StorageError, atomic_write, checkpoint, read_json, write_json
from nsqd.storage.checkpoint import (
    DAMAGED_CHECKPOINTS,
    checked_value,
    checkpoint_bytes,
    load_checkpoint,
    previous_path,
    write_checkpoint,
)


def test_atomic_write_replaces_content_and_leaves_no_tmp(tmp_path: Path) -> None:
    path = tmp_path / "cursor.json"
    atomic_write(path, b"one")
    atomic_write(path, b"two, longer")
    assert path.read_bytes() == b"two, longer"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cursor.json"]


def recorded(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[Any]:
    """The arguments of every call of ``owner.name`` (a one-argument function, still called)
    from now on."""
    calls: list[Any] = []
    real = getattr(owner, name)

    def recording(argument: Any) -> None:
        calls.append(argument)
        real(argument)

    monkeypatch.setattr(owner, name, recording)
    return calls


def test_atomic_write_syncs_file_and_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced = recorded(monkeypatch, os, "fsync")
    atomic_write(tmp_path / "x", b"data")
    assert len(synced) == 2  # the temporary file, then the directory


def test_failed_write_keeps_old_content_and_removes_tmp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "epochs.json"
    atomic_write(path, b"old")

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(StorageError, match=r"epochs\.json"):
        atomic_write(path, b"new")
    monkeypatch.undo()
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epochs.json"]


def test_json_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "hw.json"
    assert read_json(path) is None
    write_json(path, {"epoch": 3, "high_watermark": 1234, "channels": ["a", "b"]})
    assert path.read_bytes() == b'{"epoch":3,"high_watermark":1234,"channels":["a","b"]}'
    assert read_json(path) == {"epoch": 3, "high_watermark": 1234, "channels": ["a", "b"]}


def test_invalid_json_is_a_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(b"{not json")
    with pytest.raises(StorageError, match="not valid JSON"):
        read_json(path)


def _valid(value: object) -> bool:
    return isinstance(value, dict) and isinstance(value.get("n"), int)


_LOG = logging.getLogger("test.checkpoint")


def test_a_checkpoint_keeps_the_generation_it_replaces(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    write_checkpoint(path, {"n": 1})
    assert not previous_path(path).exists()
    write_checkpoint(path, {"n": 2})
    write_checkpoint(path, {"n": 3})
    assert checked_value(read_json(path)) == {"n": 3}
    assert checked_value(read_json(previous_path(path))) == {"n": 2}
    assert load_checkpoint(path, _valid, "T", _LOG, "fallback") == {"n": 3}


@pytest.mark.parametrize(
    "garbage", [b"", b"{", b"\x00" * 10, b"[1, 2]", b'{"n": "one"}', b"\xff\xfe"]
)
def test_a_damaged_checkpoint_is_moved_aside_and_the_previous_one_used(
    tmp_path: Path, garbage: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "state.json"
    write_checkpoint(path, {"n": 1})
    write_checkpoint(path, {"n": 2})
    path.write_bytes(garbage)
    assert load_checkpoint(path, _valid, "STAMP", _LOG, "fallback") == {"n": 1}
    assert (tmp_path / "state.json.corrupt-STAMP").read_bytes() == garbage
    assert not path.exists()
    messages = [r.getMessage() for r in caplog.records]
    assert any("moved it aside to state.json.corrupt-STAMP" in m for m in messages)
    assert any("using the previous checkpoint state.json.prev" in m for m in messages)
    write_checkpoint(path, {"n": 3})  # the next write keeps the good previous generation
    assert checked_value(read_json(previous_path(path))) == {"n": 1}


def test_with_no_good_generation_the_fallback_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "pnsq.dat"
    path.write_bytes(b"garbage")
    previous_path(path).write_bytes(b"{}")
    assert load_checkpoint(path, _valid, "S", _LOG, "starting empty") is None
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "pnsq.dat.corrupt-S",
        "pnsq.dat.prev.corrupt-S",
    ]
    assert "pnsq.dat: no good checkpoint left; starting empty" in caplog.text
    assert load_checkpoint(path, _valid, "S", _LOG, "starting empty") is None  # missing: quiet


def test_a_crash_between_the_two_renames_leaves_the_previous_generation(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    write_checkpoint(path, {"n": 1})
    path.replace(previous_path(path))  # what a crash right after the first rename leaves
    assert load_checkpoint(path, _valid, "S", _LOG, "fallback") == {"n": 1}


def test_a_checkpoint_carries_its_checksum_as_its_first_member(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    write_checkpoint(path, {"topic_start": 7, "channels": {"ch": {"confirmed": 12}}})
    document = json.loads(path.read_bytes())  # still plain JSON for any reader
    assert list(document) == ["crc32c", "topic_start", "channels"]
    assert checked_value(document) == {"topic_start": 7, "channels": {"ch": {"confirmed": 12}}}


def test_a_checkpoint_without_a_checksum_is_read_as_before(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(b'{"n": 4}')  # written by an earlier release
    assert load_checkpoint(path, _valid, "T", _LOG, "fallback") == {"n": 4}


def test_every_single_byte_flip_of_a_checkpoint_is_caught_or_harmless(tmp_path: Path) -> None:
    """A flip that still parses to the same document is harmless; any other is refused, so
    the previous generation is used: a cursor never moves on by damage."""
    value = {"topic_start": 3, "channels": {"ch": {"confirmed": 1234, "acked": [1236, 1240]}}}
    data = checkpoint_bytes(value)
    path = tmp_path / "state.json"
    before = DAMAGED_CHECKPOINTS.count
    refused = 0
    for at in range(len(data)):
        for bit in (0, 3, 6):
            damaged = bytearray(data)
            damaged[at] ^= 1 << bit
            path.write_bytes(bytes(damaged))
            previous_path(path).write_bytes(checkpoint_bytes({"n": 0}))
            got = load_checkpoint(path, lambda v: isinstance(v, dict), "S", _LOG, "fallback")
            assert got in (value, {"n": 0}), (at, bit, damaged)
            if got == {"n": 0}:
                refused += 1
            for aside in tmp_path.glob("*.corrupt-S"):
                aside.unlink()
    assert refused >= 3 * len(data) - 3  # the rare harmless ones parse to the same value
    assert DAMAGED_CHECKPOINTS.count - before == refused


def test_a_created_directorys_entry_is_made_durable_in_its_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new topic's directory and its first partition's: each parent is fsynced after the
    directory in it is made (the partition's records, fsynced, are otherwise reachable only
    through entries that may not be on disk)."""
    synced = recorded(monkeypatch, checkpoint, "fsync_directory")
    partition = tmp_path / "data" / "topic" / "0"
    checkpoint.create_directory(partition)
    assert partition.is_dir()
    assert synced == [tmp_path, tmp_path / "data", tmp_path / "data" / "topic"]
    synced.clear()
    checkpoint.create_directory(partition)  # there already: nothing to make durable
    checkpoint.create_directory(tmp_path / "data" / "topic" / "1")  # a sibling: its parent only
    assert synced == [tmp_path / "data" / "topic"]


def test_directories_made_together_fsync_each_parent_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new topic's partitions opened together: one fsync of the topic's directory for all
    of their entries (it was one per partition), every parent still fsynced."""
    synced = recorded(monkeypatch, checkpoint, "fsync_directory")
    topic = tmp_path / "data" / "topic"
    made = checkpoint.create_directories([topic / "0", topic / "1", topic / "2"])
    assert made == {topic / "0", topic / "1", topic / "2"}
    assert all((topic / n).is_dir() for n in "012")
    assert synced == [tmp_path, tmp_path / "data", topic]
    synced.clear()
    made = checkpoint.create_directories(
        [topic / "1", tmp_path / "data" / "other" / "0", topic / "3"]
    )
    assert made == {tmp_path / "data" / "other" / "0", topic / "3"}  # not the one there already
    assert synced == [tmp_path / "data", tmp_path / "data" / "other", topic]
