"""The PUB family as a V2 session dispatches it (:mod:`nsqd.tcp.session`): each command's
name for AUTH, then its call on the connection's :class:`~nsqd.tcp.publishing.Publisher` (youzan's
traced and ext publishes through :mod:`nsqd.tcp.youzan_publishing`).
PUBs and MPUBs the session gathers do not come here (group commit: the publisher's
``gather`` and ``gather_numbered``); a PUB or MPUB here is one handed back by
the publish reactor alone."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from protocol import Dpub, ErrorCode, Mpub, MpubExt, MpubTrace, Pub, PubExt, PubTrace

from .publishing import Publisher
from .youzan_publishing import publish_ext, publish_traced

#: checks that the client may publish to a topic: ``(command name, topic)``
Authorize = Callable[[str, str], Awaitable[None]]


async def publish_command(publisher: Publisher, command: object, authorize: Authorize) -> bool:
    """Handle ``command`` if it is of the PUB family (True), once ``authorize`` allowed it;
    False for any other command."""
    match command:
        case Pub(topic=topic, body=body, partition=partition, sequence=sequence):
            await authorize("PUB", topic)  # handed back by the reactor alone
            await publisher.publish(
                topic, [body], partition, "PUB", ErrorCode.PUB_FAILED, sequence=sequence
            )
        case Mpub(topic=topic, bodies=bodies, partition=partition, sequence=sequence):
            await authorize("MPUB", topic)  # nsqd: before reading the body
            await publisher.publish(
                topic, bodies, partition, "MPUB", ErrorCode.MPUB_FAILED, sequence=sequence
            )
        case Dpub(
            topic=topic, defer_ms=defer_ms, body=body, partition=partition, sequence=sequence
        ):
            await authorize("DPUB", topic)
            await publisher.publish(
                topic,
                [body],
                partition,
                "DPUB",
                ErrorCode.DPUB_FAILED,
                defer_ms=defer_ms,
                sequence=sequence,
            )
        case PubTrace(
            topic=topic, trace_id=trace_id, body=body, partition=partition, sequence=sequence
        ):
            await authorize("PUB_TRACE", topic)
            await publish_traced(
                publisher, topic, [(trace_id, body)], partition, "PUB_TRACE", sequence
            )
        case MpubTrace(topic=topic, messages=messages, partition=partition, sequence=sequence):
            await authorize("MPUB_TRACE", topic)
            await publish_traced(publisher, topic, messages, partition, "MPUB_TRACE", sequence)
        case PubExt(topic=topic, header=header, body=body, partition=partition, sequence=sequence):
            await authorize("PUB_EXT", topic)
            await publish_ext(publisher, topic, [(header, body)], partition, "PUB_EXT", sequence)
        case MpubExt(topic=topic, messages=messages, partition=partition, sequence=sequence):
            await authorize("MPUB_EXT", topic)
            await publish_ext(publisher, topic, messages, partition, "MPUB_EXT", sequence)
        case _:
            return False
    return True
