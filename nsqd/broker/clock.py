"""The one clock of an nsqd: every time the broker and the shells read goes through it.

Two readings: wall time in nanoseconds (message timestamps, in-flight and deferral deadlines,
retention, ``/stats``) and Trio's clock in seconds (timeouts, heartbeats, idle connections).
:meth:`Clock.trio_deadline` turns a wall-time deadline into a Trio deadline, so a channel's
timer sleeps on Trio's clock until a message's wall-time deadline.

:class:`VirtualClock` derives wall time from Trio's clock, so a test run under Trio's
``MockClock(autojump_threshold=0)`` (pytest-trio's ``autojump_clock`` fixture) sees
consistent virtual time everywhere: a 60 s message timeout passes in microseconds.
"""

from __future__ import annotations

import time

import trio

__all__ = ["Clock", "VirtualClock"]


class Clock:
    """Wall time from the system, Trio's clock for durations."""

    def now_ns(self) -> int:
        """Wall time, nanoseconds since the epoch."""
        return time.time_ns()

    def now(self) -> float:
        """Wall time, seconds since the epoch."""
        return self.now_ns() / 1e9

    def monotonic(self) -> float:
        """Trio's clock (seconds; only differences mean anything)."""
        return trio.current_time()

    def perf(self) -> float:
        """A fine-grained timer for latency histograms (seconds)."""
        return time.perf_counter()

    def trio_deadline(self, wall_ns: int) -> float:
        """The Trio deadline at which wall time reaches ``wall_ns``."""
        return self.monotonic() + max(0.0, (wall_ns - self.now_ns()) / 1e9)


class VirtualClock(Clock):
    """Wall time that moves with Trio's clock, from ``start_ns`` when Trio's clock reads 0."""

    def __init__(self, start_ns: int = 1_767_225_600 * 10**9) -> None:  # 2026-01-01
        self.start_ns = start_ns

    def now_ns(self) -> int:
        return self.start_ns + int(trio.current_time() * 1e9)

    def perf(self) -> float:
        return trio.current_time()
