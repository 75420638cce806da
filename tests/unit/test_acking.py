"""The broker's FIN run: cut into one cursor call per stretch of one partition's ids."""

from __future__ import annotations

import itertools

import hypothesis.strategies as st
from hypothesis import given

from nsqd.broker.acking import _stretches
from protocol.message import make_internal_id, partition_of

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
