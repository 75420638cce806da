"""A TCP listener on Trio that reports its bound port (``nursery.start``) when ready.

Nothing a peer does may end the accept loop: the peer's address comes from ``accept(2)`` itself
(``getpeername`` fails once the peer has reset), every handler runs under a guard that logs and
drops its connection's error, and running out of descriptors or buffers (``EMFILE``,
``ENFILE``, ``ENOBUFS``, ``ENOMEM``) pauses accepting with a growing back-off and one log line
per :data:`CAPACITY_LOG_INTERVAL` instead of a traceback per attempt.

Connections are accepted in bursts (up to :data:`ACCEPT_BURST` per wake-up, with non-blocking
``accept`` calls on the listening socket, as Go's accept loop does) rather than one per
scheduler round: when thousands of clients connect at once, one per round let the listen queue
overflow behind the new sessions' work, and every dropped SYN cost its client a retransmission
1 s (then 3 s, ...) later.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
from collections.abc import Awaitable, Callable

import trio

__all__ = ["ACCEPT_BURST", "CAPACITY_LOG_INTERVAL", "LISTEN_BACKLOG", "Handler", "serve_tcp"]

Handler = Callable[[trio.SocketStream, str], Awaitable[object]]
"""A connection handler: the stream and the peer as ``host:port``."""

LISTEN_BACKLOG = 65535  # as Go's net.Listen: the kernel clamps it to net.core.somaxconn
CAPACITY_LOG_INTERVAL = 10.0  # seconds between two "cannot accept" log lines
ACCEPT_BURST = 4096  # connections accepted per wake-up before letting the other tasks run
_BACKOFF_FIRST, _BACKOFF_MAX = 0.005, 1.0  # Go's http.Server back-off: 5 ms doubling to 1 s

# accept(2) errors that mean the process or system is out of a resource, not that the listener
# is broken: wait for connections to close and try again
_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
# errors about one connection that died in the queue: skip it
_CONNECTION_ERRNOS = frozenset(
    {errno.ECONNABORTED, errno.ECONNRESET, errno.EPROTO, errno.EPERM, errno.ENETDOWN}
)


async def serve_tcp(
    handler: Handler,
    host: str,
    port: int,
    *,
    log: logging.Logger,
    name: str = "TCP",
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Listen on ``host:port`` (port 0: any free port; host "": every interface), report the
    bound port, then run ``handler`` for each connection (one task each) until cancelled.
    Logs ``<name>: listening on <host>:<port>`` (an IPv6 host in brackets), as nsqd does."""
    try:
        listeners = await trio.open_tcp_listeners(port, host=host or None, backlog=LISTEN_BACKLOG)
    except OSError as exc:  # name the address, as Go's "listen (host:port) failed - ..." does
        shown_address = f"[{host}]:{port}" if ":" in host else f"{host or '0.0.0.0'}:{port}"
        raise OSError(exc.errno, f"listen ({shown_address}) failed - {exc.strerror}") from exc
    # plain non-blocking sockets: accept(2) without a scheduler round per connection
    sockets = [socket.socket(fileno=listener.socket.detach()) for listener in listeners]
    try:
        bound = sockets[0].getsockname()[1]
        shown = f"[{host}]" if ":" in host else host or "0.0.0.0"
        log.info("%s: listening on %s:%d", name, shown, bound)
        async with trio.open_nursery() as nursery:
            for listening in sockets:
                listening.setblocking(False)
                nursery.start_soon(_accept_loop, listening, handler, nursery, log, name)
            task_status.started(bound)
    finally:
        for listening in sockets:
            trio.lowlevel.notify_closing(listening)
            listening.close()


async def _accept_loop(
    listening: socket.socket,
    handler: Handler,
    nursery: trio.Nursery,
    log: logging.Logger,
    name: str,
) -> None:
    backoff = 0.0
    refused = 0  # accept attempts that failed for capacity since the last log line
    last_logged = -CAPACITY_LOG_INTERVAL
    while True:
        await trio.lowlevel.wait_readable(listening)
        for _ in range(ACCEPT_BURST):
            try:
                conn, address = listening.accept()
            except BlockingIOError:
                break  # the queue is empty: wait for the next connection
            except OSError as exc:
                if exc.errno in _CONNECTION_ERRNOS:
                    continue
                if exc.errno not in _CAPACITY_ERRNOS:
                    raise
                refused += 1
                now = trio.current_time()
                if now - last_logged >= CAPACITY_LOG_INTERVAL:
                    log.error(
                        "%s: cannot accept connections: %s (%d attempts since the last "
                        "report); backing off",
                        name,
                        os.strerror(exc.errno or 0),
                        refused,
                    )
                    last_logged, refused = now, 0
                backoff = min(max(backoff * 2, _BACKOFF_FIRST), _BACKOFF_MAX)
                await trio.sleep(backoff)
                break
            backoff = 0.0
            sock = trio.socket.from_stdlib_socket(conn)
            nursery.start_soon(_guarded, handler, sock, _remote(address), log)
        else:
            await trio.lowlevel.checkpoint()  # a full burst: let the new connections start


def _remote(address: object) -> str:
    """``host:port`` of an address as ``accept`` returns it, IPv6 in brackets (Go's
    ``net.JoinHostPort``)."""
    if isinstance(address, tuple) and len(address) >= 2:
        host, port = address[0], address[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(address)


async def _guarded(
    handler: Handler, sock: trio.socket.SocketType, remote: str, log: logging.Logger
) -> None:
    """Run one connection's handler; whatever it raises ends that connection only."""
    stream = trio.SocketStream(sock)
    try:
        await handler(stream, remote)
    except* (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, OSError) as g:
        log.debug("[%s] connection closed: %r", remote, g.exceptions)
    except* Exception:  # one connection's failure must not stop the listener: log it whole
        log.exception("[%s] closing after an unexpected error", remote)
    finally:
        # What aclose_forcefully() does for a socket, without its cancelled checkpoint: that
        # costs more than the close itself when thousands of peers leave at once.
        sock.close()
