"""A V2 connection's side of the publish reactor (:mod:`nsqd.tcp.reactor`).

:class:`ReactorSide` is a base of :class:`~nsqd.tcp.session.Session`: while the connection
only publishes single PUBs, its command loop waits in the reactor, which reads and parses for
it through these methods; whatever the reactor leaves (:attr:`ReactorSide.handed`, or PUBs
still gathered) the command loop takes up exactly where the reactor stopped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pnsq._netio.plain_stream import PlainSocketStream
from protocol import NEED_DATA, CommandParser, Pub

from ..broker.clock import Clock
from .errors import HANDLED_ERRORS
from .output import OutputBuffer
from .publishing import Publisher
from .reactor import PublishReactor, Read, Taken
from .settings import RECEIVE_SIZE

if TYPE_CHECKING:
    import trio

    from ..broker import Channel
    from .auth import SessionAuth


class ReactorSide:
    """What the reactor calls on a connection (set up by :meth:`_init_reactor_side`)."""

    # the connection's own, set by Session
    stream: trio.abc.Stream
    parser: CommandParser
    publisher: Publisher
    output: OutputBuffer
    clock: Clock
    channel: Channel | None
    auth: SessionAuth | None
    _socket: trio.socket.SocketType | None
    _last_read: float

    def _init_reactor_side(self, reactor: PublishReactor | None) -> None:
        self._reactor = reactor
        #: the connection published a single PUB: the reactor may serve it from now on
        self.publishes = False
        #: its PUBs had to wait (followers, fsync, a forward): its own task serves it
        self.reactor_declined = False
        #: what the reactor left for the command loop: a command, or an error to raise
        self.handed: object = None
        self.at_eof = False  # the reactor read the peer's EOF

    def _serving_reactor(self) -> PublishReactor | None:
        """The reactor to wait in for the next command, if it serves this connection: a plain
        one that has published single PUBs that were acknowledged at once, with no subscription
        and no AUTH to check."""
        reactor = self._reactor
        if (
            reactor is not None
            and reactor.running
            and self.publishes
            and not self.reactor_declined
            and self.channel is None
            and self.auth is None
            and type(self.stream) is PlainSocketStream
        ):
            return reactor
        return None

    def fileno(self) -> int:
        assert self._socket is not None
        return self._socket.fileno()

    def reactor_read(self) -> Taken | Read:
        """Read and parse what the socket holds: PUBs for one target that acknowledges at
        once are taken for the reactor's append; anything else is left for the command loop."""
        assert isinstance(self.stream, PlainSocketStream)
        data = self.stream.receive_nowait(RECEIVE_SIZE)
        if data is None:
            return Read.WAIT
        if not data:
            self.at_eof = True
            return Read.HAND_OVER
        self._last_read = self.clock.monotonic()
        parser, publisher = self.parser, self.publisher
        parser.receive_data(data)
        while True:
            command = parser.next_event()  # a protocol error: the loop raises it
            if isinstance(command, Pub):
                publisher.gather(command)
            elif command is NEED_DATA:
                break
            else:
                self.handed = command
                return Read.HAND_OVER
        if not publisher.gathering:
            return Read.WAIT
        taken = publisher.take_gathered()
        if taken is None:
            # PUBs that must wait (followers, fsync, a forward): its own task serves it from
            # now on; PUBs for several targets, or a new topic, go to the task this once
            self.reactor_declined = publisher.keeps_waiting()
            return Read.HAND_OVER
        return taken

    def reactor_acked(self, topic: str, count: int) -> None:
        self.publisher.acked(topic, count)

    def reactor_send(self) -> None:
        self.output.send_now()

    def reactor_failed(self, failure: Exception, count: int) -> None:
        if isinstance(failure, HANDLED_ERRORS):
            error = self.publisher.failed(failure, count)
            error.__cause__ = failure
            self.handed = error
        else:
            self.handed = failure

    def reactor_raise(self, error: Exception) -> None:
        self.handed = error
