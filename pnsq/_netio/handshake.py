"""The cluster handshake (:mod:`protocol.cluster_auth`) on a Trio stream: a deadline, so that a
silent peer holds nothing open, and a log of failures that says at most once a minute per peer
address why a peer was turned away (a stranger retrying in a loop must not flood the log)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from protocol.cluster_auth import Handshake, HandshakeError

__all__ = [
    "HANDSHAKE_TIMEOUT",
    "FailureLog",
    "listen_handshake",
    "peer_host",
    "refuse",
    "run_handshake",
    "unlogged_since",
]

#: seconds a handshake may take, both sides together (two round trips on a healthy link)
HANDSHAKE_TIMEOUT = 3.0
READ_SIZE = 4096
#: seconds between two log lines about failed handshakes with one peer address
FAILURE_LOG_INTERVAL = 60.0
#: seconds a refused peer's unread bytes are read and dropped after its one error
LINGER = 1.0


async def run_handshake(stream: trio.abc.Stream, shake: Handshake, initial: bytes = b"") -> bytes:
    """Run ``shake`` to completion over ``stream`` (``initial``: bytes already received);
    return the bytes received after it (the link's protocol starts there).

    Raises:
        HandshakeError: the peer broke the exchange, proved wrong, refused, or closed.
        trio.TooSlowError: not done within :data:`HANDSHAKE_TIMEOUT` seconds.
        trio.BrokenResourceError: the connection broke.
    """
    with trio.fail_after(HANDSHAKE_TIMEOUT):
        if initial:
            shake.receive_data(initial)
        while True:
            out = shake.data_to_send()
            if out:
                await stream.send_all(out)
            if shake.done:
                return shake.unused()
            data = await stream.receive_some(READ_SIZE)
            if not data:
                raise HandshakeError("the peer closed the connection during the handshake")
            shake.receive_data(data)


async def listen_handshake(
    stream: trio.abc.Stream, shake: Handshake, initial: bytes = b""
) -> tuple[str, bytes]:
    """The listener's :func:`run_handshake`: the identity the dialer proved and the bytes
    received after the handshake.

    Raises:
        HandshakeError: the dialer failed in any way (a broken exchange, a wrong proof, no
            handshake in time, a broken connection); ``str()`` is the reason to refuse it with.
    """
    try:
        rest = await run_handshake(stream, shake, initial)
    except (HandshakeError, trio.TooSlowError, trio.BrokenResourceError) as exc:
        raise HandshakeError(str(exc) or "no handshake in time") from exc
    assert shake.peer_identity is not None
    return shake.peer_identity, rest


async def refuse(stream: trio.abc.Stream, data: bytes) -> None:
    """Send a refused peer its one error, then half-close and drop what it still sends for at
    most :data:`LINGER` seconds: closing a socket with unread bytes makes the kernel reset the
    connection, and a reset may reach the peer before the error does. A peer already gone gets
    nothing (there is no one to tell)."""
    try:
        await stream.send_all(data)
        if isinstance(stream, trio.abc.HalfCloseableStream):
            await stream.send_eof()
        with trio.move_on_after(LINGER):
            while await stream.receive_some(READ_SIZE):
                pass
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return


def peer_host(remote: str) -> str:
    """The host of a ``host:port`` peer address: a peer's every connection comes from a new
    port, and its failures are one peer's."""
    host, sep, port = remote.rpartition(":")
    return host if sep and port.isdigit() else remote


def unlogged_since(unlogged: int, what: str = "") -> str:
    """The end of a line logged after ``unlogged`` failures were not (:meth:`FailureLog.due`):
    `` (N more[ what] since the last report)``, or nothing when none were left out."""
    if not unlogged:
        return ""
    return f" ({unlogged} more{' ' + what if what else ''} since the last report)"


class FailureLog:
    """Failed handshakes, logged at most once per :data:`FAILURE_LOG_INTERVAL` per address
    (the next line counts the failures not logged since)."""

    def __init__(
        self,
        log: logging.Logger,
        clock: Callable[[], float],
        interval: float = FAILURE_LOG_INTERVAL,
    ) -> None:
        self._log = log
        self._clock = clock
        self._interval = interval
        self._last: dict[str, tuple[float, int]] = {}  # address: (logged at, failures since)

    def failed(self, address: str, reason: str) -> None:
        """Record a failed handshake with ``address``; log it unless one was logged lately."""
        unlogged = self.due(address)
        if unlogged is None:
            return
        more = unlogged_since(unlogged)
        self._log.warning("cluster handshake with %s failed: %s%s", address, reason, more)

    def due(self, address: str) -> int | None:
        """Record one failure of ``address``: when it is to be logged (none was within the
        interval), how many were not logged since the last line; None when it is not."""
        now = self._clock()
        if len(self._last) > 10_000:  # forget old addresses (a scan of many sources)
            self._last = {a: v for a, v in self._last.items() if now - v[0] < self._interval}
        logged_at, unlogged = self._last.get(address, (float("-inf"), 0))
        if now - logged_at < self._interval:
            self._last[address] = (logged_at, unlogged + 1)
            return None
        self._last[address] = (now, 0)
        return unlogged
