"""The process's memory in nsqd's terms: the ``memory`` block of ``/stats`` (Go's
``runtime.MemStats`` figures, with Python's nearest equivalents) and the collector pauses behind
its ``gc_pause_usec_*``."""

from __future__ import annotations

import gc
import os
import resource
import sys
import time
from collections import deque

__all__ = ["GC_PAUSES", "memory_stats"]


class _GCPauses:
    """The last 256 collection pauses (ns), as Go's ``MemStats.PauseNs``: a ``gc.callbacks``
    hook installed on first use."""

    def __init__(self) -> None:
        self.pauses: deque[int] = deque(maxlen=256)
        self._started = 0
        self._installed = False

    def install(self) -> None:
        if not self._installed:
            self._installed = True
            gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter_ns()
        elif self._started:
            self.pauses.append(time.perf_counter_ns() - self._started)


GC_PAUSES = _GCPauses()


def _percentile(perc: float, ordered: list[int]) -> int:
    """nsqd's ``percentile`` over a sorted list."""
    if not ordered:
        return 0
    index = min(int(perc / 100.0 * len(ordered) + 0.5), len(ordered) - 1)
    return ordered[index]


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:  # noqa: PTH123 - one tiny read
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # peak, not current


def memory_stats() -> dict[str, int]:
    """nsqd's ``memory`` block with Python's nearest equivalents: allocated blocks for heap
    objects, the resident set for heap in use, collector pauses and runs; 0 where Python has
    no counterpart (idle, released, next GC)."""
    GC_PAUSES.install()
    pauses = sorted(GC_PAUSES.pauses)
    return {
        "heap_objects": sys.getallocatedblocks(),
        "heap_idle_bytes": 0,
        "heap_in_use_bytes": _resident_bytes(),
        "heap_released_bytes": 0,
        "gc_pause_usec_100": _percentile(100.0, pauses) // 1000,
        "gc_pause_usec_99": _percentile(99.0, pauses) // 1000,
        "gc_pause_usec_95": _percentile(95.0, pauses) // 1000,
        "next_gc_bytes": 0,
        "gc_total_runs": sum(s["collections"] for s in gc.get_stats()),
    }
