"""The broker's FIN run: cut into one cursor call per stretch of one partition's ids."""

from __future__ import annotations

import itertools

import hypothesis.strategies as st
from hypothesis import given

from nsqd.broker.acking import _offset_runs, _stretches
from protocol.message import SEQUENCE_MASK, make_internal_id, partition_of

ids_st = st.one_of(
    st.builds(make_internal_id, st.integers(0, 3), st.integers(1, 2**50 - 1)),
    st.integers(0, 2**64 - 1),  # what a client may send: any bits above the partition's
)


@given(st.lists(ids_st, max_size=30))
def test_a_fin_run_is_cut_into_one_stretch_per_partition_change(ids: list[int]) -> None:
    stretches = _stretches(ids)
    assert [n for n, start, end in stretches for _ in range(start, end)] == [
        partition_of(i) for i in ids
    ]
    ends = [end for _, _, end in stretches]
    assert [start for _, start, _ in stretches] == [0, *ends][: len(stretches)]
    assert all(a[0] != b[0] for a, b in itertools.pairwise(stretches))


def test_one_partitions_run_is_one_stretch() -> None:
    ids = [make_internal_id(5, s) for s in (9, 3, 2**50 - 1, 1)]
    assert _stretches(ids) == [(5, 0, 4)]
    assert _stretches([make_internal_id(5, 1), make_internal_id(6, 1)]) == [(5, 0, 1), (6, 1, 2)]
    assert _stretches([]) == []


def _runs_st() -> st.SearchStrategy[list[int]]:
    """One partition's FIN ids: consecutive stretches (FINs in delivery order), repeats, jumps."""
    stretch = st.tuples(st.integers(1, 2**50 - 60), st.integers(1, 50)).map(
        lambda t: [make_internal_id(2, s) for s in range(t[0], t[0] + t[1])]
    )
    single = st.integers(1, 2**50 - 1).map(lambda s: [make_internal_id(2, s)])
    return st.lists(st.one_of(stretch, single), max_size=6).map(
        lambda parts: list(itertools.chain.from_iterable(parts))
    )


@given(_runs_st(), st.data())
def test_a_stretch_is_cut_into_pieces_with_the_same_offsets(
    ids: list[int], data: st.DataObject
) -> None:
    start = data.draw(st.integers(0, len(ids)))
    end = data.draw(st.integers(start, len(ids)))
    pieces = _offset_runs(ids, start, end)
    assert [o for _, offsets in pieces for o in offsets] == [
        (i & SEQUENCE_MASK) - 1 for i in ids[start:end]
    ]
    firsts = [first for first, _ in pieces]
    assert (
        firsts
        == list(itertools.accumulate([start] + [len(o) for _, o in pieces[:-1]]))[: len(pieces)]
    )


def test_a_run_in_delivery_order_is_one_range() -> None:
    ids = [make_internal_id(1, s) for s in range(11, 2_011)]
    assert _offset_runs(ids, 0, len(ids)) == [(0, range(10, 2_010))]
    # one jump (the connection's next batch): a few ranges, no list of 2,000 offsets
    jumped = ids[:1_500] + [make_internal_id(1, s) for s in range(5_011, 5_511)]
    pieces = _offset_runs(jumped, 0, len(jumped))
    assert all(isinstance(offsets, range) for _, offsets in pieces)
    assert len(pieces) <= 2 * 12
