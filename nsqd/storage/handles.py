"""A bounded LRU of open segment files, shared by every partition log of a process.

Each open segment costs descriptors: the active one its log and index fds, a sealed one a
read-only log fd kept between reads. With thousands of partitions that exceeds a usual
``ulimit -n``, so the logs register every open segment here and, once more than ``max_fds``
are open, the least recently used segments are closed; they reopen on their next use.

A segment is only touched under its log's lock, so closing it needs that lock too. Eviction
takes a victim's lock with a non-blocking acquire and skips segments whose log is busy (among
them every segment of the log asking, whose lock its thread already holds): the bound is
soft by the few segments in use at that moment (the next use of any segment closes them once
idle), and no thread ever waits for a lock while holding one (the victims' locks are all
taken without waiting), so there is no lock-order deadlock.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Protocol, final

__all__ = ["Evictable", "HandleCache"]


class Evictable(Protocol):
    """An open segment as the cache sees it."""

    def release(self) -> None:
        """Close the segment's fds without telling the cache (its owner's lock is held)."""


@final
class HandleCache:
    """The open segments, least recently used first, and the fds they hold."""

    def __init__(self, max_fds: int = 0) -> None:
        """``max_fds`` <= 0: no bound (nothing is ever closed early)."""
        self.max_fds = max_fds
        self._lock = threading.Lock()
        self._entries: OrderedDict[Evictable, tuple[threading.Lock, int]] = OrderedDict()
        self._open_fds = 0
        self.evictions = 0  # segments closed to stay under the bound, since the start

    @property
    def open_fds(self) -> int:
        """Descriptors held by the registered segments."""
        return self._open_fds

    def opened(self, segment: Evictable, owner: threading.Lock, fds: int) -> None:
        """Register ``segment``, which just opened ``fds`` descriptors (its owner's lock is
        held by the caller), then close least recently used segments while over the bound."""
        with self._lock:
            previous = self._entries.pop(segment, None)
            if previous is not None:
                self._open_fds -= previous[1]
            self._entries[segment] = (owner, fds)
            self._open_fds += fds
            if 0 < self.max_fds < self._open_fds:
                self._evict()

    def used(self, segment: Evictable) -> None:
        """Mark ``segment`` as the most recently used (no-op for an unregistered one), and
        close idle segments if still over the bound (some were busy at the last opening)."""
        with self._lock:
            if segment in self._entries:
                self._entries.move_to_end(segment)
            if 0 < self.max_fds < self._open_fds:
                self._evict()

    def closed(self, segment: Evictable) -> None:
        """Forget ``segment``: its owner closed its fds or took them over."""
        with self._lock:
            entry = self._entries.pop(segment, None)
            if entry is not None:
                self._open_fds -= entry[1]

    def _evict(self) -> None:
        """Close least recently used segments whose owner is idle until under the bound. The
        victims are found first, from the least recently used end, without copying the table
        (with thousands of partitions a copy per opening made creating them quadratic); the
        segments of one log share its lock, taken once."""
        excess = self._open_fds - self.max_fds
        victims: list[tuple[Evictable, int]] = []
        taken: dict[threading.Lock, None] = {}  # the owners' locks this eviction holds
        for segment, (owner, fds) in self._entries.items():
            if excess <= 0:
                break
            if owner not in taken:
                if not owner.acquire(blocking=False):
                    continue  # in use right now (maybe by the caller itself): not idle
                taken[owner] = None
            victims.append((segment, fds))
            excess -= fds
        try:
            for segment, fds in victims:
                del self._entries[segment]
                self._open_fds -= fds
                self.evictions += 1
                segment.release()
        finally:
            for owner in taken:
                owner.release()
