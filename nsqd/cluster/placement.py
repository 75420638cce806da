"""nsqd's placement exchange with pnsq's lookupd over its HTTP port: the assignments it
long-polls and applies, the follower progress it reports as a leader, and the hand-over of its
leaderships on a clean shutdown.

``GET /pnsq/assignments?node=<broadcast_address>:<tcp_port>&after=<version>`` is long-polled on
the lookupd's HTTP port (at the host of ``--lookupd-tcp-address``, the port from the IDENTIFY
reply): lookupd answers as soon as a newer placement is on its disk, and the broker applies it
(:mod:`nsqd.broker.assignments`).

With a cluster secret every call carries ``auth``, the credential's header
(:func:`protocol.cluster_auth.http_headers`): lookupd refuses these endpoints without it
(docs/security.md), so a node with a wrong secret gets no placement and reports no progress.
"""

from __future__ import annotations

import logging

import httpx
import trio

from protocol.lookup import (
    ACCEPT_V1,
    ASSIGNMENTS_PATH,
    TopicAssignment,
    parse_assignments,
    parse_deleted,
)

from ..broker import Broker, StorageError, admin
from ..broker.assignments import topic_id, wanted_topics
from ..core.errors import BrokerError
from ..replication.progress import Outbox, ProgressTracker

log = logging.getLogger("nsqd.lookup")

#: how often a leader tells pnsq's lookupd about its followers when nothing changed
PROGRESS_INTERVAL = 0.25
PROGRESS_REPEAT = 5.0
PROGRESS_PATH = "/pnsq/progress"
LEAVING_PATH = "/pnsq/leaving"
ASSIGNMENTS_WAIT = 30.0  # seconds lookupd may hold an assignments long-poll
#: partition logs a worker thread opens at a time (Broker.apply_placement): each step's are
#: joined to the topic table together, so the first partitions of a big topic serve early
OPENS_PER_STEP = 64


async def poll_assignments(
    broker: Broker,
    node_id: str,
    address: str,
    http_address: str,
    poll_interval: float,
    auth: dict[str, str],
) -> None:
    """Long-poll lookupd's assignments: each request returns as soon as lookupd has saved
    a newer decision (or after :data:`ASSIGNMENTS_WAIT`), so a change reaches this node
    within a round trip of being persisted."""
    url = f"http://{http_address}{ASSIGNMENTS_PATH}"
    headers = {"Accept": ACCEPT_V1, **auth}
    version: int | None = None
    timeout = httpx.Timeout(ASSIGNMENTS_WAIT + 5.0, connect=1.0)
    async with httpx.AsyncClient(timeout=timeout) as client:
        while True:
            params: dict[str, str | int] = {"node": node_id}
            if version is not None:
                params.update(after=version, wait=int(ASSIGNMENTS_WAIT))
            try:
                response = await client.get(url, params=params, headers=headers)
                response.raise_for_status()
                document = response.json()
                await apply_assignments(broker, node_id, document)
                found = document.get("version") if isinstance(document, dict) else None
                version = found if isinstance(found, int) else None
            except (httpx.HTTPError, ValueError) as exc:
                log.warning("LOOKUPD(%s): assignments: %s", address, exc)
                version = None
            if version is None:  # after an error, or an older lookupd without long-polls
                await trio.sleep(poll_interval)


async def apply_assignments(broker: Broker, node_id: str, document: object) -> None:
    """Hold exactly the partitions lookupd placed on this node, in their roles; delete
    the topics lookupd deleted (a copy left from before, or made while it was away), closing
    their consumers' connections. Every
    change of role and epoch goes first; new partitions are then opened by a worker thread,
    :data:`OPENS_PER_STEP` at a time (:meth:`~nsqd.broker.Broker.apply_placement`).
    Raises ValueError for a document that is not lookupd's."""
    placed, deleted = parse_assignments(document), parse_deleted(document)
    broker.deleted_on_lookupd = frozenset(deleted)
    try:
        for assignment in placed:
            await _delete_earlier_life(broker, assignment)
        wanted = wanted_topics(node_id, placed)
        await broker.apply_placement(node_id, placed, wanted, OPENS_PER_STEP)
        for name in set(deleted) - {t.name for t in placed}:
            topic = broker.find_topic(name)
            if topic is not None and not topic.deleted:
                log.info("TOPIC(%s): deleted on lookupd: deleting it here", name)
                # its consumers are closed, as nsqd closes them: a stock consumer looks the
                # topic up again instead of waiting on a connection that gets nothing more
                await admin.delete_topic(broker, name)
    except (BrokerError, StorageError, OSError) as exc:
        log.error("cannot apply lookupd's assignments: %s", exc)


