"""nsqd/core/offset_runs.py: a set of offsets written as offsets alone and runs, read back the
same; the runs found by C-level passes over the sorted offsets."""

from __future__ import annotations

from hypothesis import given, strategies as st

from nsqd.core import offset_runs
from nsqd.core.cursor import PartitionCursor
from tests.unit.nsqd.core.test_cursor import Rec


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


_OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 120)),
        st.tuples(st.just("range"), st.tuples(st.integers(0, 120), st.integers(0, 30))),
        st.tuples(st.just("drop"), st.integers(0, 120)),
    ),
    max_size=40,
)


@given(start=st.sets(st.integers(0, 120)), operations=_OPERATIONS)
def test_runs_kept_as_they_grow_are_the_runs_of_the_set(
    start: set[int], operations: list[tuple[str, object]]
) -> None:
    """Adding offsets and ranges, and dropping what is under an offset, keeps the runs
    :func:`split` finds in the same set."""
    model = set(start)
    runs = offset_runs.Runs.of(start)
    for kind, value in operations:
        if kind == "add":
            assert isinstance(value, int)
            model.add(value)
            runs.add(value)
        elif kind == "range":
            assert isinstance(value, tuple)
            first, count = value
            model.update(range(first, first + count))
            runs.add(range(first, first + count))
        else:
            assert isinstance(value, int)
            model = {o for o in model if o >= value}
            runs.drop_below(value)
        assert runs.parts() == offset_runs.split(model)
        assert len(runs) == len(model)
        assert all((o in runs) == (o in model) for o in range(-1, 152))


_LOG = [Rec(i) for i in range(200)]


def _fetch(offset: int, count: int, _max_bytes: int | None) -> list[Rec]:
    return _LOG[offset : offset + count]


@given(
    fins=st.permutations(range(200)),
    checkpoints=st.sets(st.integers(0, 199), max_size=8),
    whole=st.booleans(),
)
def test_a_cursors_checkpoint_keeps_its_runs_as_fins_come(
    fins: list[int], checkpoints: set[int], whole: bool
) -> None:
    """Two hundred messages delivered and FINed in any order (one by one, or the first half
    as one run of offsets), with checkpoints in between: every checkpoint writes the runs
    :func:`~nsqd.core.offset_runs.split` finds in the FINs above the confirmed offset."""
    cursor = PartitionCursor(0, 0)
    cursor.start_flights(cursor.take(_fetch, 200, 0, len(_LOG)), "a", 10**12, 0)
    expected = {"confirmed": 0, "acked": []}
    assert cursor.checkpoint() == expected  # the runs are kept from here on
    if whole:
        cursor.finish_run(range(100, 150), "a")
        fins = [f for f in fins if not 100 <= f < 150]
    for index, offset in enumerate(fins):
        cursor.finish(offset, "a")
        if index in checkpoints:
            alone, runs = offset_runs.split(o for o in cursor.acked if o >= cursor.confirmed)
            written = cursor.checkpoint()
            assert written["confirmed"] == cursor.confirmed
            assert written["acked"] == alone
            assert written.get("runs", []) == runs
    assert cursor.checkpoint() == {"confirmed": 200, "acked": []}


def test_a_cursor_moved_or_mirrored_makes_its_runs_anew() -> None:
    """Skipping ahead, seeking and mirroring a leader take FINs away: the next checkpoint's
    runs are those of what is left."""
    cursor = PartitionCursor(0, 0)
    cursor.start_flights(cursor.take(_fetch, 200, 0, len(_LOG)), "a", 10**12, 0)
    for offset in (*range(10, 20), *range(30, 40), 50):
        cursor.finish(offset, "a")
    assert cursor.checkpoint() == {"confirmed": 0, "acked": [50], "runs": [[10, 20], [30, 40]]}
    cursor.skip_to(35)  # retention took what is below 35
    assert cursor.checkpoint() == {"confirmed": 40, "acked": [50]}
    cursor.mirror(60, [(61, 0), (62, 0), (70, 0)])
    assert cursor.checkpoint() == {"confirmed": 60, "acked": [70], "runs": [[61, 63]]}
    cursor.seek(100)
    assert cursor.checkpoint() == {"confirmed": 100, "acked": []}
