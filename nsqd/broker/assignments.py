"""Applying pnsq lookupd's assignments: the partitions this node holds and its role in each.

The decisions are :func:`nsqd.core.ownership.plan`'s; this module only carries them out on the
topic table: opens the logs of partitions placed here, sets roles and epochs, stops serving the
partitions taken away (their logs are closed at the next sync, under the sync lock, and stay on
disk), and applies the topic flags lookupd keeps (``orderedmulti``, ``extend``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from protocol.lookup import TopicAssignment

from ..core.errors import StaleEpochError
from ..core.ownership import (
    LocalTopic,
    Placement,
    Plan,
    TopicPlan,
    TopicSettings,
    placements_for,
    plan,
)
from .logs import Opened
from .registry import TopicRegistry
from .topic import Topic

log = logging.getLogger("nsqd.broker")


def wanted_topics(node: str, assignments: Sequence[TopicAssignment]) -> list[TopicPlan]:
    """``node``'s share of lookupd's assignments document."""
    return [
        TopicPlan(
            name=a.name,
            held=placements_for(
                node, [(p.leader, p.replicas, p.epoch, p.in_sync) for p in a.partitions]
            ),
            settings=TopicSettings(
                partition_num=a.partition_num,
                ordered=bool(a.meta.get("ordered", False)),
                ext=bool(a.meta.get("extend_support", False)),
                channel_auto_create=not a.meta.get("disable_channel_auto_create", False),
                retention_days=_count(a.meta.get("retention_days")),
                sync_every=_count(a.meta.get("sync_every")),
                min_isr=max(1, _count(a.meta.get("min_isr"))),
                topic_id=topic_id(a),
            ),
        )
        for a in assignments
    ]


def topic_id(assignment: TopicAssignment) -> str:
    """The id of the topic's life lookupd placed ("" from a lookupd before ids)."""
    value = assignment.meta.get("topic_id", "")
    return value if isinstance(value, str) else ""


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def topic_settings(topic: Topic) -> TopicSettings:
    """What a topic on this node has of lookupd's meta."""
    return TopicSettings(
        partition_num=topic.partition_num,
        ordered=topic.ordered,
        ext=topic.ext,
        channel_auto_create=topic.channel_auto_create,
        retention_days=round(topic.retention / 86400) if topic.retention else 0,
        sync_every=topic.sync_every or 0,
        min_isr=topic.min_isr,
        topic_id=topic.topic_id,
    )


def apply_settings(topic: Topic, settings: TopicSettings) -> None:
    """Give ``topic`` lookupd's meta (a larger partition count comes with its partitions)."""
    topic.partition_num = max(topic.partition_num, settings.partition_num)
    topic.ordered, topic.ext = settings.ordered, settings.ext
    topic.channel_auto_create = settings.channel_auto_create
    topic.retention = settings.retention_days * 86400.0 if settings.retention_days else None
    topic.sync_every = settings.sync_every or None
    topic.min_isr = settings.min_isr
    topic.topic_id = settings.topic_id or topic.topic_id
    if topic.ordered:
        for channel in topic.channels.values():
            channel.ordered = True


def _plan(registry: TopicRegistry, wanted: Sequence[TopicPlan], max_opens: int | None) -> Plan:
    local = {
        t.name: LocalTopic(
            {p.number: p.state.placement for p in topic.partitions},
            _as_seen(topic_settings(topic), t.settings),
        )
        for t in wanted
        if (topic := registry.topics.get(t.name)) is not None and not topic.deleted
    }
    return plan(wanted, local, max_opens)


def _as_seen(have: TopicSettings, wanted: TopicSettings) -> TopicSettings:
    """``have`` as compared with ``wanted``: a lookupd before ids names none, which changes
    nothing (the id kept here is not a difference to apply at every assignment)."""
    return have if wanted.topic_id else replace(have, topic_id="")


def logs_to_open(
    registry: TopicRegistry, wanted: Sequence[TopicPlan], max_opens: int | None
) -> list[tuple[str, int, Placement]]:
    """``(topic, number, placement)`` of each partition log :func:`apply_assignments` with
    ``wanted`` and ``max_opens`` would open now: to be opened ahead, off the event loop
    (:meth:`~.logs.LogOpener.open_all`), and handed to it."""
    steps = _plan(registry, wanted, max_opens)
    return [
        *((t.name, n, p) for t in steps.create for n, p in sorted(t.held.items())),
        *steps.add,
    ]


