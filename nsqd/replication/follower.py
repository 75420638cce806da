"""The follower's end: every partition this node holds as replica follows its leader.

:class:`Followers` keeps one task per replica partition, started and stopped as lookupd's
placements change (it watches the broker's change counter). A task dials the leader's TCP port
with ``"  R1"`` (over TLS when this node has a certificate, then the cluster handshake with a
secret: :class:`~pnsq._netio.cluster_link.ClusterLinks`), says where its log ends and the epoch
of its last record (``Hello``), cuts its log back to where the leader says their histories part
(``Welcome``), then appends each ``Append`` at the same offsets and acknowledges it (``Ack``).
It refuses a leader whose epoch is older than the one lookupd gave this node (``Refuse``): that
is the fence that keeps a deposed leader from gathering acknowledgements. On any error it
reconnects after a short backoff; a leader node not reached since its streams failed is dialed
by one stream while the others wait for the outcome, and after a dial to it failed, no stream
dials it for :data:`DOWN_HOLD` seconds. Failures are logged at most once a second per leader
node (:data:`FAILURE_LOG_INTERVAL`): a node's death fails all the streams it leads here at once.
A leader that sent nothing for IDLE_TIMEOUT seconds, counted per leader node (its heartbeat
goes on one of its streams to this node, not on each), is gone: its streams reconnect.

Its Hello says it takes the topic's administrative state (``FEATURE_ADMIN``): it mirrors each
``Admin`` frame (paused flags, channels and their flags), saves ``pnsq.dat`` and answers
``AdminAck``; and that it answers ``RepairRequest`` (``FEATURE_REPAIR``) with its copy of records
the leader found damaged (``RepairRecords``). A leader too old to know that Hello answers
``E_BAD_FRAME``; the task then dials it with a plain Hello for as long as it follows that leader
under that epoch. Its Hello also says it counts a leader's silence per leader node
(``FEATURE_NODE_BEAT``), and that it takes the state of ``#ephemeral`` channels as marks
(``FEATURE_EPHEMERAL``, :func:`~nsqd.broker.copying.mirror_channel`); a leader that predates
such a bit answers ``E_BAD_FRAME`` too, and the task dials it again without the newest bit
first (:data:`~protocol.replication.FEATURES_NEWEST_FIRST`; such a leader sends a heartbeat
on every stream, and no ephemeral channel's state). With ``FEATURE_TOPIC_ID`` the Hello names
the topic id of this node's copy, and a leader of another life of the topic refuses it
(``E_OTHER_LIFE``): the task dials again after its backoff, by when lookupd's assignments have
had this node delete the copy and make the new one (its task starts afresh: a task follows one
``Partition`` object, not a name).
"""

from __future__ import annotations

import logging
import math

import trio

from pnsq._netio.cluster_link import ClusterLinks, LinkFailed
from pnsq._netio.handshake import FailureLog, unlogged_since
from protocol.replication import (
    FEATURE_TOPIC_ID,
    FEATURES,
    FEATURES_NEWEST_FIRST,
    MAGIC,
    Ack,
    Admin,
    AdminAck,
    Append,
    Cursors,
    CursorsAck,
    Error,
    Hello,
    HighWatermark,
    LeaderFrame,
    Refuse,
    RepairRecords,
    RepairRequest,
    ReplicationErrorCode,
    ReplicationProtocolError,
    Welcome,
)
from protocol.replication_decoder import LeaderFrameDecoder
from protocol.replication_encoder import encode

from ..broker import Broker, StorageError
from ..broker.admin_state import mirror_admin
from ..broker.copying import (
    Batch,
    ReplicaStreamError,
    append_from_leader,
    last_epoch,
    mirror_channel,
    read_for_repair,
    truncate_for_leader,
)
from ..broker.partition import Partition
from ..core.partition_state import Role
from .frames import FrameReader, PeerClosed

log = logging.getLogger("nsqd.replication")

