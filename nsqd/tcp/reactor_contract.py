"""What the publish reactor (:mod:`nsqd.tcp.reactor`) and the connections it serves ask of
each other: the publishes a connection read for one append (:class:`Taken`), what else its
read came to (:class:`Read`), and the calls the reactor makes on a publishing connection
(:class:`Client`) and on a consuming one (:class:`Consumer`).

A module of its own so that a connection's publishing (:mod:`.publishing`) depends on this
contract, not on the reactor's loop.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import NamedTuple, Protocol

from ..broker import BodyBatch, Record

__all__ = ["Client", "Consumer", "Read", "Taken"]


class Taken(NamedTuple):
    """The publishes a client read for one append (:meth:`~nsqd.tcp.publishing.Publisher.
    take_gathered`): single PUBs, or MPUBs, to one target."""

    topic: str
    partition: int | None  # None: the broker picks
    batch: BodyBatch  # every message, in the order read
    #: a producer's numbered PUBs (idempotent publishing): its id and their first number
    numbering: tuple[int, int] | None
    replies: int  # the OKs they get: one per PUB, one per MPUB
    name: str  # ``PUB`` or ``MPUB``: the command a refusal of theirs names


class Read(enum.Enum):
    """What a client made of its readable socket, when not PUBs to append (:data:`Taken`)."""

    WAIT = enum.auto()  # nothing complete yet (or nothing read): keep waiting
    HAND_OVER = enum.auto()  # its own task must go on (another command, EOF, ...)


class Client(Protocol):
    """A connection the reactor can serve (:class:`~nsqd.tcp.session.Session`)."""

    def fileno(self) -> int:
        """Its socket's descriptor."""
        ...

    def reactor_read(self) -> Taken | Read:
        """Read what its socket holds and parse it."""
        ...

    def reactor_acked(self, taken: Taken) -> None:
        """Its publishes ``taken`` are appended (and held by the in-sync followers): queue
        their replies."""
        ...

    def reactor_send(self) -> None:
        """Send the replies queued (without waiting: the rest is its writer task's)."""
        ...

    def reactor_failed(self, failure: Exception, taken: Taken) -> None:
        """The append of its publishes ``taken`` failed with ``failure`` (its own copy)."""
        ...

    def reactor_return(self, taken: Taken) -> None:
        """Its numbered PUBs ``taken`` were not appended (their numbers do not simply come
        next): its own task judges them."""
        ...

    def reactor_unreplicated(self, records: Sequence[Record], taken: Taken) -> None:
        """It is handed back while its publishes ``taken``, appended as (part of) ``records``,
        wait for the in-sync followers: its own task waits for them, then queues their OKs,
        before anything else."""
        ...

    def reactor_raise(self, error: Exception) -> None:
        """Its own task must raise ``error`` (from its socket, its parser, or a bug: it ends
        this connection, as it would on the task path, not the reactor)."""
        ...


class Consumer(Protocol):
    """A connection whose idle message pump the reactor may run a delivery for
    (:class:`~nsqd.tcp.consuming.Consuming`)."""

    def deliver_now(self) -> bool:
        """Deliver what its channel has for it, as its pump would, without waiting; False
        when there was nothing to deliver. An error is its own connection's (its pump raises
        it), never the reactor's."""
        ...
