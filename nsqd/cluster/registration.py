"""nsqd's registration with one lookupd over protocol V1: the connection, IDENTIFY, and keeping
the lookupd's REGISTERs equal to the broker's topics and channels.

As nsqd's ``lookupPeer`` does: send ``"  V1"`` and IDENTIFY ``{version, tcp_port, http_port,
hostname, broadcast_address}``, REGISTER every topic and channel, PING every 15 s; every reply
is due within 1 s (of the command, or of the reply before it; 5 s from pnsq's lookupd once
registered), and any error ends the registration (the caller,
:class:`~nsqd.cluster.lookup.LookupClient`, reconnects). Whenever the broker's topics, channels
or placements change (:class:`~nsqd.broker.changes.Changes`), :func:`keep_registered` compares
them with what it registered and sends REGISTER/UNREGISTER for the difference at once, not on a
timer.

pnsq's extension: the IDENTIFY body lists ``"pnsq_extensions": ["partitions"]``; only if the
lookupd's reply lists it too (:func:`speaks_partitions`) are registrations sent as ``REGISTER
<topic> <partition> [<channel>]`` (youzan's form), one per partition led here. A node leading
thousands of partitions sends that many lines when it starts or takes a topic on: they go
:data:`PIPELINE` at a time (sent together, the replies read in order), and a PING that falls
due goes between two such groups, never after the whole lot (pnsq's lookupd takes a node that
stays silent for its heartbeat timeout, 2 s, for dead).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import trio

from pnsq._netio.handshake import run_handshake
from protocol.cluster_auth import DIALER, Handshake
from protocol.lookup_v1 import (
    EXT_PARTITIONS,
    EXTENSIONS_KEY,
    MAGIC_V1,
    RACK_KEY,
    ResponseReader,
    encode_command,
    encode_identify,
)

from ..broker import Broker

log = logging.getLogger("nsqd.lookup")

#: (topic, partition, channel); partition is None on a stock lookupd, channel None for the topic
Key = tuple[str, int | None, str | None]

COMMAND_TIMEOUT = 1.0  # nsqd's lookupPeer: 1 s read/write deadlines per command
#: to pnsq's lookupd, once registered: a reply later than nsqd's 1 s ended the registration,
#: and lookupd takes a closed registration for a dead node (it fails it over at once), so a
#: lookupd slowed down by a burst of work turned its own delay into failovers of every node
PNSQ_COMMAND_TIMEOUT = 5.0
PING_INTERVAL = 15.0
#: to pnsq's lookupd, which takes a node that stops pinging for ~2 s as dead (failover)
PNSQ_PING_INTERVAL = 0.5
#: REGISTER/UNREGISTER lines sent together before their replies are read
PIPELINE = 64


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
    rack: str = ""  # --rack: sent to pnsq's lookupd, which places copies on distinct racks

    def identify_body(self, extensions: bool = True) -> dict[str, object]:
        """IDENTIFY's JSON: nsqd's five keys plus the extensions pnsq speaks (none without
        ``extensions``: to a lookupd taken for a stock nsqlookupd)."""
        body: dict[str, object] = {
            "version": self.version,
            "tcp_port": self.tcp_port,
            "http_port": self.http_port,
            "hostname": self.hostname,
            "broadcast_address": self.broadcast_address,
        }
        if extensions:
            body[EXTENSIONS_KEY] = [EXT_PARTITIONS]
            if self.rack:
                body[RACK_KEY] = self.rack
        return body

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


def speaks_partitions(info: dict[str, object]) -> bool:
    """The lookupd's IDENTIFY reply lists pnsq's partitions extension."""
    extensions = info.get(EXTENSIONS_KEY)
    return isinstance(extensions, list) and EXT_PARTITIONS in extensions


def lookupd_http_address(host: str, info: dict[str, object]) -> str:
    """``host:http_port`` of a pnsq lookupd reached at ``host``, from its IDENTIFY reply.
    Raises :class:`LookupPeerError` when the reply names no usable port (pnsq's lookupd
    before 2026-11-27 answered 0 while its HTTP listener was not bound yet): the caller
    reconnects rather than poll ``host:0`` for the connection's life."""
    port = info.get("http_port")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise LookupPeerError(f"IDENTIFY reply names no HTTP port (http_port {port!r})")
    where = f"[{host}]" if ":" in host else host
    return f"{where}:{port}"


