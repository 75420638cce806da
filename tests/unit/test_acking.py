"""The broker's FIN run: cut into one cursor call per stretch of one partition's ids."""

from __future__ import annotations

import itertools

import hypothesis.strategies as st
from hypothesis import given

from nsqd.broker.acking import _stretches


@given(st.lists(st.integers(0, 3), max_size=30))
def test_a_fin_run_is_cut_into_one_stretch_per_partition_change(numbers: list[int]) -> None:
    stretches = _stretches(numbers)
    assert [n for n, start, end in stretches for _ in range(start, end)] == numbers
    ends = [end for _, _, end in stretches]
    assert [start for _, start, _ in stretches] == [0, *ends][: len(stretches)]
    assert all(a[0] != b[0] for a, b in itertools.pairwise(stretches))
