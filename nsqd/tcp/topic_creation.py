"""youzan's ``INTERNAL_CREATE_TOPIC`` on a V2 connection (its admin tools create partitions
over TCP): standalone, the partition is made here; placed by pnsq's lookupd, lookupd is asked to
place it (led by this node) first."""

from __future__ import annotations

from protocol import ClientError, ErrorCode, InternalCreateTopic
from protocol.errors import YouzanText

from ..broker import Broker
from ..broker.creation import create_partition
from ..cluster.forwarding import Forwarder
from .errors import HANDLED_ERRORS


async def create_topic(
    broker: Broker, forwarder: Forwarder | None, command: InternalCreateTopic
) -> None:
    """Create the partition ``command`` names (the caller replies ``OK``).

    Raises:
        ClientError: E_CREATE_TOPIC_FAILED with youzan's text and the reason.
    """
    topic, number, ext = command.topic, command.partition, command.ext
    try:
        if forwarder is not None and forwarder.active:
            await forwarder.create_partition(broker, topic, number, ext)
        else:
            await create_partition(broker, topic, number, ext)
    except HANDLED_ERRORS as exc:
        text = YouzanText.CREATE_TOPIC_FAILED.format(topic)
        raise ClientError(ErrorCode.CREATE_TOPIC_FAILED, f"{text}: {exc}") from exc
