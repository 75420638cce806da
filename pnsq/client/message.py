"""A delivered message and the three things a consumer can answer: FIN, REQ, TOUCH."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from protocol.commands import Command, Fin, Req, Touch
from protocol.message import decode_message_id, partition_of


class Responder(Protocol):
    """What a message needs of the connection it arrived on: a way to answer on it, and whether
    it is still open (once closed, nsqd redelivers the message on another connection).

    :class:`pnsq.client.connection.Connection` is one; the message never sees the rest of it.
    """

    @property
    def closed(self) -> bool:
        """Whether the connection is closed."""
        ...

    async def send(self, cmd: Command) -> None:
        """Queue a command that has no reply (FIN, REQ, TOUCH)."""
        ...


@dataclass(eq=False, slots=True)
class Message:
    """One message as nsqd delivered it on ``conn``.

    Attributes:
        id: the 16 id bytes ``[u64 internal id][u64 trace id]``, echoed in FIN/REQ/TOUCH.
        attempts: 1 on first delivery, +1 on each redelivery.
        timestamp_ns: publish time, ns since the epoch.
        body: the payload.
        conn: the connection it arrived on; FIN/REQ/TOUCH must go back on it.
        offset: the message's offset in its partition log, from the detail block nsqd adds for
            ordered and advanced (``SUB_ORDERED`` / ``SUB_ADVANCED``) subscriptions; else None.
        raw_size: the stored size nsqd reports in the same block; else None.
    """

    id: bytes
    attempts: int
    timestamp_ns: int
    body: bytes
    conn: Responder = field(repr=False)
    offset: int | None = None
    raw_size: int | None = field(default=None, repr=False)
    _responded: bool = field(default=False, init=False, repr=False)

    @property
    def internal_id(self) -> int:
        """The first half of the id: ``(partition << 50) + sequence`` on pnsq."""
        return decode_message_id(self.id)[0]

    @property
    def trace_id(self) -> int:
        """The second half of the id: the producer's trace id (PUB_TRACE), else 0."""
        return decode_message_id(self.id)[1]

    @property
    def partition(self) -> int:
        """The partition encoded in the internal id (meaningful on pnsq / youzan nsqd only)."""
        return partition_of(self.internal_id)

    @property
    def has_responded(self) -> bool:
        """Whether :meth:`finish` or :meth:`requeue` was called."""
        return self._responded

    async def finish(self) -> None:
        """FIN: the message is done. A failure comes back asynchronously as E_FIN_FAILED."""
        self._responded = True
        await self.conn.send(Fin(self.id))

    async def requeue(self, delay_ms: int = 0) -> None:
        """REQ: deliver again after ``delay_ms`` (0 = at once), with ``attempts + 1``."""
        self._responded = True
        await self.conn.send(Req(self.id, delay_ms))

    async def touch(self) -> None:
        """TOUCH: reset the in-flight timeout to a fresh ``msg_timeout``."""
        await self.conn.send(Touch(self.id))