DIAL_TIMEOUT = 2.0
WELCOME_TIMEOUT = 10.0
#: a leader node that sent nothing, on any stream to this node, for this long is gone (it sends
#: a heartbeat when it sent nothing else for 2 s)
IDLE_TIMEOUT = 8.0
WATCH_INTERVAL = 0.5  # seconds between looks for silent leader nodes
#: seconds no stream dials a leader node after a dial to it failed (each stream's own backoff
#: goes on meanwhile): a dead node leading thousands of partitions followed here was dialed
#: thousands of times a second, each failure logged, while lookupd failed it over
DOWN_HOLD = 0.5
RETRY = (0.1, 5.0)  # reconnect backoff: first, most (first again after a session that held)
#: seconds between two warnings about the streams from one leader node: its death fails every
#: stream it leads here at once (a thousand warnings took a fifth of a second of a failover)
FAILURE_LOG_INTERVAL = 1.0

Key = tuple[str, int]  # topic, partition


class LeaderRefused(Exception):
    """The leader answered with an error, or this follower refused the leader's epoch."""


class LeaderDown(Exception):
    """A dial to the leader node failed a moment ago (:data:`DOWN_HOLD`): not dialed again."""


class LeaderTooOld(LeaderRefused):
    """The leader refused a Hello with feature bits: it predates them (dial it plainly)."""


