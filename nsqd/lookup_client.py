"""nsqd's side of nsqlookupd (``--lookupd-tcp-address``): registration over protocol V1, and the
partition assignments of pnsq's lookupd.

For each lookupd, one task does what nsqd's ``lookupLoop``/``lookupPeer`` do: connect (1 s
timeout), send ``"  V1"`` and IDENTIFY ``{version, tcp_port, http_port, hostname,
broadcast_address}``, REGISTER every topic and channel, PING every 15 s; every command waits for
its reply with a 1 s deadline; any error closes the connection, and the task reconnects (0.5 s,
doubling to 5 s) and registers everything again, so nsqd keeps working while a lookupd is down
and a restarted lookupd rebuilds its view. Whenever the broker's topics, channels or placements
change (:class:`~nsqd.broker.changes.Changes`), the task compares them with what it registered
and sends REGISTER/UNREGISTER for the difference at once, not on a timer.

pnsq's extension (invisible to a stock nsqlookupd, which ignores unknown IDENTIFY keys and gets
no other command): the IDENTIFY body lists ``"pnsq_extensions": ["partitions"]``; only if the
lookupd's reply lists it too are registrations sent as ``REGISTER <topic> <partition>
[<channel>]`` (youzan's form), one per partition led here, and ``GET /pnsq/assignments?node=
<broadcast_address>:<tcp_port>&after=<version>`` is long-polled on the lookupd's HTTP port (at
the host of ``--lookupd-tcp-address``, the port from the IDENTIFY reply): lookupd answers as
soon as a newer placement is on its disk, and the broker applies it
(:mod:`nsqd.broker.assignments`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass

import httpx
import trio

from pnsq._goflag.addresses import split_host_port
from protocol.lookup import (
    ACCEPT_V1,
    ASSIGNMENTS_PATH,
    LISTLOOKUP_PATH,
    LookupdNode,
    parse_assignments,
    parse_deleted,
    parse_listlookup,
)
from protocol.lookup_v1 import (
    EXT_PARTITIONS,
    EXTENSIONS_KEY,
    MAGIC_V1,
    ResponseReader,
    encode_command,
    encode_identify,
)

from .broker import Broker, StorageError
from .core.errors import BrokerError
from .replication.progress import ProgressTracker

log = logging.getLogger("nsqd.lookup")

#: (topic, partition, channel); partition is None on a stock lookupd, channel None for the topic
Key = tuple[str, int | None, str | None]

DIAL_TIMEOUT = 1.0  # nsqd's lookupPeer: net.DialTimeout(..., time.Second)
COMMAND_TIMEOUT = 1.0  # and 1 s read/write deadlines per command
PING_INTERVAL = 15.0
#: to pnsq's lookupd, which takes a node that stops pinging for ~2 s as dead (failover)
PNSQ_PING_INTERVAL = 0.5
#: how often a leader tells pnsq's lookupd about its followers when nothing changed
PROGRESS_INTERVAL = 0.25
PROGRESS_REPEAT = 5.0
PROGRESS_PATH = "/pnsq/progress"
LEAVING_PATH = "/pnsq/leaving"
ASSIGNMENTS_WAIT = 30.0  # seconds lookupd may hold an assignments long-poll
DISCOVER_INTERVAL = 5.0  # seconds between two /listlookup of a lookupd


class LookupPeerError(Exception):
    """The lookupd refused a command or sent something unreadable."""


@dataclass(frozen=True, slots=True)
class LookupIdentity:
    """What nsqd tells a lookupd about itself (the broadcast ports)."""

    version: str
    tcp_port: int
    http_port: int
    hostname: str
    broadcast_address: str

    def identify_body(self) -> dict[str, object]:
        """IDENTIFY's JSON: nsqd's five keys plus the extensions pnsq speaks."""
        return {
            "version": self.version,
            "tcp_port": self.tcp_port,
            "http_port": self.http_port,
            "hostname": self.hostname,
            "broadcast_address": self.broadcast_address,
            EXTENSIONS_KEY: [EXT_PARTITIONS],
        }

    @property
    def node_id(self) -> str:
        """``broadcast_address:tcp_port``, this node's name in placements."""
        return f"{self.broadcast_address}:{self.tcp_port}"


def desired_registrations(broker: Broker, partitioned: bool) -> set[Key]:
    """What should be registered: every topic, and every channel of it (per local partition
    when ``partitioned``)."""
    keys: set[Key] = set()
    for topic in broker.list_topics():
        name = topic.name
        if topic.deleted:
            continue
        # pnsq's lookupd: the partitions led here (lookupd's producers are the leaders)
        parts: list[int | None] = [p.number for p in topic.led] if partitioned else [None]
        for part in parts:
            keys.add((name, part, None))
            keys.update((name, part, channel) for channel in topic.channels)
    return keys


