"""A publish's batch: encoded from its bodies, answered with records made when read."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from nsqd.storage.batch import AppendedBatch, BodyBatch, end_of, join, new_records
from nsqd.storage.bodies import encode_bodies
from nsqd.storage.record import NewRecord, Record, encode_run, internal_id_for
from nsqd.storage.stamp import Stamps, stamped, stamps

ID_BASE = internal_id_for(5, -1)  # partition 5's bits


def made(
    first: int, bodies: list[bytes], times: list[int] | None = None, at: int = 0, epoch: int = 3
) -> list[Record]:
    times = times or [7] * len(bodies)
    return [
        Record(offset, ts, ID_BASE | (offset + 1), 0, at, body, b"", epoch)
        for offset, ts, body in zip(range(first, first + len(bodies)), times, bodies, strict=True)
    ]


@given(
    first=st.integers(0, 2**40),
    at=st.integers(-(2**63), 2**63 - 1),
    epoch=st.integers(0, 2**32 - 1),
    pairs=st.lists(
        st.tuples(st.integers(-(2**63), 2**63 - 1), st.binary(max_size=40)),
        min_size=1,
        max_size=8,
    ),
)
def test_bodies_encode_as_their_records_would(
    first: int, at: int, epoch: int, pairs: list[tuple[int, bytes]]
) -> None:
    times, bodies = [ts for ts, _ in pairs], [body for _, body in pairs]
    assert encode_bodies(first, ID_BASE, times, at, epoch, bodies) == encode_run(
        made(first, bodies, times, at, epoch)
    )


def test_a_field_out_of_range_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="out of range"):
        encode_bodies(0, ID_BASE, [1], 0, 2**32, [b"x"])  # the epoch is a u32


def test_single_pubs_joined_keep_their_publish_times() -> None:
    one = BodyBatch(5, [b"a"], 0, [5])
    two = BodyBatch(6, [b"b", b"c"], 0, [6, 8])
    mpub = new_records(9, [b"d", b"e"])
    joined = join([one, two, mpub])
    assert list(joined) == [
        NewRecord(5, b"a"),
        NewRecord(6, b"b"),
        NewRecord(8, b"c"),
        NewRecord(9, b"d"),
        NewRecord(9, b"e"),
    ]
    assert join([two]) is two
    assert list(joined[1:3]) == [NewRecord(6, b"b"), NewRecord(8, b"c")]
    assert joined[1:3].timestamp_ns == 6
    assert list(mpub[1:]) == [NewRecord(9, b"e")]


@pytest.mark.parametrize("stamped_bodies", [False, True])
def test_the_end_of_an_appended_batch_is_its_last_records(stamped_bodies: bool) -> None:
    bodies = [b"a", b"bb", b"ccc"]
    exts = stamps(0xABC, 7, 3) if stamped_bodies else None
    batch = AppendedBatch(10, ID_BASE, [7] * 3, 0, 3, bodies, exts)
    last = batch.records()[-1]
    assert end_of(batch) == (last.internal_id, last.offset + 1, last.epoch) == end_of([last])
    assert end_of(batch[:2]) == end_of(batch.records()[:2])


def test_an_appended_batch_reads_as_the_list_of_its_records() -> None:
    bodies = [b"a", b"bb", b"ccc", b"dddd"]
    batch = AppendedBatch(10, ID_BASE, [7] * 4, 0, 3, bodies)
    records = made(10, bodies)
    assert len(batch) == 4
    assert batch == records
    assert records == batch
    assert list(batch) == records == batch.records()
    assert [batch[i] for i in range(-4, 4)] == records + records
    assert batch[1:3] == records[1:3]
    assert isinstance(batch[1:3], AppendedBatch)
    assert batch[::2] == records[::2]
    assert batch[-2:] == records[-2:]
    assert batch[5:] == []
    assert batch[1:][0].offset == 11  # a slice keeps its offsets
    assert batch != records[:3]
    assert batch != "abcd"
    with pytest.raises(IndexError):
        batch[4]
    with pytest.raises(TypeError):
        hash(batch)


@given(
    first=st.integers(0, 2**40),
    triples=st.lists(
        st.tuples(
            st.integers(0, 2**62),
            st.binary(max_size=30),
            # a producer stamp's size (packed with the header) among others
            st.one_of(st.binary(max_size=20), st.binary(min_size=17, max_size=17)),
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_bodies_with_exts_encode_as_their_records_would(
    first: int, triples: list[tuple[int, bytes, bytes]]
) -> None:
    times = [ts for ts, _, _ in triples]
    bodies = [body for _, body, _ in triples]
    exts = [ext for _, _, ext in triples]
    records = [
        Record(offset, ts, ID_BASE | (offset + 1), 0, 0, body, ext, 4)
        for offset, (ts, body, ext) in enumerate(triples, first)
    ]
    assert encode_bodies(first, ID_BASE, times, 0, 4, bodies, exts) == encode_run(records)
    appended = AppendedBatch(first, ID_BASE, times, 0, 4, bodies, exts)
    assert appended == records
    assert [appended[i] for i in range(len(records))] == records
    assert appended[1:] == records[1:]


U64 = st.integers(0, 2**64 - 1)


@given(
    first=st.integers(0, 2**40),
    runs=st.lists(
        st.tuples(
            U64,
            st.one_of(  # some runs cross a multiple of 2**32 (a stamp's head changes there)
                st.integers(0, 2**63 - 100), st.integers(1, 2**30).map(lambda k: (k << 32) - 2)
            ),
            st.lists(st.binary(max_size=30), max_size=5),
        ),
        min_size=1,
        max_size=4,
    ),
    large=st.booleans(),
)
def test_bodies_stamped_as_numbers_encode_and_read_as_their_records_would(
    first: int, runs: list[tuple[int, int, list[bytes]]], large: bool
) -> None:
    numbers = Stamps()
    bodies: list[bytes] = []
    exts: list[bytes] = []
    for producer, sequence, run in runs:
        numbers.add(producer, sequence, len(run))
        bodies += run
        exts += [stamped(producer, sequence + i) for i in range(len(run))]
    if large and bodies:  # a body past the one-copy checksum: the general loop
        bodies[0] = b"L" * 20_000
    times = list(range(len(bodies)))
    records = [
        Record(offset, ts, ID_BASE | (offset + 1), 0, 0, body, ext, 4)
        for offset, ts, body, ext in zip(
            range(first, first + len(bodies)), times, bodies, exts, strict=True
        )
    ]
    assert numbers == exts
    assert encode_bodies(first, ID_BASE, times, 0, 4, bodies, numbers) == encode_run(records)
    appended = AppendedBatch(first, ID_BASE, times, 0, 4, bodies, numbers)
    assert appended == records
    assert [appended[i] for i in range(len(records))] == records
    assert appended[1:] == records[1:]
    part = appended[1:]
    assert isinstance(part, AppendedBatch)
    assert isinstance(part.exts, Stamps)  # a slice keeps the numbers


def test_an_ext_too_long_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="out of range"):
        encode_bodies(0, ID_BASE, [1], 0, 0, [b"x"], [b"e" * 65536])


def test_stamped_bodies_keep_their_exts_when_joined_sliced_and_extended() -> None:
    stamped = BodyBatch(5, [b"a", b"b"], 0, [5, 6], [b"s1", b"s2"])
    plain = BodyBatch(7, [b"c"], 0, [7])
    joined = join([plain, stamped])
    assert list(joined) == [
        NewRecord(7, b"c"),
        NewRecord(5, b"a", ext=b"s1"),
        NewRecord(6, b"b", ext=b"s2"),
    ]
    assert list(joined[2:]) == [NewRecord(6, b"b", ext=b"s2")]
    assert join([plain, plain]).exts is None
    # a cached run grown by batches with and without exts reads back each record's own
    run = AppendedBatch(0, ID_BASE, [1], 0, 3, [b"p"])
    run.extend(AppendedBatch(1, ID_BASE, [2, 3], 0, 3, [b"q", b"r"], [b"x", b"y"]))
    run.extend(AppendedBatch(3, ID_BASE, [4], 0, 3, [b"s"]))
    assert [(r.offset, r.body, r.ext) for r in run] == [
        (0, b"p", b""),
        (1, b"q", b"x"),
        (2, b"r", b"y"),
        (3, b"s", b""),
    ]
    copy = run.copy()
    run.extend(AppendedBatch(4, ID_BASE, [5], 0, 3, [b"t"], [b"z"]))
    assert len(copy) == 4
    assert copy.exts == [b"", b"x", b"y", b""]


def test_stamps_kept_as_numbers_stay_numbers_until_a_run_mixes_kinds() -> None:
    first = Stamps()
    first.add(7, 10, 2)
    run = AppendedBatch(0, ID_BASE, [1, 2], 0, 3, [b"a", b"b"], first)
    second = Stamps()
    second.add(8, 0, 1)
    run.extend(AppendedBatch(2, ID_BASE, [3], 0, 3, [b"c"], second))
    assert isinstance(run.exts, Stamps)  # numbered after numbered: no stamp made as bytes
    copy = run.copy()
    assert isinstance(copy.exts, Stamps)
    assert copy.exts is not run.exts
    run.extend(AppendedBatch(3, ID_BASE, [4], 0, 3, [b"d"]))  # a plain run: exts as a list
    assert run.exts == [stamped(7, 10), stamped(7, 11), stamped(8, 0), b""]
    assert copy.exts == [stamped(7, 10), stamped(7, 11), stamped(8, 0)]  # its own lists
