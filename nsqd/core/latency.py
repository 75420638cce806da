"""End-to-end processing latency quantiles over a moving time window, as nsqd's
``--e2e-processing-latency-percentile`` / ``--e2e-processing-latency-window-time`` measure them:
at each FIN, now minus the message's publish timestamp (nanoseconds).

Go's nsqd (``internal/quantile``) keeps two quantile streams (bmizerany/perks, targeted
quantiles), each covering half the window: every half window the older one is cleared and
becomes the current one, and a query merges both, so a result covers between half and all of
the window. :class:`LatencyWindow` keeps the same two half-window buckets, but each bucket holds
the samples themselves rather than a perks summary: exact while a half window has at most
:data:`SAMPLE_CAPACITY` FINs, past that a uniform reservoir sample of them (Vitter's algorithm
R), from which the quantiles are read by nearest rank. ``count`` is always the exact number of
FINs in the window. Pure: time is passed in, the reservoir's random choices come from a seeded
generator.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["SAMPLE_CAPACITY", "LatencyResult", "LatencyWindow", "aggregate"]

#: samples kept per half window (exact quantiles up to this many FINs per half window)
SAMPLE_CAPACITY = 8192


@dataclass(frozen=True, slots=True)
class LatencyResult:
    """FINs in the window and, per configured quantile (largest first), its latency in ns."""

    count: int
    percentiles: tuple[tuple[float, int], ...]


class _Bucket:
    __slots__ = ("count", "samples")

    def __init__(self) -> None:
        self.count = 0
        self.samples: list[int] = []

    def insert(self, value: int, rng: random.Random) -> None:
        self.count += 1
        if len(self.samples) < SAMPLE_CAPACITY:
            self.samples.append(value)
            return
        slot = rng.randrange(self.count)
        if slot < SAMPLE_CAPACITY:
            self.samples[slot] = value


class LatencyWindow:
    """One channel's latencies over the last ``window_ns`` (see the module docstring)."""

    def __init__(self, percentiles: Sequence[float], window_ns: int, now_ns: int) -> None:
        self.percentiles = tuple(percentiles)
        self.half_ns = max(1, window_ns // 2)
        self.moved_ns = now_ns  # when the current bucket became current
        self.buckets = (_Bucket(), _Bucket())
        self.current = 0
        self._rng = random.Random(0x6E737164)  # noqa: S311 - sampling, not security

    def _advance(self, now_ns: int) -> None:
        if now_ns > self.moved_ns + 2 * self.half_ns:  # idle for a whole window: start over
            self.buckets = (_Bucket(), _Bucket())
            self.moved_ns = now_ns
            return
        while now_ns > self.moved_ns + self.half_ns:
            self.current ^= 1
            self.moved_ns += self.half_ns
            buckets = list(self.buckets)
            buckets[self.current] = _Bucket()
            self.buckets = (buckets[0], buckets[1])

    def insert(self, latency_ns: int, now_ns: int) -> None:
        """One FIN, ``latency_ns`` after its message was published."""
        self._advance(now_ns)
        self.buckets[self.current].insert(max(0, latency_ns), self._rng)

    def snapshot(self, now_ns: int) -> tuple[int, list[int]]:
        """(FINs in the window, the samples kept of them)."""
        self._advance(now_ns)
        first, second = self.buckets
        return first.count + second.count, first.samples + second.samples

    def result(self, now_ns: int) -> LatencyResult:
        """The window's count and quantiles at ``now_ns``."""
        return aggregate(self.percentiles, [self], now_ns)


def aggregate(
    percentiles: Sequence[float], windows: Iterable[LatencyWindow], now_ns: int
) -> LatencyResult:
    """The quantiles over every window's samples together (a topic's result over its channels,
    as nsqd merges its channels' streams); a quantile of no samples is 0, as perks answers."""
    count = 0
    samples: list[int] = []
    for window in windows:
        n, kept = window.snapshot(now_ns)
        count += n
        samples.extend(kept)
    samples.sort()
    return LatencyResult(count, tuple((q, _nearest_rank(samples, q)) for q in percentiles))


def _nearest_rank(ordered: Sequence[int], quantile: float) -> int:
    if not ordered:
        return 0
    rank = math.ceil(quantile * len(ordered))
    return ordered[min(len(ordered), max(1, rank)) - 1]
