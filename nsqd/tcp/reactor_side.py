"""A V2 connection's side of the publish reactor (:mod:`nsqd.tcp.reactor`).

:class:`ReactorSide` is a part owned by :class:`~nsqd.tcp.session.Session`, and the
:class:`~nsqd.tcp.reactor_contract.Client` the reactor serves: while the connection only
publishes single PUBs, its command loop waits in the reactor, which reads and parses for it
through these methods; whatever the reactor leaves (:attr:`ReactorSide.handed`, or PUBs
still gathered) the command loop takes up exactly where the reactor stopped. It holds the
connection's parser, publisher and output (the same objects the command loop uses), so a PUB
served here costs what it cost when this was the connection itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pnsq._netio.plain_stream import PlainSocketStream
from protocol import NEED_DATA, CommandParser, Mpub, Pub

from ..broker import Record
from ..broker.clock import Clock
from .errors import HANDLED_ERRORS
from .output import OutputBuffer
from .publishing import Publisher
from .reactor import PublishReactor
from .reactor_contract import Read, Taken
from .settings import RECEIVE_SIZE

if TYPE_CHECKING:
    import trio

    from ..broker import Channel
    from .auth import SessionAuth


class ReactorSide:
    """What the reactor calls on a connection, and what it leaves for the command loop.

    Attributes:
        publishes: the connection published a single PUB or an MPUB: the reactor may
            serve it from now on.
        declined: its PUBs had to wait (followers, fsync, a forward): its own task serves it.
        handed: what the reactor left for the command loop: a command, or an error to raise.
        unreplicated: publishes the reactor appended and handed back before their followers
            held them (the append's records, the publishes): the command loop waits for them
            first.
        at_eof: the reactor read the peer's EOF.
        last_read: when the client last sent bytes (the command loop's reads count too): the
            connection's read deadline runs from it.
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        parser: CommandParser,
        publisher: Publisher,
        output: OutputBuffer,
        clock: Clock,
        reactor: PublishReactor | None,
        max_unsent: int = 1024 * 1024,
    ) -> None:
        """``stream``: the connection's stream as accepted; the reactor serves the connection
        only while that is a plain socket stream and still its stream (the session checks),
        and while fewer than ``max_unsent`` bytes of its replies wait for the client to read
        them (:meth:`replies_waiting`)."""
        self.stream = stream
        self._socket = stream.socket if isinstance(stream, PlainSocketStream) else None
        self.parser = parser
        self.publisher = publisher
        self.output = output
        self.clock = clock
        self._reactor = reactor
        self.publishes = False
        self.declined = False
        self.handed: object = None
        self.unreplicated: tuple[Sequence[Record], Taken] | None = None
        self.at_eof = False
        self.last_read = clock.monotonic()
        self._max_unsent = max_unsent

    def replies_waiting(self) -> bool:
        """The client has left more of its replies unread than the bound: nothing more is read
        from it until they went (nsqd's writes block the same way). A publisher that never read
        its OKs grew the daemon without bound (the reactor read on regardless)."""
        return self.output.backlog > self._max_unsent

    def serving_reactor(
        self, stream: trio.abc.Stream, channel: Channel | None, auth: SessionAuth | None
    ) -> PublishReactor | None:
        """The reactor to wait in for the next command, if it serves this connection: a plain
        one (``stream``: its stream now) that has published single PUBs that were acknowledged
        at once, with no subscription (``channel``) and no AUTH to check (``auth``)."""
        reactor = self._reactor
        if (
            reactor is not None
            and reactor.running
            and self.publishes
            and not self.declined
            and channel is None
            and auth is None
            and type(stream) is PlainSocketStream
            and not self.replies_waiting()
        ):
            return reactor
        return None

    def fileno(self) -> int:
        assert self._socket is not None
        return self._socket.fileno()

    def reactor_read(self) -> Taken | Read:
        """Read and parse what the socket holds: PUBs or MPUBs for one target that
        acknowledges at once are taken for the reactor's append; anything else is left for the
        command loop."""
        assert isinstance(self.stream, PlainSocketStream)
        if self.replies_waiting():  # its own task waits for the client to read them
            return Read.HAND_OVER
        data = self.stream.receive_nowait(RECEIVE_SIZE)
        if data is None:
            return Read.WAIT
        if not data:
            self.at_eof = True
            return Read.HAND_OVER
        self.last_read = self.clock.monotonic()
        parser, publisher = self.parser, self.publisher
        parser.receive_data(data)
        while True:
            command = parser.next_event()  # a protocol error: the loop raises it
            if command is NEED_DATA:
                break
            if not isinstance(command, (Pub, Mpub)):
                self.handed = command
                return Read.HAND_OVER
            if command.sequence is not None:  # numbered: a run of consecutive numbers
                if not publisher.gather_numbered(command):
                    self.handed = command
                    return Read.HAND_OVER
            elif publisher.numbered_pending:  # one kind at a time (reply order)
                self.handed = command
                return Read.HAND_OVER
            else:
                publisher.gather(command)
        if not publisher.gathering:
            return Read.WAIT
        taken = publisher.take_gathered()
        if taken is None:
            # PUBs that must wait (followers, fsync, a forward): its own task serves it from
            # now on; PUBs for several targets, or a new topic, go to the task this once
            self.declined = publisher.keeps_waiting()
            return Read.HAND_OVER
        return taken

    def reactor_acked(self, taken: Taken) -> None:
        self.publisher.acked(taken)

    def reactor_send(self) -> None:
        self.output.send_now()

    def reactor_failed(self, failure: Exception, taken: Taken) -> None:
        if isinstance(failure, HANDLED_ERRORS):
            error = self.publisher.refused(failure, taken)
            error.__cause__ = failure
            self.handed = error
        else:
            self.handed = failure

    def reactor_return(self, taken: Taken) -> None:
        self.publisher.put_back(taken)

    def reactor_unreplicated(self, records: Sequence[Record], taken: Taken) -> None:
        self.unreplicated = (records, taken)

    def reactor_raise(self, error: Exception) -> None:
        self.handed = error