class Followers:
    """One follow task per partition held here as replica (see the module doc)."""

    def __init__(self, broker: Broker, node_id: str, links: ClusterLinks) -> None:
        self.broker = broker
        self.node_id = node_id
        self.links = links  # TLS and the cluster credential, before Hello (see .auth)
        #: (topic, partition) -> the leader, epoch and Partition its task follows, and its scope
        self._tasks: dict[Key, tuple[str, int, Partition, trio.CancelScope]] = {}
        #: when a frame last came from each leader node, on any of its streams (monotonic)
        self._heard: dict[str, float] = {}
        #: leader node -> until when no stream dials it (a dial to it failed: :data:`DOWN_HOLD`)
        self._held: dict[str, float] = {}
        #: leader nodes dialed since their last failure (stream lost or dial failed); a node
        #: not in it is dialed by one stream at a time, the others wait for that dial's outcome
        self._reachable: set[str] = set()
        self._dialing: dict[str, trio.Event] = {}  # leader node -> its one dial under way
        #: the streams' failures per leader node, logged once per FAILURE_LOG_INTERVAL
        self._failures = FailureLog(log, broker.clock.monotonic, FAILURE_LOG_INTERVAL)
        #: leader node -> the streams from it waiting for a frame (their scopes) -> the end of
        #: applying each one's last frame (:meth:`watch_silence`)
        self._waiting: dict[str, dict[trio.CancelScope, float]] = {}

    async def run(self) -> None:
        """Follow placements until cancelled."""
        changes = self.broker.changes
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.watch_silence)
            while True:
                generation = changes.generation
                self._reconcile(nursery)
                await changes.wait_after(generation)

    def _wanted(self) -> dict[Key, tuple[str, int, Partition]]:
        wanted = {}
        for topic in self.broker.list_topics():
            if topic.deleted or topic.ephemeral:
                continue
            for partition in topic.partitions:
                placement = partition.state.placement
                if placement.role is Role.REPLICA and placement.leader:
                    key = (topic.name, partition.number)
                    wanted[key] = (placement.leader, placement.epoch, partition)
        return wanted

    def _reconcile(self, nursery: trio.Nursery) -> None:
        wanted = self._wanted()
        for key, (leader, epoch, partition, scope) in list(self._tasks.items()):
            if key not in wanted or wanted[key] != (leader, epoch, partition):
                scope.cancel()
                del self._tasks[key]
        for key, (leader, epoch, partition) in wanted.items():
            if key not in self._tasks:
                scope = trio.CancelScope()
                self._tasks[key] = (leader, epoch, partition, scope)
                nursery.start_soon(self._follow, key, leader, partition, scope)

    async def _follow(
        self, key: Key, leader: str, partition: Partition, scope: trio.CancelScope
    ) -> None:
        topic, number = key
        delay = RETRY[0]
        features = FEATURES
        clock = self.broker.clock
        with scope:
            while True:
                started = clock.monotonic()
                try:
                    await self._session(topic, leader, partition, features)
                except* LeaderTooOld:
                    newest = next((b for b in FEATURES_NEWEST_FIRST if features & b), 0)
                    older = features & ~newest if newest else 0
                    log.info(
                        "REPLICATION(%s/%d): leader %s predates feature bits %#x: %#x from now",
                        topic,
                        number,
                        leader,
                        features,
                        older,
                    )
                    features = older
                except* LinkFailed:
                    pass  # logged by the links, at most once a minute per leader
                except* LeaderDown:
                    pass  # another stream's dial failed a moment ago (and was logged)
                except* (
                    OSError,
                    trio.BrokenResourceError,
                    trio.TooSlowError,
                    PeerClosed,
                    LeaderRefused,
                    ReplicationProtocolError,
                    ReplicaStreamError,
                ) as group:
                    self._reachable.discard(leader)  # its next dial goes alone
                    for exc in group.exceptions:
                        self._log_failure(topic, number, leader, str(exc) or type(exc).__name__)
                if clock.monotonic() - started >= RETRY[1]:
                    delay = RETRY[0]  # a session that held: this is no retry of a failing one
                await trio.sleep(delay)
                delay = min(delay * 2, RETRY[1])

    def _log_failure(self, topic: str, number: int, leader: str, reason: str) -> None:
        unlogged = self._failures.due(leader)
        if unlogged is None:
            return
        more = unlogged_since(unlogged, "of its streams failed")
        log.warning("REPLICATION(%s/%d): following %s: %s%s", topic, number, leader, reason, more)

    async def _dial(self, leader: str) -> tuple[trio.abc.Stream, bytes]:
        """A link to ``leader``. Raises :class:`LeaderDown` while a dial to it failed a moment
        ago, or when another stream's dial that this one waited for failed: a leader node not
        reached since its streams failed is dialed by one stream, not by each of thousands."""
        clock = self.broker.clock
        while leader not in self._reachable and leader in self._dialing:
            await self._dialing[leader].wait()
        if clock.monotonic() < self._held.get(leader, -math.inf):
            raise LeaderDown(leader)
        alone = leader not in self._reachable
        if alone:
            self._dialing[leader] = trio.Event()
        try:
            dialed = await self.links.dial(leader, MAGIC, DIAL_TIMEOUT)
        except (OSError, trio.TooSlowError, trio.BrokenResourceError, LinkFailed):
            self._held[leader] = clock.monotonic() + DOWN_HOLD
            raise
        finally:
            if alone:
                self._dialing.pop(leader).set()
        self._held.pop(leader, None)
        self._reachable.add(leader)
        return dialed

    async def _session(self, topic: str, leader: str, partition: Partition, features: int) -> None:
        stream, rest = await self._dial(leader)
        async with stream:
            state = partition.state
            copy = self.broker.find_topic(topic)
            life = copy.topic_id if copy is not None and features & FEATURE_TOPIC_ID else ""
            hello = Hello(
                self.node_id,
                topic,
                partition.number,
                state.epoch,
                partition.log.end_offset,
                last_epoch(partition),
                features,
                life,
            )
            await stream.send_all(encode(hello))
            reader = FrameReader(stream, LeaderFrameDecoder(), rest)
            with trio.fail_after(WELCOME_TIMEOUT):
                welcome = await reader.next()
            if isinstance(welcome, Error):
                if features and welcome.code == ReplicationErrorCode.BAD_FRAME:
                    raise LeaderTooOld(f"{welcome.code} {welcome.text}")
                raise LeaderRefused(f"{welcome.code} {welcome.text}")
            if not isinstance(welcome, Welcome):
                raise ReplicationProtocolError(f"expected WELCOME, got {type(welcome).__name__}")
            await self._check_epoch(stream, partition, welcome.epoch)
            truncate_for_leader(partition, welcome.truncate_to)
            state.leader_high_watermark(welcome.high_watermark)
            # what it holds now is the leader's history: say so at once (a leader that just
            # restarted knows its high-watermark only from its followers' acknowledgements)
            end = partition.log.end_offset
            await stream.send_all(encode(Ack(welcome.epoch, end)))
            log.info(
                "REPLICATION(%s/%d): following %s (epoch %d) from offset %d",
                topic,
                partition.number,
                leader,
                welcome.epoch,
                partition.log.end_offset,
            )
            await self._frames(stream, reader, topic, leader, partition)

    async def _frames(
        self,
        stream: trio.abc.Stream,
        reader: FrameReader[LeaderFrame],
        topic: str,
        leader: str,
        partition: Partition,
    ) -> None:
        """Apply the leader's frames as they come; raise ``trio.TooSlowError`` once the watch
        (:meth:`watch_silence`) gives the stream up while it waits for one. Only the wait
        for a frame is bounded, not what a frame does."""
        clock = self.broker.clock
        heard = self._heard
        waiting = self._waiting.setdefault(leader, {})
        last = heard[leader] = clock.monotonic()  # the Welcome
        with trio.CancelScope() as idle:  # cancelled by the watch, only while waiting
            while True:
                waiting[idle] = last
                try:
                    frame = await reader.next()
                finally:
                    del waiting[idle]
                if idle.cancel_called:
                    break  # given up as the frame came: it is not applied
                heard[leader] = clock.monotonic()
                await self._apply(stream, topic, partition, frame)
                last = clock.monotonic()
        raise trio.TooSlowError  # the leader's node was silent for IDLE_TIMEOUT

    async def watch_silence(self) -> None:
        """Give up the streams that wait for a frame from a leader node that sent nothing, on
        any of its streams to this node, for IDLE_TIMEOUT seconds, counted for each stream
        from the end of applying its last frame at the earliest (what a slow frame kept it
        from reading is not silence). One look every :data:`WATCH_INTERVAL` seconds for every
        stream: a deadline per stream, moved by each frame, expired every few seconds for
        each of a node's thousands of idle streams. Runs until cancelled (:meth:`run`)."""
        clock = self.broker.clock
        while True:
            await trio.sleep(WATCH_INTERVAL)
            now = clock.monotonic()
            for leader, waiting in self._waiting.items():
                if now - self._heard.get(leader, -math.inf) < IDLE_TIMEOUT:
                    continue
                for scope, last in waiting.items():
                    if now - last >= IDLE_TIMEOUT:
                        scope.cancel()

    async def _apply(
        self,
        stream: trio.abc.Stream,
        topic_name: str,
        partition: Partition,
        frame: LeaderFrame,
    ) -> None:
        state = partition.state
        match frame:
            case Append(epoch=epoch, base_offset=base, high_watermark=hw, count=count):
                await self._check_epoch(stream, partition, epoch)
                try:
                    end = append_from_leader(partition, epoch, Batch(base, count, frame.records))
                except StorageError as exc:
                    raise ReplicaStreamError(f"cannot store the leader's records: {exc}") from exc
                if partition.unsynced >= self.broker.config.sync_every:
                    self.broker.syncs.request()
                state.leader_high_watermark(hw)
                await stream.send_all(encode(Ack(epoch, end)))
            case HighWatermark(epoch=epoch, high_watermark=hw):
                await self._check_epoch(stream, partition, epoch)
                state.leader_high_watermark(hw)
            case Cursors(epoch=epoch, channel=name, confirmed=confirmed, deferred=marks):
                await self._check_epoch(stream, partition, epoch)
                topic = self.broker.find_topic(topic_name)
                if topic is not None and not topic.deleted:
                    mirror_channel(
                        self.broker, topic, partition, name, confirmed, marks, frame.deleted
                    )
                    if not frame.deleted:
                        await stream.send_all(encode(CursorsAck(epoch, name, confirmed)))
            case Admin(epoch=epoch, version=version):
                await self._check_epoch(stream, partition, epoch)
                topic = self.broker.find_topic(topic_name)
                if topic is not None and not topic.deleted:
                    changed = mirror_admin(self.broker, topic, frame)
                    self.broker.syncs.request(metadata=changed)
                    await self.broker.wait_durable()  # the cursors before it too
                    await stream.send_all(encode(AdminAck(epoch, version)))
            case RepairRequest(epoch=epoch, first=first, count=count):
                await self._check_epoch(stream, partition, epoch)
                try:
                    copy = read_for_repair(partition, first, count)
                except StorageError as exc:
                    log.warning("REPLICATION(%s/%d): %s", topic_name, partition.number, exc)
                    copy = Batch(first, 0, b"")
                reply = RepairRecords(epoch, first, copy.count, copy.data)
                await stream.send_all(encode(reply))
            case Error(code=code, text=text):
                raise LeaderRefused(f"{code} {text}")
            case Welcome():
                raise ReplicationProtocolError("a second WELCOME")

    async def _check_epoch(self, stream: trio.abc.Stream, partition: Partition, epoch: int) -> None:
        """The fence: never follow a leader older than the epoch lookupd gave this node."""
        if epoch < partition.state.epoch:
            reason = f"epoch {epoch} is older than the epoch {partition.state.epoch} followed"
            await stream.send_all(encode(Refuse(partition.state.epoch, reason)))
            raise LeaderRefused(reason)
