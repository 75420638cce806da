"""A TCP listener on Trio that reports its bound port (``nursery.start``) when ready."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

__all__ = ["serve_tcp"]


async def serve_tcp(
    handler: Callable[[trio.SocketStream], Awaitable[object]],
    host: str,
    port: int,
    *,
    log: logging.Logger,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Listen on ``host:port`` (port 0: any free port; host "": every interface), report the
    bound port, then run ``handler`` for each connection (one task each) until cancelled."""
    listeners = await trio.open_tcp_listeners(port, host=host or None)
    bound = listeners[0].socket.getsockname()[1]
    log.info("TCP: listening on %s:%d", host or "0.0.0.0", bound)
    task_status.started(bound)
    await trio.serve_listeners(handler, listeners)
