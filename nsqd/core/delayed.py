"""A partition's DPUB'd records not due yet, so each channel can count the ones it has not read
as deferred rather than as depth (nsqd defers a DPUB in every channel at once).

Pure: no I/O and no clock; times are wall-clock nanoseconds passed in.
"""

from __future__ import annotations

import bisect


class DelayedIndex:
    """A partition's DPUB'd records not due yet: ``(offset, due_ns)`` in offset order, so a
    channel can count the ones it has not read as deferred (nsqd defers a DPUB in every
    channel at once) rather than as depth. Due entries are dropped as time passes."""

    __slots__ = ("_entries", "_pruned_at")

    def __init__(self) -> None:
        self._entries: list[tuple[int, int]] = []
        self._pruned_at = 0  # length after the last prune

    def add(self, offset: int, due_ns: int, now_ns: int) -> None:
        """A record at ``offset`` is not to be delivered before ``due_ns``."""
        self._entries.append((offset, due_ns))
        if len(self._entries) > 2 * self._pruned_at + 64:
            self.prune(now_ns)

    def prune(self, now_ns: int) -> None:
        """Forget the entries due by ``now_ns``."""
        self._entries = [e for e in self._entries if e[1] > now_ns]
        self._pruned_at = len(self._entries)

    def not_due(self, start: int, end: int, now_ns: int) -> list[int]:
        """Offsets in ``[start, end)`` not due at ``now_ns``."""
        entries = self._entries
        i = bisect.bisect_left(entries, (start, -1))
        out = []
        while i < len(entries) and entries[i][0] < end:
            if entries[i][1] > now_ns:
                out.append(entries[i][0])
            i += 1
        return out