def apply_assignments(
    registry: TopicRegistry,
    node: str,
    assignments: Sequence[TopicAssignment],
    max_opens: int | None = None,
    wanted: Sequence[TopicPlan] | None = None,
    opened: Opened | None = None,
) -> tuple[Plan, int]:
    """Make the node's topic table hold what lookupd placed on ``node``; returns what changed
    and how many partitions changed role here. With ``max_opens``, at most that many
    partition logs are opened (their files created and fsynced): the plan's ``deferred``
    says how many wait for the next call with the same document; ``wanted`` is
    :func:`wanted_topics` of it when the caller has it already (it is the same every call).
    The logs in ``opened`` (:func:`logs_to_open`'s, opened ahead) are taken from it instead of
    opened here; any the plan no longer wants (its topic deleted meanwhile) are closed."""
    role_changes = 0
    if wanted is None:
        wanted = wanted_topics(node, assignments)
    steps = _plan(registry, wanted, max_opens)
    for wanted_topic in steps.create:
        topic = registry.logs.build_topic(
            wanted_topic.name, wanted_topic.partition_num, {}, dict(wanted_topic.held), opened
        )
        apply_settings(topic, wanted_topic.settings)
        topic.managed = True
        registry.topics[topic.name] = topic
        log.info(
            "TOPIC(%s): placed here by lookupd: %s",
            topic.name,
            _roles(topic),
        )
    for wanted_topic in steps.settings:
        topic = registry.topics[wanted_topic.name]
        apply_settings(topic, wanted_topic.settings)
        log.info("TOPIC(%s): meta from lookupd: %s", topic.name, wanted_topic.settings)
    for name, number, placement in steps.add:
        topic = registry.topics[name]
        partition = registry.logs.take_or_open(opened, name, number, placement)
        topic.hold(partition)
        for channel in topic.channels.values():
            channel.add_partition(
                partition, max(partition.topic_start, partition.log.start_offset), []
            )
            channel.notify()
        log.info("TOPIC(%s): partition %d placed here as %s", name, number, placement.role.value)
    for name, number, placement in steps.change:
        topic = registry.topics[name]
        partition = topic.partition(number)
        led = partition.state.leads
        try:
            if partition.state.apply(placement):
                role_changes += 1
                log.warning(
                    "TOPIC(%s): partition %d is now %s (epoch %d)",
                    name,
                    number,
                    placement.role.value,
                    placement.epoch,
                )
        except StaleEpochError as exc:
            log.warning(
                "TOPIC(%s): partition %d: ignoring lookupd's placement: %s", name, number, exc
            )
        if led and not partition.state.leads:
            topic.leads_lost += 1
        registry.replication.wake(partition)  # parked publishes and follower streams re-check
        for channel in topic.channels.values():
            channel.notify()
    for name, number in steps.drop:
        topic = registry.topics[name]
        partition = topic.release(number)
        if partition.state.leads:
            topic.leads_lost += 1
        partition.state.drop()
        registry.replication.wake(partition)  # parked publishes are refused, streams end
        for channel in topic.channels.values():
            channel.drop_partition(number)
            channel.notify()  # its consumers of that partition are told to look elsewhere
        registry.retire(partition)
        kept = partition.log.end_offset - partition.log.start_offset
        log.log(
            logging.WARNING if kept else logging.INFO,
            "TOPIC(%s): partition %d is no longer placed here: not served (%d message(s) kept "
            "on disk)",
            name,
            number,
            kept,
        )
    for t in wanted:
        if (managed := registry.topics.get(t.name)) is not None:
            managed.managed = True
    for (name, number), partition in (opened or {}).items():
        log.info("TOPIC(%s): partition %d opened but no longer placed here: closed", name, number)
        partition.log.close()
    if opened:
        opened.clear()
    if steps:
        registry.syncs.request(metadata=True)
        registry.changes.notify()
    return steps, role_changes


def _roles(topic: Topic) -> str:
    held = ", ".join(f"{p.number}:{p.state.role.value}" for p in topic.partitions)
    return f"{topic.partition_num} partition(s), held here {{{held}}}"
