"""nsqd.core.latency: the two half-window buckets (nsqd's internal/quantile) and the quantiles."""

from __future__ import annotations

from nsqd.core.latency import SAMPLE_CAPACITY, LatencyResult, LatencyWindow, aggregate

S = 1_000_000_000  # one second in ns
Q = (0.99, 0.5)


def test_nearest_rank_quantiles_and_count() -> None:
    window = LatencyWindow(Q, 10 * S, now_ns=0)
    for value in range(1, 101):
        window.insert(value, now_ns=1)
    assert window.result(2) == LatencyResult(100, ((0.99, 99), (0.5, 50)))


def test_empty_window_answers_zero_as_perks() -> None:
    assert LatencyWindow(Q, 10 * S, 0).result(5) == LatencyResult(0, ((0.99, 0), (0.5, 0)))


def test_old_half_window_is_forgotten() -> None:
    window = LatencyWindow(Q, 10 * S, now_ns=0)
    window.insert(1000, now_ns=1 * S)  # first half
    window.insert(5, now_ns=6 * S)  # second half: both still count
    assert window.result(6 * S).count == 2
    assert window.result(12 * S).count == 1  # the first half window was cleared
    assert window.result(12 * S).percentiles == ((0.99, 5), (0.5, 5))
    assert window.result(60 * S).count == 0  # idle for a whole window: nothing left


def test_reservoir_keeps_the_count_exact_and_the_samples_bounded() -> None:
    window = LatencyWindow((0.5,), 10 * S, now_ns=0)
    total = SAMPLE_CAPACITY * 3
    for value in range(total):
        window.insert(value, now_ns=1)
    count, samples = window.snapshot(2)
    assert count == total
    assert len(samples) == SAMPLE_CAPACITY
    median = window.result(2).percentiles[0][1]
    assert abs(median - total / 2) < total * 0.05  # a uniform sample's median


def test_aggregate_merges_channels() -> None:
    a, b = LatencyWindow(Q, 10 * S, 0), LatencyWindow(Q, 10 * S, 0)
    for value in (1, 2, 3):
        a.insert(value, 1)
    b.insert(100, 1)
    assert aggregate(Q, [a, b], 2) == LatencyResult(4, ((0.99, 100), (0.5, 2)))
    assert aggregate(Q, [], 2) == LatencyResult(0, ((0.99, 0), (0.5, 0)))
