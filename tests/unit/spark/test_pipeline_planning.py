"""The Spark source's offset planning, without Spark."""

from __future__ import annotations

import itertools
import json

import hypothesis.strategies as st
import pytest
from hypothesis import given

from pnsq.spark.planning import (
    OffsetRange,
    PartitionInfo,
    PlanningError,
    batch_start,
    check_data_loss,
    limit_end,
    next_batch_end,
    offsets_from_json,
    offsets_json,
    plan_ranges,
    resolve_offsets,
)

INFOS = {0: PartitionInfo(0, 10, 50), 1: PartitionInfo(1, 0, 7), 2: PartitionInfo(2, 5, 5)}


def test_offsets_json_has_string_keys_in_numeric_order() -> None:
    doc = offsets_json({10: 1, 2: 3, 1: 0})
    assert json.dumps(doc) == '{"1": 0, "2": 3, "10": 1}'
    assert offsets_from_json(doc) == {1: 0, 2: 3, 10: 1}
    assert offsets_from_json({"t": {"0": 4}}) == {0: 4}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("earliest", {0: 10, 1: 0, 2: 5}),
        ("latest", {0: 50, 1: 7, 2: 5}),
        ('{"0": 20}', {0: 20, 1: 0, 2: 5}),  # unnamed partitions take the default (earliest)
        ('{"0": -1, "1": -2}', {0: 50, 1: 0, 2: 5}),
        ('{"t": {"1": 3}}', {0: 10, 1: 3, 2: 5}),
    ],
)
def test_resolve_offsets(spec: str, expected: dict[int, int]) -> None:
    assert resolve_offsets(spec, INFOS, default="earliest") == expected


@pytest.mark.parametrize("spec", ["nonsense", '{"9": 1}', '{"0": -3}', '{"0": "x"}'])
def test_resolve_offsets_rejects(spec: str) -> None:
    with pytest.raises(PlanningError):
        resolve_offsets(spec, INFOS, default="earliest")


def test_latest_is_refused_where_not_allowed() -> None:
    with pytest.raises(PlanningError):
        resolve_offsets("latest", INFOS, default="earliest", allow_latest=False)


def test_data_loss_fails_or_skips() -> None:
    with pytest.raises(PlanningError, match="gone"):
        check_data_loss({0: 3}, INFOS, fail=True)
    assert check_data_loss({0: 3}, INFOS, fail=False) == {0: 10}


backlogs = st.dictionaries(st.integers(0, 7), st.integers(0, 1000), min_size=1, max_size=8)


@given(backlogs, st.integers(0, 3000) | st.none())
def test_limit_end_respects_the_cap_and_the_backlog(
    backlog: dict[int, int], cap: int | None
) -> None:
    start = {p: 100 * p for p in backlog}
    latest = {p: start[p] + n for p, n in backlog.items()}
    end = limit_end(start, latest, cap)
    taken = {p: end[p] - start[p] for p in start}
    assert all(0 <= taken[p] <= backlog[p] for p in start)
    total = sum(backlog.values())
    assert sum(taken.values()) == (total if cap is None else min(cap, total))


def test_limit_end_splits_by_backlog() -> None:
    assert limit_end({0: 0, 1: 0}, {0: 300, 1: 100}, 8) == {0: 6, 1: 2}


@given(backlogs, st.integers(1, 20))
def test_plan_ranges_cover_exactly_once(backlog: dict[int, int], min_partitions: int) -> None:
    start = dict.fromkeys(backlog, 10)
    end = {p: 10 + n for p, n in backlog.items()}
    infos = {p: PartitionInfo(p, 0, end[p], f"h{p}") for p in backlog}
    ranges = plan_ranges("t", start, end, infos, min_partitions)
    for p, n in backlog.items():
        mine = sorted((r for r in ranges if r.partition == p), key=lambda r: r.start)
        assert sum(r.count for r in mine) == n
        assert all(r.count > 0 and r.address == f"h{p}" for r in mine)
        assert all(a.end == b.start for a, b in itertools.pairwise(mine))
    if sum(backlog.values()) >= min_partitions:
        assert len(ranges) >= min(min_partitions, sum(backlog.values())) // 2


def test_plan_ranges_skips_empty_partitions() -> None:
    assert plan_ranges("t", {0: 5, 1: 3}, {0: 5, 1: 4}, {}) == [OffsetRange("t", 1, 3, 4)]


STREAM = {0: PartitionInfo(0, 10, 50), 1: PartitionInfo(1, 0, 7), 3: PartitionInfo(3, 4, 9)}


def test_next_batch_end_takes_all_or_a_capped_share() -> None:
    start = {0: 20, 1: 7}
    # partition 3 is new since the last batch: from its earliest offset
    assert next_batch_end(start, STREAM, max_rows=None) == {0: 50, 1: 7, 3: 9}
    capped = next_batch_end(start, STREAM, max_rows=7)
    assert capped == {0: 26, 1: 7, 3: 5}  # backlogs 30 and 5: 6 and 1
    assert list(capped) == sorted(capped)


def test_next_batch_end_stops_at_the_available_now_target() -> None:
    target = {0: 30, 1: 7}  # taken before partition 3 existed
    assert next_batch_end({0: 20, 1: 7}, STREAM, max_rows=None, target=target) == {
        0: 30,
        1: 7,
        3: 4,
    }
    assert next_batch_end({0: 30, 1: 7}, STREAM, max_rows=5, target=target) == {0: 30, 1: 7, 3: 4}


def test_next_batch_end_never_goes_back() -> None:
    # partition 2 vanished from the node; partition 1 was truncated below the checkpoint
    gone = {0: PartitionInfo(0, 0, 5), 1: PartitionInfo(1, 0, 3)}
    assert next_batch_end({0: 5, 1: 6, 2: 4}, gone, max_rows=None) == {0: 5, 1: 6, 2: 4}


def test_next_batch_end_counts_only_existing_rows_when_skipping_lost_ones() -> None:
    # offsets 0..9 of partition 0 are gone: with failOnDataLoss=false the cap buys real rows
    assert next_batch_end({0: 0}, {0: STREAM[0]}, max_rows=5) == {0: 5}
    lenient = next_batch_end({0: 0}, {0: STREAM[0]}, max_rows=5, fail_on_data_loss=False)
    assert lenient == {0: 15}


def test_batch_start() -> None:
    assert batch_start({0: 12}, {0: 20, 3: 9}, STREAM) == {0: 12, 3: 4}
    with pytest.raises(PlanningError, match="gone"):
        batch_start({0: 5}, {0: 20}, STREAM)
    assert batch_start({0: 5}, {0: 20}, STREAM, fail_on_data_loss=False) == {0: 10}
    assert batch_start({0: 5}, {0: 8}, STREAM, fail_on_data_loss=False) == {0: 8}
