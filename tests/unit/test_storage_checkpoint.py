"""Atomic metadata files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nsqd.storage import StorageError, atomic_write, read_json, write_json


def test_atomic_write_replaces_content_and_leaves_no_tmp(tmp_path: Path) -> None:
    path = tmp_path / "cursor.json"
    atomic_write(path, b"one")
    atomic_write(path, b"two, longer")
    assert path.read_bytes() == b"two, longer"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cursor.json"]


def test_atomic_write_syncs_file_and_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
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
