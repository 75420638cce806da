"""The cursor journal's records (nsqd/storage/cursor_journal.py): appended durably, read back
by generation, and read up to the first torn or damaged record only."""

from __future__ import annotations

from pathlib import Path

from nsqd.storage.cursor_journal import (
    JOURNAL_RECORD,
    append_record,
    read_records,
    reset_journal,
)


def test_records_are_read_back_in_order_for_their_generation(tmp_path: Path) -> None:
    path = tmp_path / "cursors.journal"
    assert read_records(path, 1).payloads == []  # none yet
    sizes = [append_record(path, g, p) for g, p in [(1, b"a"), (2, b"bb"), (2, b"ccc")]]
    assert sizes == [
        JOURNAL_RECORD.size + 1,
        2 * JOURNAL_RECORD.size + 3,
        3 * JOURNAL_RECORD.size + 6,
    ]
    found = read_records(path, 2)
    assert (found.payloads, found.problem, found.highest) == ([b"bb", b"ccc"], None, 2)
    assert read_records(path, 1).payloads == [b"a"]
    reset_journal(path)
    assert path.read_bytes() == b""
    assert read_records(path, 2).highest == 0


def test_a_torn_tail_ends_the_reading(tmp_path: Path) -> None:
    path = tmp_path / "cursors.journal"
    append_record(path, 3, b"first")
    end = append_record(path, 3, b"second")
    for cut in (end - 1, end - len(b"second") - 2):  # in the payload, in the header
        path.write_bytes(path.read_bytes()[:cut])
        found = read_records(path, 3)
        assert found.payloads == [b"first"]
        assert found.problem is not None
        assert "short record" in found.problem


def test_a_damaged_record_ends_the_reading_there(tmp_path: Path) -> None:
    path = tmp_path / "cursors.journal"
    for payload in (b"one", b"two", b"three"):
        append_record(path, 5, payload)
    data = bytearray(path.read_bytes())
    data[JOURNAL_RECORD.size + 3 + JOURNAL_RECORD.size] ^= 0x01  # a bit of "two"
    path.write_bytes(bytes(data))
    found = read_records(path, 5)
    assert found.payloads == [b"one"]  # not "three" either: nothing after damage is trusted
    assert found.problem is not None
    assert "CRC" in found.problem