class V1Connection:
    """One V1 connection: a command, then its size-prefixed reply within the deadline."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.reader = ResponseReader()
        self.timeout = COMMAND_TIMEOUT  # seconds each reply may take

    async def prove(self, secret: bytes, node_id: str) -> str:
        """With the cluster credential: the magic, then the dialer's side of the cluster
        handshake (link kind ``"  V1"``, this node proving as ``node_id``), before IDENTIFY;
        returns the identity the lookupd proved with. A lookupd without the secret (or a
        stock nsqlookupd) cannot prove it: no registration with it, and it learns nothing.

        Raises:
            HandshakeError: the lookupd refused, failed or broke the handshake.
            trio.TooSlowError: no handshake within its deadline.
        """
        await self.stream.send_all(MAGIC_V1)
        shake = Handshake(secret, DIALER, MAGIC_V1, node_id)
        self.reader.receive_data(await run_handshake(self.stream, shake))
        assert shake.peer_identity is not None
        return shake.peer_identity

    async def command(self, data: bytes) -> bytes:
        with trio.fail_after(self.timeout):
            await self.stream.send_all(data)
            return await self._response()

    async def ok(self, data: bytes) -> None:
        reply = await self.command(data)
        if reply != b"OK":
            raise LookupPeerError(f"{data.decode(errors='replace').strip()}: {reply!r}")

    async def ok_all(self, lines: list[bytes]) -> None:
        """Send ``lines`` together, then read one ``OK`` for each, in order (each within
        :attr:`timeout` of the one before). Raises :class:`LookupPeerError` for any other
        reply, trio.TooSlowError when one is late."""
        with trio.fail_after(self.timeout):
            await self.stream.send_all(b"".join(lines))
        for line in lines:
            with trio.fail_after(self.timeout):
                reply = await self._response()
            if reply != b"OK":
                raise LookupPeerError(f"{line.decode(errors='replace').strip()}: {reply!r}")

    async def _response(self) -> bytes:
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

    async def identify(
        self, identity: LookupIdentity, *, magic: bool = True, extensions: bool = True
    ) -> dict[str, object]:
        """The magic (unless sent already, before the cluster handshake) and IDENTIFY (with
        pnsq's extensions unless told otherwise); the lookupd's JSON reply (its own identity).
        Raises :class:`LookupPeerError` for an error reply or one that is not JSON."""
        command = encode_identify(identity.identify_body(extensions))
        reply = await self.command(MAGIC_V1 + command if magic else command)
        try:
            info = json.loads(reply)
        except (ValueError, RecursionError):
            raise LookupPeerError(f"IDENTIFY: {reply!r}") from None
        if not isinstance(info, dict):
            raise LookupPeerError(f"IDENTIFY: {reply!r}")
        return info


async def keep_registered(
    conn: V1Connection, broker: Broker, address: str, partitioned: bool
) -> None:
    """Register everything, then follow the broker's changes and PING, until an error."""
    registered: set[Key] = set()
    interval = PNSQ_PING_INTERVAL if partitioned else PING_INTERVAL
    conn.timeout = PNSQ_COMMAND_TIMEOUT if partitioned else COMMAND_TIMEOUT
    clock = broker.clock
    next_ping = clock.monotonic() + interval
    changes = broker.changes

    async def ping_if_due() -> None:
        nonlocal next_ping
        if clock.monotonic() >= next_ping:
            log.debug("LOOKUPD(%s): sending heartbeat", address)
            await conn.ok(encode_command("PING"))
            next_ping = clock.monotonic() + interval

    done = None  # the generation of the broker's changes ``registered`` follows
    while True:
        generation = changes.generation
        # (looked at again only after a change: at thousands of partitions, working out what
        # to register is a scan of every one, and the PINGs come twice a second)
        wanted = registered if generation == done else desired_registrations(broker, partitioned)
        commands = registration_commands(registered, wanted)
        for start in range(0, len(commands), PIPELINE):
            group = commands[start : start + PIPELINE]
            for _, line in group:
                log.info("LOOKUPD(%s): %s", address, line.decode(errors="replace").strip())
            await conn.ok_all([line for _, line in group])
            for key, line in group:
                if line.startswith(b"REGISTER"):
                    registered.add(key)
                else:
                    registered.discard(key)
            await ping_if_due()
        done = generation
        await ping_if_due()
        # until the broker's topics, channels or placements change, or the next PING
        with trio.move_on_after(max(next_ping - clock.monotonic(), 0.0)):
            await changes.wait_after(generation)
