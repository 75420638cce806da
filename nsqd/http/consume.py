"""HTTP consume with server-kept offsets (``docs/http-api.md``): any language, nothing but HTTP.

* ``POST /consume?topic=&channel=&max=&wait_ms=&lease_ms=`` — a batch of at most ``max``
  messages of ONE partition, leased to the batch's token until it is acked, nacked or its
  lease ends (several batches of a partition may be out at once; ordered channels give one at
  a time: :func:`~nsqd.broker.pull.exclusive`); waits up to
  ``wait_ms`` for messages;
* ``POST /consume/ack?token=`` — FIN the batch; ``200 OK`` once that is on disk and every
  in-sync follower holds the FINs (docs/http-api.md);
* ``POST /consume/nack?token=&delay_ms=`` — requeue the batch after ``delay_ms``.

A node that leads none of the topic's partitions answers ``400 E_FAILED_ON_NOT_LEADER`` with
the leaders' HTTP addresses (``"leaders": {"<partition>": "host:port"}``), as youzan's nsqd
answers a partition-aware client at the wrong node; clients go there. The other refusals are
:data:`~nsqd.http.errors.CONSUME_ERRORS`.
"""

from __future__ import annotations

import binascii
import logging

from protocol.message import MESSAGE_ID

from ..broker import Channel, Topic
from ..broker.pull import Batch, LeaderMovedError
from ..cluster.forwarding import ForwardError, PlacedElsewhereError
from .args import topic_channel_args, uint_arg
from .base import EncodedJson, HTTPError, Reply, Request, Route, go_json, routes_with
from .context import HTTPContext
from .errors import CONSUME_ERRORS

log = logging.getLogger("nsqd.http")

MAX_WAIT_MS = 30_000  # a long poll's cap
NOT_LEADER = "E_FAILED_ON_NOT_LEADER"


def _bounded_arg(request: Request, name: str, default: int, low: int, high: int) -> int:
    """``name`` as an unsigned decimal (:func:`~nsqd.http.base.uint_arg`) of at least
    ``low``, clamped to ``high``; absent: ``default``."""
    value = uint_arg(request, name, default)
    if value < low:
        raise HTTPError(400, f"INVALID_{name.upper()}")
    return min(value, high)


def _token_arg(request: Request) -> str:
    token = request.arg("token")
    if not token:
        raise HTTPError(400, "MISSING_ARG_TOKEN")
    return token


#: ``/consume``'s reply when there is nothing to give
NO_BATCH = b'{"token":null,"partition":null,"messages":[]}'
#: one message of a batch's ``messages``, in the order of docs/http-api.md
_MESSAGE_JSON = (
    b'{"id":"%s","partition":%d,"offset":%d,"timestamp":%d,"attempts":%d,"trace_id":%d,"body":"%s"}'
)


def encode_batch(batch: Batch | None) -> bytes:
    """The ``/consume`` reply for ``batch`` (None: nothing to give), as :func:`go_json` encodes
    ``{"token", "partition", "messages": [{"id", "partition", "offset", "timestamp",
    "attempts", "trace_id", "body"}]}`` (the id in hex, the body in base64). Built as bytes
    from a template: the token, the only free text, goes through :func:`go_json`; hex, base64
    and integers have nothing to escape."""
    if batch is None:
        return NO_BATCH
    pack, hexlify, b64 = MESSAGE_ID.pack, binascii.hexlify, binascii.b2a_base64
    messages = b",".join(
        [
            _MESSAGE_JSON
            % (
                hexlify(pack(m.record.internal_id, m.record.trace_id)),
                m.partition,
                m.offset,
                m.record.timestamp_ns,
                m.attempts,
                m.record.trace_id,
                b64(m.record.body, newline=False),
            )
            for m in batch.messages
        ]
    )
    lease = batch.lease
    return b'{"token":%s,"partition":%d,"messages":[%s]}' % (
        go_json(lease.token),
        lease.partition,
        messages,
    )


