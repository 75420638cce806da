"""lookupd's metadata store keeps a journal of what each save changed after its snapshot: a
decision on one topic writes that topic, not every placement, and whatever a crash leaves
(a record cut short, records older than the snapshot) loads as the last save that returned."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from lookupd.core.placement import TopicMeta, TopicPlacement
from lookupd.core.switches import Switches
from lookupd.state import store as store_module
from lookupd.state.journal import JOURNAL_RECORD
from lookupd.state.store import MetadataStore, Stored, StoreError

NODES = ("n0:4150", "n1:4150", "n2:4150")


def topic(name: str, partitions: int = 20, epoch: int = 1) -> TopicPlacement:
    from protocol.lookup import PartitionAssignment

    parts = tuple(
        PartitionAssignment(
            NODES[p % 3], (NODES[(p + 1) % 3],), epoch, (NODES[p % 3], NODES[(p + 1) % 3])
        )
        for p in range(partitions)
    )
    return TopicPlacement(name, TopicMeta(partitions, 2), parts)


def cluster(topics: int = 10) -> dict[str, TopicPlacement]:
    return {f"t{i:02d}": topic(f"t{i:02d}") for i in range(topics)}


def saved(directory: Path) -> tuple[dict[str, TopicPlacement], MetadataStore]:
    """A cluster's placements, and a new store that saved them (its first save: a snapshot)."""
    placements = cluster()
    store = MetadataStore(directory)
    store.save(placements.values())
    return placements, store


def loaded(directory: Path) -> Stored:
    return MetadataStore(directory).load()


def records_in(store: MetadataStore) -> list[dict[str, object]]:
    """The journal's records, read as documents (headers skipped)."""
    assert store.journal_path is not None
    data = store.journal_path.read_bytes()
    out = []
    at = 0
    while at < len(data):
        _, size, _, _ = JOURNAL_RECORD.unpack_from(data, at)
        out.append(json.loads(data[at + JOURNAL_RECORD.size : at + JOURNAL_RECORD.size + size]))
        at += JOURNAL_RECORD.size + size
    return out


def test_a_decision_on_one_topic_appends_that_topic_and_leaves_the_snapshot(
    tmp_path: Path,
) -> None:
    placements = cluster()
    MetadataStore(tmp_path).save(placements.values())
    store = MetadataStore(tmp_path)
    assert store.load().placements == placements
    assert store.path is not None
    before = store.path.stat()
    placements["t03"] = topic("t03", epoch=2)
    store.save(placements.values())
    after = store.path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert [list(r["topics"]) for r in records_in(store)] == [["t03"]]
    assert loaded(tmp_path).placements == placements
    store.save(placements.values())  # nothing changed: nothing written
    assert len(records_in(store)) == 1


def test_deletions_tombstones_drains_and_switches_are_journaled(tmp_path: Path) -> None:
    placements, store = saved(tmp_path)
    del placements["t05"]
    store.save(placements.values(), {"t05": 12.5})
    store.save(placements.values(), {"t05": 12.5}, {"n2:4150": 30.0}, Switches(balance=False))
    first, second = records_in(store)
    assert first == {"deleted": {"t05": 12.5}, "topics": {"t05": None}}
    assert second == {"removing": {"n2:4150": 30.0}, "switches": {"balance": "false"}, "topics": {}}
    assert loaded(tmp_path) == Stored(
        placements, {"t05": 12.5}, {"n2:4150": 30.0}, Switches(balance=False)
    )


def test_a_save_changing_most_topics_writes_a_snapshot_and_empties_the_journal(
    tmp_path: Path,
) -> None:
    placements, store = saved(tmp_path)
    placements["t00"] = topic("t00", epoch=2)
    store.save(placements.values())
    assert len(records_in(store)) == 1
    generation = json.loads(store.path.read_bytes())["journal"]
    for name in list(placements)[:6]:  # a node's death: most topics change
        placements[name] = topic(name, epoch=3)
    store.save(placements.values())
    assert records_in(store) == []
    snapshot = json.loads(store.path.read_bytes())
    assert snapshot["journal"] == generation + 1
    assert loaded(tmp_path).placements == placements


def test_the_journal_never_outgrows_the_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "JOURNAL_MIN", 0)
    placements, store = saved(tmp_path)
    assert store.path is not None
    assert store.journal_path is not None
    for epoch in range(2, 40):
        placements[f"t{epoch % 10:02d}"] = topic(f"t{epoch % 10:02d}", epoch=epoch)
        store.save(placements.values())
        assert store.journal_path.stat().st_size <= store.path.stat().st_size
        assert loaded(tmp_path).placements == placements


def test_a_record_cut_short_by_a_crash_loads_as_the_save_before_it(tmp_path: Path) -> None:
    placements, store = saved(tmp_path)
    placements["t01"] = topic("t01", epoch=2)
    store.save(placements.values())
    returned = dict(placements)
    placements["t02"] = topic("t02", epoch=2)
    store.save(placements.values())
    assert store.journal_path is not None
    whole = store.journal_path.read_bytes()
    os.truncate(store.journal_path, len(whole) - 7)  # the last append did not return
    again = MetadataStore(tmp_path)
    assert again.load().placements == returned
    returned["t04"] = topic("t04", epoch=2)  # the next save overwrites the cut record
    again.save(returned.values())
    assert loaded(tmp_path).placements == returned
    assert len(records_in(again)) == 2


