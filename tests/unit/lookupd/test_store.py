"""lookupd's file store: a save writes the topics it changed, not every placement; what it
leaves after a crash at any step loads as a consistent state; the release before's single file
loads and is rewritten in files per topic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lookupd.core.placement import TopicMeta, TopicPlacement, to_document
from lookupd.core.switches import Switches
from lookupd.state.store import FILE_NAME, TOPICS_DIR, MetadataStore, StoreError
from protocol.lookup import PartitionAssignment

A, B = "a:4150", "b:4150"


def placed(name: str, epoch: int = 1) -> TopicPlacement:
    return TopicPlacement(name, TopicMeta(1, 2), (PartitionAssignment(A, (B,), epoch, (A, B)),))


def inode(directory: Path, name: str) -> int:
    return (directory / TOPICS_DIR / f"{name}.json").stat().st_ino


def test_a_save_rewrites_only_the_topics_it_changed(tmp_path: Path) -> None:
    store = MetadataStore(tmp_path)
    t, u = placed("t"), placed("u")
    store.save([t, u])
    before = inode(tmp_path, "t"), inode(tmp_path, "u")
    head = (tmp_path / FILE_NAME).stat().st_ino
    u2 = placed("u", epoch=2)
    store.save([t, u2])
    assert inode(tmp_path, "t") == before[0]  # not written again
    assert inode(tmp_path, "u") != before[1]  # replaced by rename
    assert (tmp_path / FILE_NAME).stat().st_ino == head  # the head did not change
    assert MetadataStore(tmp_path).load().placements == {"t": t, "u": u2}


def test_a_deleted_topic_loses_its_file_and_keeps_its_tombstone(tmp_path: Path) -> None:
    store = MetadataStore(tmp_path)
    store.save([placed("t"), placed("u")])
    store.save([placed("t")], deleted={"u": 12.5})
    assert not (tmp_path / TOPICS_DIR / "u.json").exists()
    stored = MetadataStore(tmp_path).load()
    assert set(stored.placements) == {"t"}
    assert stored.deleted == {"u": 12.5}


def test_a_file_left_beside_its_tombstone_is_not_loaded_and_goes_next_save(
    tmp_path: Path,
) -> None:
    """A crash between the head (the tombstone) and the unlink of the topic's file."""
    MetadataStore(tmp_path).save([placed("t"), placed("u")], deleted={"u": 3.0})
    reopened = MetadataStore(tmp_path)
    stored = reopened.load()
    assert set(stored.placements) == {"t"}
    reopened.save(stored.placements.values(), stored.deleted)
    assert not (tmp_path / TOPICS_DIR / "u.json").exists()


def test_topic_files_written_before_a_crash_load_as_placed(tmp_path: Path) -> None:
    """A save that stopped after a topic's file and before the head: the topic is loaded
    (its placement stands alone; the nodes were not told of it yet, and will be)."""
    store = MetadataStore(tmp_path)
    store.save([placed("t")], removing={A: 1.0})
    directory = tmp_path / TOPICS_DIR
    (directory / "u.json").write_bytes(placed("u").encoded())
    (directory / "v.json.tmp").write_bytes(b"{torn")  # a temporary file is never read
    stored = MetadataStore(tmp_path).load()
    assert set(stored.placements) == {"t", "u"}
    assert stored.removing == {A: 1.0}


def test_the_single_file_of_the_release_before_loads_and_is_rewritten(tmp_path: Path) -> None:
    t = placed("t")
    old = {
        "deleted": {"gone": 2.0},
        "removing": {},
        "switches": Switches().to_values(),
        "topics": {"t": to_document(t)},
        "version": 1,
    }
    (tmp_path / FILE_NAME).write_text(json.dumps(old))
    store = MetadataStore(tmp_path)
    stored = store.load()
    assert stored.placements == {"t": t}
    assert stored.deleted == {"gone": 2.0}
    store.save(stored.placements.values(), stored.deleted)
    head = json.loads((tmp_path / FILE_NAME).read_bytes())
    assert "topics" not in head
    assert head["version"] == 2
    assert (tmp_path / TOPICS_DIR / "t.json").read_bytes() == t.encoded()
    assert MetadataStore(tmp_path).load().placements == {"t": t}


def test_a_damaged_topic_file_is_a_store_error(tmp_path: Path) -> None:
    MetadataStore(tmp_path).save([placed("t")])
    (tmp_path / TOPICS_DIR / "t.json").write_bytes(b'{"partitions": 3')
    with pytest.raises(StoreError, match=r"t\.json is not a valid topic placement"):
        MetadataStore(tmp_path).load()


def test_a_name_that_is_no_topic_name_is_not_written(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="not a name to store"):
        MetadataStore(tmp_path).save([placed("../escape")])
    assert not (tmp_path / "escape.json").exists()
