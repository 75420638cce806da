"""nsqd/core/offset_runs.py: a set of offsets written as offsets alone and runs, read back the
same; the runs found by C-level passes over the sorted offsets."""

from __future__ import annotations

from hypothesis import given, strategies as st

from nsqd.core import offset_runs


def test_runs_of_two_or_more_and_the_offsets_alone() -> None:
    alone, runs = offset_runs.split({9, 3, 4, 5, 7, 12, 13})
    assert alone == [7, 9]
    assert runs == [[3, 6], [12, 14]]
    assert offset_runs.split(set()) == ([], [])
    assert offset_runs.split(range(1_000_000, 1_080_000)) == ([], [[1_000_000, 1_080_000]])


@given(st.sets(st.integers(0, 300)))
def test_split_then_expand_is_the_same_set(offsets: set[int]) -> None:
    alone, runs = offset_runs.split(offsets)
    assert sorted(offset_runs.expand(alone, runs)) == sorted(offsets)
    assert offset_runs.valid(runs)
    for offset in range(-1, 302):
        assert (offset in alone or offset_runs.contains(runs, offset)) == (offset in offsets)


def test_only_runs_of_the_written_shape_are_valid() -> None:
    assert offset_runs.valid([[1, 3], [5, 6]])
    assert not offset_runs.valid([[3, 3]])  # empty
    assert not offset_runs.valid([[1, 2, 3]])
    assert not offset_runs.valid([[-1, 2]])
    assert not offset_runs.valid([[True, 2]])
    assert not offset_runs.valid({"a": 1})
