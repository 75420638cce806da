"""What the lookupd client waits on: topics, channels or placements changed on this node.

Registrations go out when something changes, not on a timer: :meth:`Changes.notify` is called
wherever the broker adds or removes a topic or channel or applies lookupd's assignments, and
each lookupd connection waits with :meth:`Changes.wait_after` for a generation newer than the
one it registered.
"""

from __future__ import annotations

from trio.lowlevel import ParkingLot


class Changes:
    """A generation counter whose waiters wake on every increment."""

    def __init__(self) -> None:
        self.generation = 0
        self._waiters = ParkingLot()

    def notify(self) -> None:
        """Something a lookupd registration depends on changed."""
        self.generation += 1
        self._waiters.unpark_all()

    async def wait_after(self, generation: int) -> None:
        """Return once :attr:`generation` is past ``generation`` (callers bound the wait)."""
        while self.generation <= generation:
            await self._waiters.park()
