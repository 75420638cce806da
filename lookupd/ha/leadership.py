"""High availability on etcd v3 (``--cluster-id``, ``--cluster-leadership-addresses``): the
metadata lives in etcd, and the lookupds elect one leader that alone places, fails over and
changes in-sync sets.

* :class:`EtcdStore` — the leader's saver: the placements and tombstones as one key each under
  ``/pnsq/<cluster-id>/``, written by transactions that compare every written key's revision
  and the leader key's creation revision (the fence: a deposed leader's write fails whole).
* :class:`HighAvailability` — the tasks: the lease (granted, kept alive; this lookupd's
  registration under ``lookupds/`` rides on it), the election (:mod:`lookupd.core.election` decides;
  a guard steps a leader down as soon as its lease may be about to expire), the supervisor run
  only while leading, and the followers' cache: the whole prefix read again whenever etcd's
  watch reports a change (and every :data:`RELOAD_EVERY` seconds), applied with
  :meth:`Cluster.follow`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from ..core.election import CAMPAIGN_INTERVAL, KEEPALIVE_INTERVAL, TTL, Lease, Role, decide_role
from ..core.placement import TopicPlacement
from ..core.switches import Switches
from ..state.cluster import Cluster
from ..state.store import Stored, UnavailableError
from ..state.supervisor import Supervisor
from . import codec
from .etcd import EtcdClient, EtcdError

log = logging.getLogger("nsqlookupd.ha")

RELOAD_EVERY = 5.0  # seconds: a follower reads the metadata again even without a watch event
RETRY_AFTER = 0.5  # seconds before a failed etcd request is tried again
GUARD_TICK = 0.05  # seconds between the leader's looks at its lease


class EtcdStore:
    """The metadata keys of one cluster, with the revisions this lookupd last read or wrote."""

    def __init__(self, client: EtcdClient, prefix: str) -> None:
        self.client = client
        self.prefix = prefix
        self.known: dict[str, bytes] = {}
        self.revisions: dict[str, int] = {}
        #: the leader key and its creation revision while this lookupd leads
        self.fence: tuple[str, int] | None = None
        self._read_at = 0  # the newest revision ``known`` reflects

    async def load(self) -> tuple[Stored, list[codec.KeyValue], int]:
        """The metadata (remembering each key's revision), every key under the prefix, and
        the revision read at."""
        kvs, revision = await self.client.range_prefix(self.prefix)
        values, revisions = {}, {}
        for kv in kvs:
            key = kv.key[len(self.prefix) :]
            if key.startswith(codec.METADATA):
                values[key], revisions[key] = kv.value, kv.mod_revision
        try:
            stored = codec.decode_stored(values)
        except codec.EtcdReplyError as exc:
            raise EtcdError(str(exc)) from exc
        if revision >= self._read_at:  # (an older read finishing late changes nothing)
            self.known, self.revisions, self._read_at = values, revisions, revision
        return stored, kvs, revision

    async def save(
        self,
        placements: list[TopicPlacement],
        deleted: dict[str, float],
        removing: dict[str, float],
        switches: Switches,
    ) -> None:
        """Write what changed since the last load or save, fenced (see the module doc).
        Raises :class:`UnavailableError` (an :class:`EtcdError` when etcd is unreachable)."""
        if self.fence is None:
            raise UnavailableError("not the leader lookupd: metadata is read-only here")
        wanted = codec.encode_stored(
            Stored({p.name: p for p in placements}, deleted, removing, switches)
        )
        change = codec.diff(self.known, wanted)
        for body in codec.txn_batches(change, self.prefix, self.revisions, self.fence):
            succeeded, revision = await self.client.txn(body)
            if not succeeded:
                raise UnavailableError(
                    "etcd: compare-and-swap failed (no longer the leader, or the metadata "
                    "changed behind this lookupd)"
                )
            self._read_at = max(self._read_at, revision)
            for op in body["success"]:
                if "request_put" in op:
                    key = codec.unb64(op["request_put"]["key"]).decode()[len(self.prefix) :]
                    self.known[key], self.revisions[key] = wanted[key], revision
                else:
                    key = codec.unb64(op["request_delete_range"]["key"]).decode()
                    key = key[len(self.prefix) :]
                    self.known.pop(key, None)
                    self.revisions.pop(key, None)


class HighAvailability:
    """The election, the lease and the followers' cache (see the module doc)."""

    def __init__(
        self,
        cluster: Cluster,
        client: EtcdClient,
        cluster_id: str,
        supervisor: Supervisor,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self.cluster = cluster
        self.client = client
        self.prefix = codec.cluster_prefix(cluster_id)
        self.store = EtcdStore(client, self.prefix)
        self.supervisor = supervisor
        self.clock = clock
        self.lease = Lease()
        self.role = Role.FOLLOWER
        self.me: codec.NodeInfo | None = None
        #: the leader as last read from etcd (None: none, or not known)
        self.leader: codec.NodeInfo | None = None
        self._leader_key: tuple[str, int] | None = None
        #: every live lookupd as last read from etcd
        self.lookupds: list[codec.NodeInfo] = []
        self._last_contact = -1e9
        self._supervising: trio.CancelScope | None = None
        self._reload = trio.Event()
        cluster.saver = self.store.save
        cluster.leading = False

    @property
    def leader_key(self) -> str:
        return self.prefix + codec.LEADER

    def etcd_healthy(self) -> bool:
        """etcd answered this lookupd lately (within the time a leader waits before it
        steps down)."""
        return self.clock() - self._last_contact < self.lease.ttl - self.lease.margin

    def _contact(self) -> None:
        self._last_contact = self.clock()

    async def load(self) -> None:
        """Start-up: read the metadata from etcd. Raises :class:`EtcdError` (fatal then)."""
        stored, kvs, _ = await self.store.load()
        self._contact()
        self.cluster.follow(stored)
        self._read_lookupds(kvs)
        log.info(
            "metadata: %d topic(s) from etcd %s%s", len(stored.placements), self.client, self.prefix
        )

    async def run(self, me: codec.NodeInfo) -> None:
        """Run the election and the cache until cancelled; revoke the lease on the way out."""
        self.me = me
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._lease_loop)
                nursery.start_soon(self._campaign_loop, nursery)
                nursery.start_soon(self._guard)
                nursery.start_soon(self._cache_loop)
        finally:
            self._step_down("shutting down")
            if self.lease.id:
                with trio.move_on_after(1.0) as scope:
                    scope.shield = True
                    try:
                        await self.client.revoke(self.lease.id)
                    except EtcdError as exc:
                        log.warning("lease not revoked: %s", exc)

    # ------------------------------------------------------------------ lease

    async def _lease_loop(self) -> None:
        assert self.me is not None
        while True:
            sent_at = self.clock()
            try:
                if not self.lease.id:
                    lease_id, ttl = await self.client.grant(TTL)
                    self.lease.granted(lease_id, ttl, sent_at)
                    key = self.prefix + codec.LOOKUPDS + self.me.id
                    await self.client.put(key, self.me.to_json(), lease_id)
                    log.info(
                        "etcd: lease %x granted (TTL %ds), registered as %s",
                        lease_id,
                        ttl,
                        self.me.id,
                    )
                else:
                    ttl = await self.client.keepalive(self.lease.id)
                    if not self.lease.kept_alive(ttl, sent_at):
                        log.warning("etcd: lease expired")
                        self._step_down("lease expired")
                        continue
                if not self.etcd_healthy():
                    log.warning("etcd: reachable again")
                self._contact()
            except EtcdError as exc:
                if self.etcd_healthy():  # once per outage, not once per keepalive
                    log.warning("etcd: keepalive failed (retrying): %s", exc)
            await trio.sleep(KEEPALIVE_INTERVAL)

    async def _guard(self) -> None:
        """A leader whose lease may be about to expire stops leading at once."""
        while True:
            if self.role is Role.LEADER and not self.lease.valid(self.clock()):
                self._step_down("no keepalive answered in time (etcd unreachable?)")
            await trio.sleep(GUARD_TICK)

    # ------------------------------------------------------------------ election

    async def _campaign_loop(self, nursery: trio.Nursery) -> None:
        assert self.me is not None
        while True:
            try:
                kv, _ = await self.client.get(self.leader_key)
                self._contact()
                self._note_leader(kv)
                role, campaign = decide_role(self.lease, self.clock(), self._leader_key, self.me.id)
                if campaign:
                    kv = await self._campaign()
                    self._note_leader(kv)
                    role, _ = decide_role(self.lease, self.clock(), self._leader_key, self.me.id)
                if role is Role.LEADER and self.role is Role.FOLLOWER and kv is not None:
                    await self._take_over(nursery, kv.create_revision)
                elif role is Role.FOLLOWER and self.role is Role.LEADER:
                    self._step_down("another lookupd leads")
            except EtcdError as exc:
                log.debug("etcd: election: %s", exc)
            await trio.sleep(CAMPAIGN_INTERVAL)

    async def _campaign(self) -> codec.KeyValue | None:
        """Create the leader key on this lookupd's lease if there is none; the key after."""
        assert self.me is not None
        body = {
            "compare": [codec.compare_create(self.leader_key, 0)],
            "success": [codec.put_op(self.leader_key, self.me.to_json(), self.lease.id)],
        }
        succeeded, _ = await self.client.txn(body)
        kv, _ = await self.client.get(self.leader_key)
        if succeeded:
            log.info("election: won (lease %x)", self.lease.id)
        return kv

    def _note_leader(self, kv: codec.KeyValue | None) -> None:
        if kv is None:
            self._leader_key, self.leader = None, None
            return
        try:
            node = codec.parse_node(kv.value)
        except codec.EtcdReplyError as exc:
            log.error("etcd: %s", exc)
            return
        self._leader_key = (node.id, kv.lease)
        self.leader = codec.NodeInfo(
            node.id, node.ip, node.tcp_port, node.http_port, kv.create_revision
        )

    async def _take_over(self, nursery: trio.Nursery, leader_revision: int) -> None:
        """Lead: read the metadata as saved (the last leader's word), then run the supervisor."""
        stored, kvs, _ = await self.store.load()
        if not self.lease.valid(self.clock()):
            return
        self.store.fence = (self.leader_key, leader_revision)
        self.cluster.follow(stored)
        self._read_lookupds(kvs)
        self.cluster.leading = True
        self.role = Role.LEADER
        self._supervising = await nursery.start(self._supervise)
        log.warning("election: this lookupd is the leader (%d topic(s))", len(stored.placements))

    async def _supervise(self, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        with trio.CancelScope() as scope:
            task_status.started(scope)
            await self.supervisor.run()

    def _step_down(self, why: str) -> None:
        if self.role is not Role.LEADER:
            return
        self.role = Role.FOLLOWER
        self.cluster.leading = False
        self.store.fence = None
        if self._supervising is not None:
            self._supervising.cancel()
            self._supervising = None
        if self.leader is not None and self.me is not None and self.leader.id == self.me.id:
            self._leader_key, self.leader = None, None  # /listlookup: no longer itself
        self._reload.set()  # the cache follows etcd again
        log.warning("election: no longer the leader: %s", why)

    # ------------------------------------------------------------------ followers' cache

    async def _cache_loop(self) -> None:
        while True:
            try:
                revision = await self._reload_cache()
                with trio.move_on_after(RELOAD_EVERY):
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self._watch, revision, nursery.cancel_scope)
                        await self._reload.wait()
                        nursery.cancel_scope.cancel()
                self._reload = trio.Event()
            except EtcdError as exc:
                log.debug("etcd: cache: %s", exc)
                await trio.sleep(RETRY_AFTER)

    async def _watch(self, revision: int, done: trio.CancelScope) -> None:
        try:
            async for _ in self.client.watch(self.prefix, revision + 1):
                self._reload.set()
                return
        except EtcdError as exc:
            log.debug("etcd: watch: %s", exc)
            await trio.sleep(RETRY_AFTER)
        done.cancel()

    async def _reload_cache(self) -> int:
        """Read the prefix again; a follower serves it. Returns the revision read at."""
        if self.cluster.leading:  # the leader's copy is the newest: only the lookupds
            kvs, revision = await self.client.range_prefix(self.prefix)
        else:
            stored, kvs, revision = await self.store.load()
            if not self.cluster.leading:  # (it may have taken over meanwhile)
                self.cluster.follow(stored)
        self._contact()
        self._read_lookupds(kvs)
        return revision

    def _read_lookupds(self, kvs: list[codec.KeyValue]) -> None:
        nodes = []
        for kv in kvs:
            if kv.key.startswith(self.prefix + codec.LOOKUPDS):
                try:
                    nodes.append(codec.parse_node(kv.value))
                except codec.EtcdReplyError as exc:
                    log.error("etcd: %s", exc)
            elif kv.key == self.leader_key:
                self._note_leader(kv)
        self.lookupds = sorted(nodes, key=lambda n: n.id)

    # ------------------------------------------------------------------ for the HTTP API

    def listlookup(self) -> dict[str, object]:
        """youzan's ``/listlookup``: the live lookupds and the leader."""
        leader = self.leader.listed() if self.leader is not None else {}
        return {"lookupdnodes": [n.listed() for n in self.lookupds], "lookupdleader": leader}

    def leader_http_address(self) -> str | None:
        """Where to forward a write: the current leader's HTTP address (None if it is this
        lookupd, or not known)."""
        if self.leader is None or self.me is None or self.leader.id == self.me.id:
            return None
        return self.leader.http_address
