"""The catch-up budget of a follower outside the in-sync set: a token bucket."""

from __future__ import annotations

import pytest

from nsqd.replication.stream import CatchUpBudget


def test_a_burst_of_one_second_then_the_rate() -> None:
    budget = CatchUpBudget(1000, now=0.0)
    assert budget.spend(600, now=0.0) == 0.0  # within the first second's burst
    assert budget.spend(900, now=0.0) == pytest.approx(0.5)  # 500 bytes over: half a second
    assert budget.spend(100, now=0.5) == pytest.approx(0.1)  # the debt was paid by then
    assert budget.spend(0, now=10.0) == 0.0  # idle: the bucket refills, never past a second
    assert budget.tokens == 1000