class ConsumeAPI:
    """The handlers; :meth:`routes` gives the app's route table entries."""

    def __init__(self, context: HTTPContext) -> None:
        self.context = context

    def routes(self) -> dict[str, Route]:
        """``path -> Route``."""
        return routes_with(
            CONSUME_ERRORS,
            {
                "/consume": {"POST": self.consume},
                "/consume/ack": {"POST": self.ack},
                "/consume/nack": {"POST": self.nack},
            },
        )

    async def consume(self, request: Request) -> Reply:
        """One batch of one partition, or ``{"token": null, ...}`` after ``wait_ms`` (or at once
        when shutdown begins meanwhile); ``503 EXITING`` once it has begun."""
        if self.context.puller.stopping:
            raise HTTPError(503, "EXITING")
        topic_name, channel_name = topic_channel_args(request)
        await self.context.auth.require(request, topic_name, channel_name)
        settings = self.context.settings
        limit = _bounded_arg(request, "max", 1, 1, settings.max_rdy_count)
        wait_ms = _bounded_arg(request, "wait_ms", 0, 0, MAX_WAIT_MS)
        lease_ms = _bounded_arg(
            request, "lease_ms", settings.msg_timeout_ms, 1, settings.max_msg_timeout_ms
        )
        topic, channel = await self._channel(topic_name, channel_name)
        if topic.managed and not topic.led:
            raise await self._not_leader(topic_name)
        puller = self.context.puller
        lease_ns = lease_ms * 1_000_000
        batch = await puller.wait(topic, channel, limit, lease_ns, 0)  # what is there now
        if batch is None and wait_ms and not puller.stopping:
            # a long poll, given up as soon as its client leaves
            batch = await request.while_connected(
                lambda: puller.wait(topic, channel, limit, lease_ns, wait_ms / 1000)
            )
        return EncodedJson(encode_batch(batch))

    async def _channel(self, topic_name: str, channel_name: str) -> tuple[Topic, Channel]:
        """The channel, created as a SUB creates it (through lookupd in a cluster)."""
        broker = self.context.broker
        forwarder = self.context.forwarder
        if forwarder is not None:
            try:
                await forwarder.ensure_local(broker, topic_name)
            except PlacedElsewhereError:  # the reply names the leaders: lookupd is asked
                raise await self._not_leader(topic_name) from None
        topic = broker.get_or_create_topic(topic_name)
        return topic, broker.get_or_create_channel(topic, channel_name)

    async def _not_leader(self, topic_name: str) -> HTTPError:
        """``400 E_FAILED_ON_NOT_LEADER`` naming the leaders' HTTP addresses (if known)."""
        leaders: dict[str, str] = {}
        forwarder = self.context.forwarder
        if forwarder is not None:
            try:
                found = await forwarder.leaders_http(topic_name)
            except ForwardError as exc:
                log.warning("consume: leaders of %s unknown: %s", topic_name, exc)
            else:
                leaders = {str(number): address for number, address in sorted(found.items())}
        return HTTPError(400, NOT_LEADER, {"leaders": leaders})

    async def ack(self, request: Request) -> Reply:
        """FIN the batch; ``OK`` once durable."""
        token = _token_arg(request)
        try:
            lease = await self.context.puller.ack(token)
        except LeaderMovedError as exc:  # the reply names the leaders: lookupd is asked
            raise await self._not_leader(exc.topic) from None
        log.debug("consume: acked %d message(s) of %s", len(lease.offsets), lease.topic)
        return b"OK"

    async def nack(self, request: Request) -> Reply:
        """Requeue the batch after ``delay_ms``."""
        token = _token_arg(request)
        delay_ms = _bounded_arg(request, "delay_ms", 0, 0, self.context.settings.max_req_timeout_ms)
        self.context.puller.nack(token, delay_ms)
        return b"OK"
