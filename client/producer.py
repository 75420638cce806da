"""Publishing on one connection: PUB, MPUB, DPUB and youzan's PUB_TRACE.

Publishes pipeline: any number of tasks may publish on one :class:`Producer` at once; their
commands leave in one write and the replies are matched in order.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Unpack, final

from protocol.commands import Dpub, Mpub, Pub, PubTrace
from protocol.message import MESSAGE_ID
from protocol.tracing import TRACED_RESPONSE

from .connection import Connection, ConnectOptions, open_connection
from .errors import UnexpectedResponseError


def _expect_ok(reply: bytes, what: str) -> None:
    if reply != b"OK":
        raise UnexpectedResponseError(f"{what}: expected OK, got {reply[:64]!r}")


@final
class Producer:
    """Publishes to one nsqd. Create it with :func:`open_producer`.

    Every method returns once nsqd acknowledged the publish, and raises
    :class:`~client.errors.NsqError` with nsqd's text if it refused.
    """

    def __init__(self, conn: Connection) -> None:
        self.connection = conn

    async def publish(self, topic: str, body: bytes, *, partition: int | None = None) -> None:
        """``PUB``: one message."""
        _expect_ok(await self.connection.command(Pub(topic, body, partition)), "PUB")

    async def mpublish(
        self, topic: str, bodies: Sequence[bytes], *, partition: int | None = None
    ) -> None:
        """``MPUB``: several messages, atomically."""
        _expect_ok(await self.connection.command(Mpub(topic, list(bodies), partition)), "MPUB")

    async def dpublish(self, topic: str, body: bytes, defer_ms: int) -> None:
        """``DPUB``: one message, delivered no sooner than ``defer_ms`` from now."""
        _expect_ok(await self.connection.command(Dpub(topic, defer_ms, body)), "DPUB")

    async def publish_traced(
        self, topic: str, body: bytes, trace_id: int, *, partition: int | None = None
    ) -> tuple[bytes, int]:
        """``PUB_TRACE`` (pnsq / youzan nsqd): returns ``(16-byte message id, log offset)``.

        The id's second half is ``trace_id``; consumers see it as ``Message.trace_id``.
        """
        reply = await self.connection.command(PubTrace(topic, trace_id, body, partition))
        if len(reply) != TRACED_RESPONSE.size or not reply.startswith(b"OK"):
            raise UnexpectedResponseError(f"PUB_TRACE: unexpected reply {reply[:64]!r}")
        _, internal_id, reply_trace_id, offset, _raw_size = TRACED_RESPONSE.unpack(reply)
        return MESSAGE_ID.pack(internal_id, reply_trace_id), offset


@asynccontextmanager
async def open_producer(address: str, **options: Unpack[ConnectOptions]) -> AsyncIterator[Producer]:
    """A :class:`Producer` on a new connection to ``address``; options as for
    :func:`~client.connection.open_connection`.
    """
    async with open_connection(address, **options) as conn:
        yield Producer(conn)