async def _delete_earlier_life(broker: Broker, assignment: TopicAssignment) -> None:
    """Delete this node's copy of ``assignment``'s topic if it is of an earlier life of the
    name (another topic id): the topic was deleted and made again on lookupd while this node
    was away or stopped, so its copy holds the deleted topic's messages. Kept, it was followed
    from its own end as if it were the new topic's (the leaders' epochs start again with a
    new topic), counted in sync, and served the deleted messages once it led."""
    local = broker.find_topic(assignment.name)
    wanted = topic_id(assignment)
    if local is None or local.deleted or not wanted or not local.topic_id:
        return
    if local.topic_id != wanted:
        log.warning(
            "TOPIC(%s): this copy is of an earlier topic of the name (id %s, lookupd's is %s), "
            "deleted while this node was away: deleting it",
            assignment.name,
            local.topic_id,
            wanted,
        )
        await admin.delete_topic(broker, assignment.name)


async def report_progress(
    broker: Broker,
    progress: ProgressTracker,
    node_id: str,
    address: str,
    http_address: str,
    auth: dict[str, str],
) -> None:
    """Tell lookupd, as a leader, which followers are caught up and which lag and how many
    bytes each lacks: a partition's report when it changes (every second while a copy
    catches up), and all of them every :data:`PROGRESS_REPEAT` seconds and after a failed
    post (:class:`~nsqd.replication.progress.Outbox`)."""
    url = f"http://{http_address}{PROGRESS_PATH}"
    clock = broker.clock
    outbox = Outbox(PROGRESS_REPEAT)
    async with httpx.AsyncClient(timeout=httpx.Timeout(2.0, connect=1.0)) as client:
        while True:
            now = clock.monotonic()
            reports, every = outbox.take(progress.reports(broker, now), now)
            if reports or every:
                body = {"node": node_id, "partitions": reports}
                try:
                    response = await client.post(url, json=body, headers=auth)
                    response.raise_for_status()
                    outbox.posted(reports, every, now)
                except httpx.HTTPError as exc:
                    log.warning("LOOKUPD(%s): progress: %s", address, exc)
                    outbox.failed()
            await trio.sleep(PROGRESS_INTERVAL)


async def hand_over(
    broker: Broker, node_id: str, http_addresses: list[str], auth: dict[str, str]
) -> None:
    """A clean shutdown: ask pnsq's lookupds (``http_addresses``) to move every leadership
    this node holds with in-sync followers, and return once none is left here (the caller
    bounds the wait)."""

    def shared() -> list[str]:
        return [
            f"{t.name}/{p.number}" for t in broker.list_topics() for p in t.led if p.state.followers
        ]

    if not shared() or not http_addresses:
        return
    log.info("LOOKUPD: handing over %s before exiting", ", ".join(shared()))
    params = {"node": node_id}
    async with httpx.AsyncClient(timeout=httpx.Timeout(2.0, connect=1.0)) as client:
        for http in http_addresses:
            try:
                reply = await client.post(
                    f"http://{http}{LEAVING_PATH}", params=params, headers=auth
                )
                reply.raise_for_status()
            except httpx.HTTPError as exc:
                log.warning("LOOKUPD(%s): leaving: %s", http, exc)
    while shared():
        generation = broker.changes.generation
        await broker.changes.wait_after(generation)
    log.info("LOOKUPD: leaderships handed over")
