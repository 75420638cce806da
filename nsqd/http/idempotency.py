"""HTTP ``/pub`` and ``/mpub`` with an ``Idempotency-Key`` request header (the IETF HTTP draft's
name): the same key within nsqd's ``--producer-state-ttl`` is answered as the first time and
stores nothing new.

A key is a one-publish producer of pnsq's idempotent publishing (:mod:`nsqd.core.producers`):
its id is :func:`protocol.identify.producer_id` of ``"http-key:" + key`` and its messages are
numbered from 0, so the partition's leader stores them once. The partition is the one the
request names (youzan's ``partition``), else the key's own: the key's id modulo the topic's
partition count, the same on every node, so a retry sent to another node reaches the same
partition. A node that does not lead it sends the request on to the leader's HTTP API (lookupd
says which), key and all.
"""

from __future__ import annotations

from typing import Final

from protocol.encode import encode_mpub_body
from protocol.identify import producer_id

from ..broker import new_records
from ..cluster.forwarding import ForwardError
from ..core.errors import NotLeaderError
from .base import HTTPError, Request
from .context import HTTPContext

HEADER: Final = b"idempotency-key"
MAX_KEY: Final = 255  # bytes of a key


def idempotency_key(request: Request) -> str | None:
    """The request's key, None without one; 400 ``INVALID_IDEMPOTENCY_KEY`` for an empty one,
    one over :data:`MAX_KEY` bytes, or one that is not printable ASCII."""
    raw = request.headers.get(HEADER)
    if raw is None:
        return None
    if not 0 < len(raw) <= MAX_KEY or not all(0x20 < b < 0x7F for b in raw):
        raise HTTPError(400, "INVALID_IDEMPOTENCY_KEY")
    return raw.decode("ascii")


async def publish_keyed(
    context: HTTPContext,
    request: Request,
    topic: str,
    partition: int | None,
    bodies: list[bytes],
    key: str,
    defer_ms: int = 0,
) -> bytes:
    """Publish ``bodies`` once for ``key``: the reply's body (``OK``)."""
    broker = context.broker
    producer = producer_id(f"http-key:{key}")
    local = broker.find_topic(topic)
    forwarder = context.forwarder
    if partition is None:
        if local is not None:
            count = local.partition_num
        elif forwarder is not None and forwarder.active:
            count = len(await forwarder.leaders(topic)) or 1
        else:
            count = broker.get_or_create_topic(topic).partition_num
        partition = producer % count
    leads = local is not None and partition in {p.number for p in local.led}
    if leads or forwarder is None or not forwarder.active:
        now = broker.clock.now_ns()
        deliver_at = now + defer_ms * 1_000_000 if defer_ms else 0
        batch = new_records(now, bodies, deliver_at)
        await context.publishing.publish_numbered(topic, batch, partition, producer, 0)
        return b"OK"
    params = {"topic": topic, "partition": str(partition)}
    if defer_ms:
        params["defer"] = str(defer_ms)
    if request.path == "/mpub":
        params["binary"] = "true"
        body = encode_mpub_body(bodies)
    else:
        body = bodies[0]
    status, reply = await forwarder.post_to_leader(
        topic, partition, request.path, params, body, {"Idempotency-Key": key}
    )
    if status == 200:
        return reply
    if b"NOT_LEADER" in reply:  # the leader moved since lookupd said: the client retries
        raise NotLeaderError(f"partition {partition} of topic {topic}: the leader moved")
    raise ForwardError(f"leader of {topic}/{partition} answered {status}: {reply[:200]!r}")
