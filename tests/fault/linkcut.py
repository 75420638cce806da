"""A TCP link on loopback that a fault test can cut and restore, as a network partition would.

``Link(target)`` listens on 127.0.0.1 (an ephemeral port: ``.port``, ``.address``) and forwards
every connection it accepts to ``target``. Give a daemon ``link.address`` in place of its peer's
real address and the link stands between them: ``cut()`` partitions them, ``restore()`` heals
the partition. One thread runs a selector loop over every socket; ``close()`` stops it.

What a cut does, as close to a real partition as a userspace proxy can honestly get:

* Existing connections: the link stops reading and writing both of their sockets and drops
  whatever it had buffered. It sends neither FIN nor RST. What the peers write stays in kernel
  buffers and is never delivered; once those fill (a few MB on loopback) the sender blocks, as
  it would while TCP retransmits into a partition. Bytes the link had already handed to a
  receiving socket before ``cut()`` returned may still arrive: they were past the cut point.
* New connections: accepted, then held in silence (nothing read, no upstream connection). In a
  real partition ``connect()`` would hang on an unanswered SYN; here it succeeds but nothing ever
  answers, so the peer's read or handshake timeout fires instead of its connect timeout.

``restore()`` resets (RST, both sides) every connection that existed during the cut, whether
opened before it or accepted during it: its data was lost mid-stream, and after a real partition
the peers' TCP would have timed it out with an error, never a clean end of stream. Connections
accepted after ``restore()`` are forwarded as usual. ``heal_after(seconds)`` cuts now and
restores on its own later.

Forwarding handles half-close (an end of stream is passed on with ``shutdown(SHUT_WR)`` once its
buffered bytes are out), buffers at most ``BUFFER_LIMIT`` bytes per direction per connection
(beyond that the link stops reading, so a slow reader slows the sender), and passes a reset on:
an error on either socket resets both. If the target refuses, the accepted connection is reset.
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from types import TracebackType

CHUNK = 64 * 1024  # largest single recv
BUFFER_LIMIT = 256 * 1024  # bytes held per direction per connection before reading pauses

# struct linger, for SO_LINGER
_LINGER = struct.Struct(
    "ii"  # l_onoff: 1 = linger on close; l_linger: seconds to linger (0 = reset at once)
)
_RESET = _LINGER.pack(1, 0)


class LinkError(Exception):
    """The link could not do what was asked."""


class LinkClosed(LinkError):
    """The link is closed."""


class LinkFailed(LinkError):
    """The link's loop stopped on an unexpected error (a bug in the link); see __cause__."""