def test_records_older_than_the_snapshot_are_not_applied(tmp_path: Path) -> None:
    """A crash between a snapshot's rename and the journal's truncation: the old records are
    what the new snapshot already holds (or overrode), never applied over it."""
    placements, store = saved(tmp_path)
    placements["t01"] = topic("t01", epoch=2)
    store.save(placements.values())
    assert store.journal_path is not None
    old_records = store.journal_path.read_bytes()
    for name in list(placements)[:8]:
        placements[name] = topic(name, epoch=5)
    store.save(placements.values())  # a snapshot: the journal emptied
    assert store.journal_path.read_bytes() == b""
    store.journal_path.write_bytes(old_records)  # the truncation never reached the disk
    again = MetadataStore(tmp_path)
    assert again.load().placements == placements  # t01 at epoch 5, not 2
    placements["t09"] = topic("t09", epoch=6)
    again.save(placements.values())  # appended over the old records
    assert loaded(tmp_path).placements == placements


@pytest.mark.parametrize(
    ("at", "flip", "match"),
    [
        # inside the first record's document, with a record after it
        (JOURNAL_RECORD.size + 5, 0xFF, r"byte \d+ fails its checksum"),
        # the first record's size, now past the end of the file: read as a cut record, the
        # saves after it would be dropped without a word; the header's checksum refuses it
        (5, 0x40, "header"),
    ],
)
def test_damage_refuses_to_load(tmp_path: Path, at: int, flip: int, match: str) -> None:
    placements, store = saved(tmp_path)
    for epoch in (2, 3):
        placements["t01"] = topic("t01", epoch=epoch)
        store.save(placements.values())
    assert store.journal_path is not None
    data = bytearray(store.journal_path.read_bytes())
    data[at] ^= flip
    store.journal_path.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=match):
        loaded(tmp_path)


def test_a_store_whose_files_another_wrote_saves_a_snapshot(tmp_path: Path) -> None:
    placements, first = saved(tmp_path)
    second = MetadataStore(tmp_path)
    second.load()
    changed = dict(placements, t01=topic("t01", epoch=2))
    second.save(changed.values())  # appended: the first store's knowledge is stale now
    placements["t02"] = topic("t02", epoch=2)
    first.save(placements.values())  # its whole state, as a snapshot
    assert first.journal_path is not None
    assert first.journal_path.read_bytes() == b""
    assert loaded(tmp_path).placements == placements


def test_compact_folds_the_journal_into_a_snapshot_an_older_release_reads(
    tmp_path: Path,
) -> None:
    placements, store = saved(tmp_path)
    placements["t07"] = topic("t07", epoch=9)
    store.save(placements.values(), {"gone": 1.0})
    store.compact()
    assert store.journal_path is not None
    assert store.journal_path.read_bytes() == b""
    assert store.path is not None
    document = json.loads(store.path.read_bytes())  # what a release before the journal reads
    assert document["topics"]["t07"]["partitions"][0]["epoch"] == 9
    assert document["deleted"] == {"gone": 1.0}
    assert loaded(tmp_path) == Stored(placements, {"gone": 1.0})


def test_a_file_of_the_release_before_loads_and_starts_a_journal(tmp_path: Path) -> None:
    placements, store = saved(tmp_path)
    assert store.path is not None
    assert store.journal_path is not None
    document = json.loads(store.path.read_bytes())
    del document["journal"]
    store.path.write_text(json.dumps(document))
    store.journal_path.unlink()
    again = MetadataStore(tmp_path)
    assert again.load().placements == placements
    placements["t01"] = topic("t01", epoch=2)
    again.save(placements.values())  # a snapshot first: there was no journal
    placements["t02"] = topic("t02", epoch=2)
    again.save(placements.values())
    assert [list(r["topics"]) for r in records_in(again)] == [["t02"]]
    assert loaded(tmp_path).placements == placements


# A save is a set of topics changed (an epoch each), added or deleted.
saves = st.lists(
    st.lists(st.tuples(st.integers(0, 14), st.integers(0, 3)), min_size=1, max_size=4),
    min_size=1,
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(saves=saves, cut=st.integers(0, 10_000))
def test_any_crash_loads_as_a_save_that_returned(
    tmp_path_factory: pytest.TempPathFactory, saves: list[list[tuple[int, int]]], cut: int
) -> None:
    directory = tmp_path_factory.mktemp("meta")
    placements = cluster(6)
    store = MetadataStore(directory)
    store.save(placements.values())
    history = [dict(placements)]
    for change in saves:
        for index, epoch in change:
            name = f"t{index:02d}"
            if epoch == 0:
                placements.pop(name, None)
            else:
                placements[name] = topic(name, epoch=epoch)
        store.save(placements.values())
        history.append(dict(placements))
        assert loaded(directory).placements == placements
    assert store.journal_path is not None
    data = store.journal_path.read_bytes()
    os.truncate(store.journal_path, min(cut, len(data)))  # a crash at any byte of the journal
    assert loaded(directory).placements in history
