"""The producer stamp at the head of a numbered record's ext."""

from __future__ import annotations

import tracemalloc

from hypothesis import given, strategies as st

from nsqd.storage.stamp import (
    STAMP_SIZE,
    Stamps,
    header_of,
    read_stamp,
    stamped,
    stamps,
    stamps_of,
)

U64 = st.integers(0, 2**64 - 1)


@given(producer=U64, first=st.integers(0, 2**63 - 100), count=st.integers(0, 20))
def test_a_runs_stamps_are_each_numbers_stamp(producer: int, first: int, count: int) -> None:
    run = stamps(producer, first, count)
    assert run == [stamped(producer, n) for n in range(first, first + count)]
    assert [read_stamp(ext) for ext in run] == [(producer, n) for n in range(first, first + count)]
    assert [run[i] for i in range(count)] == list(run)
    assert run[1:] == list(run)[1:]
    assert isinstance(run[1:], Stamps)


@given(runs=st.lists(st.tuples(U64, st.integers(0, 2**63 - 100), st.integers(0, 5)), max_size=5))
def test_stamps_of_several_runs_read_as_each_runs_stamps_in_turn(
    runs: list[tuple[int, int, int]],
) -> None:
    joined = Stamps()
    copy_before = joined.copy()
    expected: list[bytes] = []
    for producer, first, count in runs:
        part = stamps(producer, first, count)
        joined.extend(part)
        expected += [stamped(producer, n) for n in range(first, first + count)]
    assert joined == expected
    assert len(joined) == len(expected)
    assert copy_before == []  # a copy's lists are its own


@given(
    runs=st.lists(
        # first numbers near a multiple of 2**32 too: a run across it is stamped span by span
        st.tuples(
            U64, st.integers(0, 2**63 - 100) | st.integers(2**32 - 3, 2**32), st.integers(0, 5)
        ),
        max_size=6,
    )
)
def test_stamps_of_publishes_read_as_each_publishs_stamps_in_turn(
    runs: list[tuple[int, int, int]],
) -> None:
    made = stamps_of(runs)
    expected = [stamped(p, n) for p, first, count in runs for n in range(first, first + count)]
    assert made == expected
    assert len(made) == len(expected)
    heads, bottoms = made.columns()  # what the log packs with each record's header
    packed = [head + bottom.to_bytes(4, "big") for head, bottom in zip(heads, bottoms, strict=True)]
    assert packed == expected


def test_single_stamps_are_kept_without_an_object_each() -> None:
    """A turn's single PUBs leave their stamps in the tail cache for as long as it holds their
    records: a tuple and an int per stamp (~100 B, allocated at the append and freed cold at
    the eviction) cost more than the rest of numbering a PUB."""
    publishes = [(0x1234 + i % 16, 1_000 + i, 1) for i in range(10_000)]
    tracemalloc.start()
    try:
        made = stamps_of(publishes)
        kept, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(made) == 10_000
    assert made[9_999] == stamped(0x1234 + 9_999 % 16, 10_999)
    assert kept / len(made) < 40  # a list slot and two 8-byte integers a stamp, and slack


@given(producer=U64, sequence=st.integers(0, 2**63 - 1), header=st.binary(max_size=40))
def test_a_stamp_is_read_back_and_stripped_for_clients(
    producer: int, sequence: int, header: bytes
) -> None:
    ext = stamped(producer, sequence, b'{"k":' + header)
    assert len(ext) == STAMP_SIZE + 5 + len(header)
    assert read_stamp(ext) == (producer, sequence)
    assert header_of(ext) == b'{"k":' + header
    assert read_stamp(b'{"k":1}') is None
    assert header_of(b'{"k":1}') == b'{"k":1}'


@given(
    producer=U64, top=st.integers(0, 2**31 - 1), before=st.integers(0, 5), count=st.integers(0, 12)
)
def test_a_run_across_a_multiple_of_2_to_the_32_is_stamped_number_by_number(
    producer: int, top: int, before: int, count: int
) -> None:
    # a stamp's head carries its number's top half: a run crossing into the next one changes head
    first = (top << 32) - before if top else 0
    run = stamps(producer, first, count)
    assert list(run) == [stamped(producer, n) for n in range(first, first + count)]
    assert [read_stamp(ext) for ext in run] == [(producer, n) for n in range(first, first + count)]


@given(
    runs=st.lists(st.tuples(U64, st.integers(0, 2**63 - 100), st.integers(0, 5)), max_size=5),
    start=st.integers(-30, 30),
    stop=st.integers(-30, 30),
    step=st.sampled_from([None, 1, 2, -1]),
)
def test_stamps_index_and_slice_as_the_list_of_their_stamps(
    runs: list[tuple[int, int, int]], start: int, stop: int, step: int | None
) -> None:
    joined = Stamps()
    for producer, first, count in runs:
        joined.add(producer, first, count)
    expected = list(joined)
    assert len(joined) == len(expected)
    part = joined[start:stop:step]
    assert isinstance(part, Stamps)
    assert part == expected[start:stop:step]
    assert len(part) == len(expected[start:stop:step])
    for i in (start, stop):
        if -len(expected) <= i < len(expected):
            assert joined[i] == expected[i]