def _reset(sock: socket.socket) -> None:
    """Close with RST instead of FIN."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
    sock.close()


class _Flow:
    """One direction of a connection: bytes read from ``src`` wait in ``buf`` for ``dst``."""

    __slots__ = ("buf", "dst", "eof", "shut", "src", "to_target")

    def __init__(self, src: socket.socket, dst: socket.socket, *, to_target: bool) -> None:
        self.src = src
        self.dst = dst
        self.to_target = to_target
        self.buf = bytearray()
        self.eof = False  # src has ended its stream
        self.shut = False  # ... and dst has been told (SHUT_WR)


class _Pipe:
    """One forwarded connection: the accepted client socket and its upstream socket."""

    __slots__ = ("client", "connecting", "down", "masks", "up", "upstream")

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.connecting = True
        self.up = _Flow(client, upstream, to_target=True)
        self.down = _Flow(upstream, client, to_target=False)
        self.masks: dict[socket.socket, int] = {client: 0, upstream: 0}  # registered events

    def reading_from(self, sock: socket.socket) -> _Flow:
        return self.up if sock is self.client else self.down

    def writing_to(self, sock: socket.socket) -> _Flow:
        return self.down if sock is self.client else self.up

    def wants(self, sock: socket.socket) -> int:
        if self.connecting:
            return selectors.EVENT_WRITE if sock is self.upstream else 0
        mask = 0
        inbound = self.reading_from(sock)
        if not inbound.eof and len(inbound.buf) < BUFFER_LIMIT:
            mask |= selectors.EVENT_READ
        if self.writing_to(sock).buf:
            mask |= selectors.EVENT_WRITE
        return mask

    @property
    def finished(self) -> bool:
        return self.up.shut and self.down.shut


class _Command:
    __slots__ = ("done", "error", "op")

    def __init__(self, op: Callable[[], None]) -> None:
        self.op = op
        self.done = threading.Event()
        self.error: BaseException | None = None


class Link:
    """A cuttable TCP forwarder from 127.0.0.1:``port`` to ``target``; starts at once."""

    def __init__(self, target: tuple[str, int]) -> None:
        family, _, _, _, sockaddr = socket.getaddrinfo(*target, type=socket.SOCK_STREAM)[0]
        self.target = target
        self._family = family
        self._sockaddr = sockaddr
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        # owned by the loop thread
        self._pipes: set[_Pipe] = set()
        self._held: list[socket.socket] = []  # sockets of connections caught by the cut
        self._cut = False
        self._heal_at: float | None = None
        self._stopping = False
        self._up = 0
        self._down = 0
        self._accepted = 0
        # shared, under _lock
        self._lock = threading.Lock()
        self._commands: list[_Command] = []
        self._stopped = False
        self._closed = False
        self._failure: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"linkcut:{self.port}->{target[0]}:{target[1]}", daemon=True
        )
        self._thread.start()

    # -- public API (any thread) ---------------------------------------------------------------

    @property
    def address(self) -> str:
        """``"127.0.0.1:PORT"``, the form the daemons' flags take."""
        return f"127.0.0.1:{self.port}"

    @property
    def bytes_up(self) -> int:
        """Bytes forwarded from clients to the target so far."""
        return self._up

    @property
    def bytes_down(self) -> int:
        """Bytes forwarded from the target to clients so far."""
        return self._down

    @property
    def accepted(self) -> int:
        """Connections accepted so far (forwarded or held)."""
        return self._accepted

    @property
    def is_cut(self) -> bool:
        return self._cut

    def cut(self) -> None:
        """Partition: once this returns, nothing more passes either way (see the module doc)."""
        self._call(self._do_cut)

    def restore(self) -> None:
        """Heal: reset the connections the cut caught; forward new ones again."""
        self._call(self._do_restore)

    def heal_after(self, seconds: float) -> None:
        """Cut now (if not already) and restore ``seconds`` from now, without further calls."""

        def op() -> None:
            self._do_cut()
            self._heal_at = time.monotonic() + seconds

        self._call(op)

    def close(self) -> None:
        """Stop the loop thread and close every socket; raises LinkFailed if the loop crashed."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        with contextlib.suppress(LinkError):
            self._call(self._do_stop, closing=True)
        self._thread.join()
        if self._failure is not None:
            raise LinkFailed("the link's loop crashed") from self._failure

    def __enter__(self) -> Link:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _call(self, op: Callable[[], None], *, closing: bool = False) -> None:
        """Run ``op`` on the loop thread and wait for it."""
        command = _Command(op)
        with self._lock:
            if self._stopped or (self._closed and not closing):
                if self._failure is not None:
                    raise LinkFailed("the link's loop crashed") from self._failure
                raise LinkClosed("link is closed")
            self._commands.append(command)
            with contextlib.suppress(BlockingIOError):  # full: a wake-up is pending anyway
                self._wake_w.send(b"\0")
        command.done.wait()
        if command.error is not None:
            raise command.error

    # -- loop thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stopping:
                timeout = None
                if self._heal_at is not None:
                    timeout = max(0.0, self._heal_at - time.monotonic())
                for key, mask in self._selector.select(timeout):
                    if key.fileobj is self._listener:
                        self._accept()
                    elif key.fileobj is self._wake_r:
                        self._run_commands()
                    else:
                        self._service(key.data, key.fileobj, mask)  # type: ignore[arg-type]
                if self._heal_at is not None and time.monotonic() >= self._heal_at:
                    self._do_restore()
        except BaseException as exc:  # noqa: BLE001 - raised again by close() and _call()
            self._failure = exc
        finally:
            self._shut_down()

    def _run_commands(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while self._wake_r.recv(4096):
                pass
        with self._lock:
            commands, self._commands = self._commands, []
        for command in commands:
            try:
                command.op()
            except Exception as exc:  # noqa: BLE001 - raised again in the caller's thread
                command.error = exc
            command.done.set()

    def _shut_down(self) -> None:
        with self._lock:
            self._stopped = True
            pending, self._commands = self._commands, []
        for command in pending:
            command.error = LinkClosed("link is closed")
            command.done.set()
        for pipe in self._pipes:
            pipe.client.close()
            pipe.upstream.close()
        self._pipes.clear()
        for sock in self._held:
            sock.close()
        self._held.clear()
        self._selector.close()
        self._listener.close()
        self._wake_r.close()
        self._wake_w.close()

    def _do_stop(self) -> None:
        self._stopping = True

    def _do_cut(self) -> None:
        self._heal_at = None
        self._cut = True
        for pipe in self._pipes:
            self._unregister(pipe)
            self._held += (pipe.client, pipe.upstream)  # buffered bytes go with the pipe
        self._pipes.clear()

    def _do_restore(self) -> None:
        self._heal_at = None
        self._cut = False
        for sock in self._held:
            _reset(sock)
        self._held.clear()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except BlockingIOError:
                return
            except ConnectionAbortedError:
                continue
            self._accepted += 1
            client.setblocking(False)
            if self._cut:
                self._held.append(client)
                continue
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            upstream = socket.socket(self._family, socket.SOCK_STREAM)
            upstream.setblocking(False)
            upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            err = upstream.connect_ex(self._sockaddr)
            if err not in (0, errno.EINPROGRESS):
                upstream.close()
                _reset(client)
                continue
            pipe = _Pipe(client, upstream)
            pipe.connecting = err == errno.EINPROGRESS
            self._pipes.add(pipe)
            self._refresh(pipe)

    def _service(self, pipe: _Pipe, sock: socket.socket, mask: int) -> None:
        if pipe not in self._pipes:  # ended (or cut) earlier in this batch of events
            return
        try:
            if pipe.connecting:
                err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    raise OSError(err, os.strerror(err))
                pipe.connecting = False
            else:
                if mask & selectors.EVENT_READ:
                    self._read(pipe.reading_from(sock))
                if mask & selectors.EVENT_WRITE:
                    self._pump(pipe.writing_to(sock))
        except OSError:
            self._unregister(pipe)
            self._pipes.discard(pipe)
            _reset(pipe.client)
            _reset(pipe.upstream)
            return
        if pipe.finished:
            self._unregister(pipe)
            self._pipes.discard(pipe)
            pipe.client.close()
            pipe.upstream.close()
        else:
            self._refresh(pipe)

    def _read(self, flow: _Flow) -> None:
        try:
            data = flow.src.recv(CHUNK)
        except BlockingIOError:
            return
        if data:
            flow.buf += data
        else:
            flow.eof = True
        self._pump(flow)

    def _pump(self, flow: _Flow) -> None:
        """Send what ``flow`` holds, as far as ``dst`` takes it; pass an end of stream on."""
        while flow.buf:
            try:
                sent = flow.dst.send(flow.buf)
            except BlockingIOError:
                return
            del flow.buf[:sent]
            if flow.to_target:
                self._up += sent
            else:
                self._down += sent
        if flow.eof and not flow.shut:
            flow.dst.shutdown(socket.SHUT_WR)
            flow.shut = True

    def _refresh(self, pipe: _Pipe) -> None:
        for sock in (pipe.client, pipe.upstream):
            want, have = pipe.wants(sock), pipe.masks[sock]
            if want == have:
                continue
            if have == 0:
                self._selector.register(sock, want, pipe)
            elif want == 0:
                self._selector.unregister(sock)
            else:
                self._selector.modify(sock, want, pipe)
            pipe.masks[sock] = want

    def _unregister(self, pipe: _Pipe) -> None:
        for sock, have in pipe.masks.items():
            if have:
                self._selector.unregister(sock)
                pipe.masks[sock] = 0