def _order(key: Key) -> tuple[str, int, str]:
    topic, part, channel = key
    return topic, -1 if part is None else part, channel or ""


def registration_commands(old: set[Key], new: set[Key]) -> list[tuple[Key, bytes]]:
    """REGISTER/UNREGISTER lines turning ``old`` into ``new``: channels leave before their
    topic, topics arrive before their channels."""
    gone = sorted(old - new, key=_order)
    came = sorted(new - old, key=_order)
    commands = [(k, encode_command("UNREGISTER", *k)) for k in gone if k[2] is not None]
    commands += [(k, encode_command("UNREGISTER", *k)) for k in gone if k[2] is None]
    commands += [(k, encode_command("REGISTER", *k)) for k in came if k[2] is None]
    commands += [(k, encode_command("REGISTER", *k)) for k in came if k[2] is not None]
    return commands


class _Connection:
    """One V1 connection: a command, then its size-prefixed reply within the deadline."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.reader = ResponseReader()

    async def command(self, data: bytes) -> bytes:
        with trio.fail_after(COMMAND_TIMEOUT):
            await self.stream.send_all(data)
            while True:
                try:
                    reply = self.reader.next_response()
                except ValueError as exc:
                    raise LookupPeerError(str(exc)) from None
                if reply is not None:
                    return reply
                chunk = await self.stream.receive_some(65536)
                if not chunk:
                    raise LookupPeerError("connection closed by lookupd")
                self.reader.receive_data(chunk)

    async def ok(self, data: bytes) -> None:
        reply = await self.command(data)
        if reply != b"OK":
            raise LookupPeerError(f"{data.decode(errors='replace').strip()}: {reply!r}")


class LookupClient:
    """Keeps this nsqd registered with every lookupd in ``addresses`` (see the module
    docstring). Run :meth:`run` in a nursery; :meth:`set_addresses` changes the list."""

    def __init__(
        self,
        broker: Broker,
        identity: LookupIdentity,
        addresses: Iterable[str],
        *,
        poll_interval: float = 1.0,
        replica_lag_max: float = 10.0,
    ) -> None:
        self.broker = broker
        self.progress = ProgressTracker(replica_lag_max)
        self.identity = identity
        self.addresses = list(dict.fromkeys(addresses))  # as configured (--lookupd-tcp-address)
        self.poll_interval = poll_interval
        self._scopes: dict[str, trio.CancelScope] = {}
        self._pnsq_http: dict[str, str] = {}  # lookupd address -> its HTTP address (pnsq's)
        #: lookupd address -> the lookupds its /listlookup named (TCP addresses) that are not
        #: configured: registered with as well (an HA lookupd's peers)
        self._discovered: dict[str, set[str]] = {}
        #: lookupd address -> (broadcast address, TCP port) as the lookupd names itself
        self._self_named: dict[str, tuple[str, int]] = {}
        self._nursery: trio.Nursery | None = None
        httpx_log = logging.getLogger("httpx")
        if httpx_log.level == logging.NOTSET:  # not one INFO line per assignments poll
            httpx_log.setLevel(logging.WARNING)

    def pnsq_http_addresses(self) -> list[str]:
        """HTTP addresses of the pnsq lookupds this node has registered with (they place
        partitions), reachable or not right now."""
        return list(self._pnsq_http.values())

    async def run(self) -> None:
        """Serve every lookupd until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self.set_addresses(self.addresses)
            await trio.sleep_forever()

    def set_addresses(self, addresses: Iterable[str]) -> None:
        """Start serving new lookupds and drop the ones no longer listed (PUT /config)."""
        self.addresses = list(dict.fromkeys(addresses))
        for source in [a for a in self._discovered if a not in self.addresses]:
            del self._discovered[source]
        self._reconcile()

    def _wanted(self) -> list[str]:
        """The configured lookupds, then those their /listlookup named."""
        found = [a for named in self._discovered.values() for a in sorted(named)]
        return list(dict.fromkeys([*self.addresses, *found]))

    def _reconcile(self) -> None:
        wanted = self._wanted()
        for address in list(self._scopes):
            if address not in wanted:
                log.info("LOOKUP(%s): removing peer", address)
                self._scopes.pop(address).cancel()
                self._pnsq_http.pop(address, None)
                self._self_named.pop(address, None)
                self._discovered.pop(address, None)
        if self._nursery is None:
            return
        for address in wanted:
            if address not in self._scopes:
                log.info("LOOKUP(%s): adding peer", address)
                scope = self._scopes[address] = trio.CancelScope()
                self._nursery.start_soon(self._peer, address, scope)

    async def _peer(self, address: str, scope: trio.CancelScope) -> None:
        with scope:
            delay = 0.5
            while True:
                started = self.broker.clock.monotonic()
                try:
                    await self._session(address)
                except* (
                    OSError,
                    trio.BrokenResourceError,
                    trio.TooSlowError,
                    LookupPeerError,
                ) as g:
                    for exc in g.exceptions:
                        log.error("LOOKUPD(%s): %s", address, str(exc) or type(exc).__name__)
                except* Exception:  # a lookupd problem must never take nsqd down
                    log.exception("LOOKUPD(%s): unexpected error", address)
                if self.broker.clock.monotonic() - started > 5.0:
                    delay = 0.5  # it was up for a while: retry soon
                await trio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _session(self, address: str) -> None:
        host, port = split_host_port(address)
        log.info("LOOKUP connecting to %s", address)
        with trio.fail_after(DIAL_TIMEOUT):
            stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            conn = _Connection(stream)
            reply = await conn.command(MAGIC_V1 + encode_identify(self.identity.identify_body()))
            try:
                info = json.loads(reply)
            except ValueError:
                raise LookupPeerError(f"IDENTIFY: {reply!r}") from None
            if not isinstance(info, dict):
                raise LookupPeerError(f"IDENTIFY: {reply!r}")
            extensions = info.get(EXTENSIONS_KEY)
            partitioned = isinstance(extensions, list) and EXT_PARTITIONS in extensions
            log.info("LOOKUPD(%s): peer info %s", address, info)
            named = (str(info.get("broadcast_address", "")), info.get("tcp_port"))
            if isinstance(named[1], int):
                self._self_named[address] = (named[0], named[1])
            async with trio.open_nursery() as nursery:
                if partitioned:  # the host we reached, which a broadcast hostname may not be
                    where = f"[{host}]" if ":" in host else host
                    http = f"{where}:{info.get('http_port')}"
                    self._pnsq_http[address] = http  # kept while it is down: it places topics
                    nursery.start_soon(self._poll_assignments, address, http)
                    nursery.start_soon(self._report_progress, address, http)
                    nursery.start_soon(self._discover, address, http)
                elif address in self._pnsq_http:
                    del self._pnsq_http[address]  # replaced by a stock nsqlookupd
                await self._keep_registered(conn, address, partitioned)

    async def _keep_registered(self, conn: _Connection, address: str, partitioned: bool) -> None:
        registered: set[Key] = set()
        interval = PNSQ_PING_INTERVAL if partitioned else PING_INTERVAL
        next_ping = self.broker.clock.monotonic() + interval
        changes = self.broker.changes
        while True:
            generation = changes.generation
            desired = desired_registrations(self.broker, partitioned)
            for key, line in registration_commands(registered, desired):
                log.info("LOOKUPD(%s): %s", address, line.decode(errors="replace").strip())
                await conn.ok(line)
                if line.startswith(b"REGISTER"):
                    registered.add(key)
                else:
                    registered.discard(key)
            if self.broker.clock.monotonic() >= next_ping:
                log.debug("LOOKUPD(%s): sending heartbeat", address)
                await conn.ok(encode_command("PING"))
                next_ping = self.broker.clock.monotonic() + interval
            # until the broker's topics, channels or placements change, or the next PING
            with trio.move_on_after(max(next_ping - self.broker.clock.monotonic(), 0.0)):
                await changes.wait_after(generation)

    async def _discover(self, address: str, http_address: str) -> None:
        """Ask the lookupd for its peers (youzan's ``/listlookup``) now and every
        :data:`DISCOVER_INTERVAL` seconds, and register with those not known yet (an HA
        lookupd names every live lookupd of its cluster; a lone one names itself)."""
        url = f"http://{http_address}{LISTLOOKUP_PATH}"
        timeout = httpx.Timeout(5.0, connect=1.0)
        async with httpx.AsyncClient(timeout=timeout) as http:
            while True:
                try:
                    reply = await http.get(url, headers={"Accept": ACCEPT_V1})
                    reply.raise_for_status()
                    nodes = parse_listlookup(reply.json())
                except (httpx.HTTPError, ValueError) as exc:
                    log.warning("LOOKUPD(%s): listlookup: %s", address, exc)
                else:
                    self._found(address, nodes)
                await trio.sleep(DISCOVER_INTERVAL)

    def _found(self, source: str, nodes: Iterable[LookupdNode]) -> None:
        """``source``'s /listlookup named ``nodes``: keep the ones that are not a lookupd
        this node already serves (under another address, e.g. a hostname)."""
        known = set(self._self_named.values())
        named = {
            node.tcp_address
            for node in nodes
            if (node.host, node.tcp_port) not in known and node.tcp_address not in self.addresses
        }
        if named != self._discovered.get(source, set()):
            for address in named - self._discovered.get(source, set()):
                log.info("LOOKUPD(%s): names lookupd %s", source, address)
            self._discovered[source] = named
            self._reconcile()

    async def _poll_assignments(self, address: str, http_address: str) -> None:
        """Long-poll lookupd's assignments: each request returns as soon as lookupd has saved
        a newer decision (or after :data:`ASSIGNMENTS_WAIT`), so a change reaches this node
        within a round trip of being persisted."""
        url = f"http://{http_address}{ASSIGNMENTS_PATH}"
        headers = {"Accept": ACCEPT_V1}
        version: int | None = None
        timeout = httpx.Timeout(ASSIGNMENTS_WAIT + 5.0, connect=1.0)
        async with httpx.AsyncClient(timeout=timeout) as client:
            while True:
                params: dict[str, str | int] = {"node": self.identity.node_id}
                if version is not None:
                    params.update(after=version, wait=int(ASSIGNMENTS_WAIT))
                try:
                    response = await client.get(url, params=params, headers=headers)
                    response.raise_for_status()
                    document = response.json()
                    await self.apply_assignments(document)
                    found = document.get("version") if isinstance(document, dict) else None
                    version = found if isinstance(found, int) else None
                except (httpx.HTTPError, ValueError) as exc:
                    log.warning("LOOKUPD(%s): assignments: %s", address, exc)
                    version = None
                if version is None:  # after an error, or an older lookupd without long-polls
                    await trio.sleep(self.poll_interval)

    async def hand_over(self) -> None:
        """A clean shutdown: ask pnsq's lookupd to move every leadership this node holds with
        in-sync followers, and return once none is left here (the caller bounds the wait)."""
        broker = self.broker

        def shared() -> list[str]:
            return [
                f"{t.name}/{p.number}"
                for t in broker.list_topics()
                for p in t.led
                if p.state.followers
            ]

        if not shared() or not self._pnsq_http:
            return
        log.info("LOOKUPD: handing over %s before exiting", ", ".join(shared()))
        params = {"node": self.identity.node_id}
        async with httpx.AsyncClient(timeout=httpx.Timeout(2.0, connect=1.0)) as client:
            for http in list(self._pnsq_http.values()):
                try:
                    reply = await client.post(f"http://{http}{LEAVING_PATH}", params=params)
                    reply.raise_for_status()
                except httpx.HTTPError as exc:
                    log.warning("LOOKUPD(%s): leaving: %s", http, exc)
        while shared():
            generation = broker.changes.generation
            await broker.changes.wait_after(generation)
        log.info("LOOKUPD: leaderships handed over")

    async def _report_progress(self, address: str, http_address: str) -> None:
        """Tell lookupd, as a leader, which followers are caught up and which lag (when that
        changes, and every :data:`PROGRESS_REPEAT` seconds)."""
        url = f"http://{http_address}{PROGRESS_PATH}"
        clock = self.broker.clock
        last: list[dict[str, object]] | None = None
        sent_at = 0.0
        async with httpx.AsyncClient(timeout=httpx.Timeout(2.0, connect=1.0)) as client:
            while True:
                now = clock.monotonic()
                reports = self.progress.reports(self.broker, now)
                if reports != last or now - sent_at >= PROGRESS_REPEAT:
                    body = {"node": self.identity.node_id, "partitions": reports}
                    try:
                        response = await client.post(url, json=body)
                        response.raise_for_status()
                        last, sent_at = reports, now
                    except httpx.HTTPError as exc:
                        log.warning("LOOKUPD(%s): progress: %s", address, exc)
                await trio.sleep(PROGRESS_INTERVAL)

    async def apply_assignments(self, document: object) -> None:
        """Hold exactly the partitions lookupd placed on this node, in their roles; delete
        the topics lookupd deleted (a copy left from before, or made while it was away).
        Raises ValueError for a document that is not lookupd's."""
        placed, deleted = parse_assignments(document), parse_deleted(document)
        try:
            self.broker.apply_assignments(self.identity.node_id, placed)
            for name in set(deleted) - {t.name for t in placed}:
                topic = self.broker.find_topic(name)
                if topic is not None and not topic.deleted:
                    log.info("TOPIC(%s): deleted on lookupd: deleting it here", name)
                    await self.broker.delete_topic(name)
        except (BrokerError, StorageError, OSError) as exc:
            log.error("cannot apply lookupd's assignments: %s", exc)
