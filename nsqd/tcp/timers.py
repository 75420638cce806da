"""A V2 connection's heartbeats and nsqd's deadlines, in one task per connection.

One task instead of a cancel scope per I/O call: no command for two heartbeat intervals, or one
send blocked for one interval (a client that stopped reading), closes the connection. IDENTIFY
restarts the ticker with its interval (:meth:`Timers.restart`); without heartbeats there is no
deadline.
"""

from __future__ import annotations

import logging
from typing import Protocol

import trio
from trio.lowlevel import ParkingLot

from protocol import frames

from ..broker.clock import Clock
from .output import OutputBuffer

log = logging.getLogger("nsqd.session")


class Reads(Protocol):
    """When the client last sent bytes (whoever read them: the command loop or the reactor)."""

    @property
    def last_read(self) -> float:
        """The clock's monotonic time of the last read that returned bytes."""
        ...


class Timers:
    """The heartbeat ticker and the read and write deadlines of one connection.

    Attributes:
        interval: the heartbeat interval in seconds (0: none, and no deadlines).
    """

    def __init__(
        self, output: OutputBuffer, clock: Clock, reads: Reads, remote_address: str, interval: float
    ) -> None:
        self.interval = interval
        self._output = output
        self._clock = clock
        self._reads = reads
        self._remote_address = remote_address
        self._lot = ParkingLot()  # the task waits here for its next deadline
        self._restarted = False  # IDENTIFY changed the heartbeat interval
        self._ended = False  # the client closed: the task returns

    def restart(self, interval: float) -> None:
        """Restart the heartbeat ticker and the read deadline with ``interval`` (IDENTIFY)."""
        self.interval = interval
        self._restarted = True
        self._lot.unpark_all()

    def stop(self) -> None:
        """The connection is ending: the task returns (without being cancelled)."""
        self._ended = True
        self._lot.unpark_all()

    async def run(self, cancel_scope: trio.CancelScope) -> None:
        """Send heartbeats until :meth:`stop`; cancel ``cancel_scope`` when a deadline passes."""
        next_beat: float | None = None  # when the next heartbeat is due (None: start ticking)
        reads, output = self._reads, self._output
        while not self._ended:
            now = self._clock.monotonic()
            if self._restarted:
                self._restarted = False
                next_beat = None
            interval = self.interval
            if not interval:
                await self._lot.park()  # until IDENTIFY or the end
                continue
            if next_beat is None:
                next_beat = now + interval
            elif now >= next_beat:
                output.write(frames.HEARTBEAT)
                next_beat = now + interval
            if now >= reads.last_read + 2 * interval:
                log.info("[%s] closing: no command for %.1fs", self._remote_address, 2 * interval)
                cancel_scope.cancel()
                return
            started = output.send_started
            if started is not None and now >= started + interval:
                log.info("[%s] closing: write blocked for %.1fs", self._remote_address, interval)
                cancel_scope.cancel()
                return
            with trio.move_on_at(min(next_beat, reads.last_read + 2 * interval)):
                await self._lot.park()
