"""youzan's ``INTERNAL_CREATE_TOPIC`` on a standalone node: make one partition of a topic exist.

youzan's standalone nsqd keeps each partition as its own topic object, so a client creates
partitions one by one (``t 0``, ``t 1``, ...). A pnsq topic has partitions ``0..n-1``; asking
for partition ``p`` of a topic with fewer creates the topic (or grows it) to ``p + 1``
partitions, every one led here. Asking for an ext topic turns an existing topic ext (youzan
upgrades a topic to ext, never back). Saved in ``pnsq.dat`` before returning, as
``/topic/create`` is. A topic placed by pnsq's lookupd is not changed here: the session asks
lookupd (:meth:`nsqd.cluster.forwarding.Forwarder.create_partition`).
"""

from __future__ import annotations

import logging

from protocol.message import MAX_PARTITIONS

from ..core.errors import BadPartitionError, NotLeaderError
from .broker import Broker
from .topic import Topic

log = logging.getLogger("nsqd.broker")


async def create_partition(broker: Broker, name: str, number: int, ext: bool | None) -> Topic:
    """Topic ``name`` with partition ``number`` held and led here (see the module doc).

    Raises BadPartitionError past the message-id scheme's 1024 partitions, NotLeaderError for
    a topic lookupd placed (its partitions are lookupd's to place)."""
    if not 0 <= number < MAX_PARTITIONS:
        raise BadPartitionError(f"partition {number} of topic {name}")
    topic = broker.topics.get(name)
    if topic is None or topic.deleted:
        count = max(broker.config.default_partitions, number + 1)
        topic = broker.get_or_create_topic(name, count, ext=bool(ext))
    elif topic.managed:
        if not (topic.holds(number) and topic.partition(number).state.leads):
            raise NotLeaderError(f"partition {number} of topic {name}")
        return topic
    else:
        _grow(broker, topic, number + 1)
        if ext and not topic.ext:
            topic.ext = True
            log.info("TOPIC(%s): upgraded to ext", name)
    broker.syncs.request(metadata=True)
    broker.changes.notify()
    await broker.wait_durable()
    return topic


def _grow(broker: Broker, topic: Topic, count: int) -> None:
    """Open the partitions a standalone topic lacks below ``count`` (every channel reads them
    from their start)."""
    for number in range(topic.partition_num, count):
        partition = broker.logs.open_partition(topic.name, number, {})
        topic.hold(partition)
        for channel in topic.channels.values():
            channel.add_partition(
                partition, max(partition.topic_start, partition.log.start_offset), []
            )
            channel.notify()
    if count > topic.partition_num:
        log.info("TOPIC(%s): now %d partition(s)", topic.name, count)
        topic.partition_num = count
