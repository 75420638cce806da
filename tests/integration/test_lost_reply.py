"""A publish whose acknowledgement is lost on the wire, retried by pnsq's client: stored once.

A proxy in the test sits between the client and a real pnsq nsqd, which advertises the proxy's
port (``--broadcast-tcp-port``), so ``/partitions`` and the client's seed address both name
the proxy and every byte the client sends to the node's TCP port goes through it (the test
checks the publish lines the proxy saw against the client's own count of tries; the client's
``/partitions`` lookups go to nsqd's HTTP port directly). The proxy forwards everything, but
swallows nsqd's reply to one chosen publish, after nsqd stored it, and then either resets the
client's connection (an RST) or keeps it silent until the client's reply timeout fires. The
client retries on its own with the same partition and number; nsqd answers ``DUPLICATE`` and
stores nothing. With idempotence switched off (the control), the same retry stores the
message twice.
"""

from __future__ import annotations

import base64
import json
import socket
import struct
import threading
import urllib.request
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from types import TracebackType
from typing import Final, Literal, Self

import pytest
import trio

from pnsq.client import open_producer
from pnsq.client.blocking import Producer as BlockingProducer
from protocol.frames import FRAME_HEADER, HEARTBEAT_DATA, MAGIC_V2, FrameType
from tests.daemons import Daemon, pnsq_lookupd, pnsq_nsqd
from tests.integration.lookupd_helpers import get_json, post, roles, wait_for
from tests.youzan import create_topic

pytestmark = pytest.mark.integration

BODY_SIZE: Final = struct.Struct(">I")  # a command's body size, after its line
LINGER: Final = struct.Struct("ii")  # struct linger: l_onoff, l_linger (seconds)
#: the commands whose line is followed by a sized body
SIZED: Final = frozenset(
    {b"IDENTIFY", b"AUTH", b"PUB", b"MPUB", b"DPUB", b"PUB_TRACE", b"MPUB_TRACE", b"PUB_EXT"}
    | {b"MPUB_EXT"}
)
PUBLISHES: Final = SIZED - {b"IDENTIFY", b"AUTH"}
#: the commands nsqd never answers
UNANSWERED: Final = frozenset({b"NOP", b"RDY", b"FIN", b"REQ", b"TOUCH"})
#: seconds a client waits for a reply here, so that a silent connection fails fast
REPLY_TIMEOUT: Final = 1.0

After = Literal["reset", "stall"]


@dataclass(frozen=True)
class Drop:
    """Swallow nsqd's reply to the topic's publish number ``index`` (0: its first), then
    reset the client's connection or keep it silent."""

    index: int
    after: After


class Commands:
    """The client's side of the stream split into commands (magic first): the lines of those
    nsqd answers, in order."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._magic = False

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        if not self._magic:
            if len(self._buf) < len(MAGIC_V2):
                return []
            assert self._buf[: len(MAGIC_V2)] == MAGIC_V2
            del self._buf[: len(MAGIC_V2)]
            self._magic = True
        lines = []
        while (end := self._buf.find(b"\n")) >= 0:
            line = bytes(self._buf[:end])
            size = end + 1
            name = line.split(b" ", 1)[0]
            if name in SIZED:
                if len(self._buf) < size + BODY_SIZE.size:
                    break
                size += BODY_SIZE.size + BODY_SIZE.unpack_from(self._buf, size)[0]
                if len(self._buf) < size:
                    break
            del self._buf[:size]
            if name not in UNANSWERED:
                lines.append(line)
        return lines


class Frames:
    """nsqd's side of the stream split into frames: ``(frame type, data, the frame's bytes)``."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes, bytes]]:
        self._buf += data
        frames = []
        while len(self._buf) >= FRAME_HEADER.size:
            size, frame_type = FRAME_HEADER.unpack_from(self._buf)
            total = BODY_SIZE.size + size  # the size field counts what follows it
            if len(self._buf) < total:
                break
            raw = bytes(self._buf[:total])
            del self._buf[:total]
            frames.append((frame_type, raw[FRAME_HEADER.size :], raw))
        return frames


class Session:
    """One client connection and its own connection to nsqd, pumped by two threads."""

    def __init__(self, proxy: LossyProxy, client: socket.socket) -> None:
        assert proxy.upstream is not None
        self.proxy = proxy
        self.client = client
        self.nsqd = socket.create_connection(proxy.upstream)
        #: per command nsqd will answer, in order: (topic, publish index), or None
        self.waiting: deque[tuple[str, int] | None] = deque()
        self.silent = False

    def to_nsqd(self) -> None:
        commands = Commands()
        try:
            while data := self.client.recv(65536):
                for line in commands.feed(data):  # noted before nsqd can answer it
                    self.waiting.append(self.proxy.note(line))
                self.nsqd.sendall(data)
        except OSError:
            pass  # the connection ended: reset by a side, or shut down by the other pump
        finally:
            self.shutdown()

    def to_client(self) -> None:
        frames = Frames()
        try:
            while data := self.nsqd.recv(65536):
                out: list[bytes] = []
                for frame_type, body, raw in frames.feed(data):
                    answer = frame_type != FrameType.MESSAGE and body != HEARTBEAT_DATA
                    publish = self.waiting.popleft() if answer else None
                    if publish is not None and (drop := self.proxy.drop_for(publish)):
                        self.proxy.swallowed.append((publish, body))
                        if drop.after == "reset":
                            self.client.sendall(b"".join(out))
                            self.reset()
                            return
                        self.silent = True  # the client hears nothing more on it
                    if not self.silent:
                        out.append(raw)
                self.client.sendall(b"".join(out))
        except OSError:
            pass  # the connection ended: the client gave up on it, or nsqd closed it
        finally:
            self.shutdown()

    def reset(self) -> None:
        """Abort the client's connection: it gets an RST, not a FIN."""
        self.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER.pack(1, 0))
        self.client.shutdown(socket.SHUT_RD)  # wakes the other pump; sends nothing
        self.client.close()
        self.shutdown()

    def shutdown(self) -> None:
        for sock in (self.client, self.nsqd):
            with suppress(OSError):  # not connected any more, or closed by reset()
                sock.shutdown(socket.SHUT_RDWR)


class LossyProxy:
    """A TCP proxy on 127.0.0.1 (port 0) to nsqd's TCP port at ``upstream`` (set once nsqd
    runs), swallowing the replies to the publishes in :attr:`drops`. For tests only: it trusts
    both sides."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.port: int = self._listener.getsockname()[1]
        self.upstream: tuple[str, int] | None = None
        #: topic -> the publish whose reply is swallowed
        self.drops: dict[str, Drop] = {}
        #: topic -> the lines of its publishes seen, in order
        self.publishes: dict[str, list[str]] = {}
        #: (topic, publish index) and the reply swallowed
        self.swallowed: list[tuple[tuple[str, int], bytes]] = []
        #: what ended a thread of the proxy other than the end of a connection
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sessions: list[Session] = []
        self._threads: list[threading.Thread] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def note(self, line: bytes) -> tuple[str, int] | None:
        """A command the client sent: its topic and index if it is a publish."""
        name, _, rest = line.partition(b" ")
        if name not in PUBLISHES:
            return None
        topic = rest.split(b" ", 1)[0].decode()
        with self._lock:
            seen = self.publishes.setdefault(topic, [])
            seen.append(line.decode())
            return topic, len(seen) - 1

    def drop_for(self, publish: tuple[str, int]) -> Drop | None:
        drop = self.drops.get(publish[0])
        return drop if drop is not None and drop.index == publish[1] else None

    def __enter__(self) -> Self:
        self._spawn(self._accept)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        with self._lock:
            sessions = list(self._sessions)
        for session in sessions:
            session.shutdown()
        for thread in list(self._threads):
            thread.join(10)
        for session in sessions:
            session.client.close()
            session.nsqd.close()
        self._listener.close()

    def _spawn(self, target: Callable[[], None]) -> None:
        def run() -> None:
            try:
                target()
            except BaseException as exc:
                self.errors.append(exc)  # checked by the test
                raise

        thread = threading.Thread(target=run, daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            client.settimeout(None)
            session = Session(self, client)
            with self._lock:
                self._sessions.append(session)
            self._spawn(session.to_nsqd)
            self._spawn(session.to_client)


@dataclass(frozen=True)
class Proxied:
    """An nsqd reached through the proxy, and the lookupd it registers with (None: none, the
    client learns the partitions from the node's HTTP address)."""

    proxy: LossyProxy
    node: Daemon
    lookupd: Daemon | None = None

    def create_topic(self, topic: str) -> None:
        """``topic`` with one partition, led by the node."""
        if self.lookupd is None:
            create_topic(self.node.http_address, topic, 1)
            return
        query = f"/topic/create?topic={topic}&partition_num=1&replicator=1"
        assert post(self.lookupd, query)[0] == 200
        wait_for(lambda: roles(self.node, topic) == {0: "leader"}, what=f"{topic} led")

    def stored(self, topic: str) -> list[bytes]:
        """The bodies in the topic's partition, as its log holds them."""
        url = (
            f"http://{self.node.http_address}/partition/read?topic={topic}&partition=0"
            "&offset=0&max=100&format=ndjson"
        )
        with urllib.request.urlopen(url, timeout=10) as reply:
            lines = reply.read().splitlines()
        return [base64.b64decode(json.loads(line)["body"]) for line in lines]


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxied]:
    """One nsqd behind one proxy for the module (each test publishes to its own topic)."""
    with LossyProxy() as proxy:
        path = tmp_path_factory.mktemp("lost-reply") / "nsqd"
        node = pnsq_nsqd(path, f"--broadcast-tcp-port={proxy.port}").start()
        proxy.upstream = ("127.0.0.1", node.tcp_port)
        try:
            yield Proxied(proxy, node)
        finally:
            node.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxied]:
    """pnsq lookupd and one nsqd registered with it, behind one proxy: the client is given
    lookupd's address and reaches the leader where lookupd and the leader advertise it."""
    work = tmp_path_factory.mktemp("lost-reply-cluster")
    with LossyProxy() as proxy:
        lookupd = pnsq_lookupd(work / "lookupd").start()
        try:
            flags = (
                f"--lookupd-tcp-address={lookupd.tcp_address}",
                f"--broadcast-tcp-port={proxy.port}",
            )
            node = pnsq_nsqd(work / "a", *flags).start()
            proxy.upstream = ("127.0.0.1", node.tcp_port)
            try:
                wait_for(lambda: len(get_json(lookupd, "/nodes")["producers"]) == 1, what="node")
                yield Proxied(proxy, node, lookupd)
            finally:
                node.stop()
        finally:
            lookupd.stop()


async def trio_publish(
    where: Proxied, topic: str, batches: list[list[bytes]], *, idempotent: bool
) -> dict[str, int]:
    lookupd = where.lookupd
    async with open_producer(
        where.proxy.address,
        http_address=where.node.http_address if lookupd is None else None,
        lookupd_http_address=lookupd.http_address if lookupd is not None else None,
        idempotent=idempotent,
        reply_timeout=REPLY_TIMEOUT,
    ) as producer:
        route = await producer.partitions(topic)
        assert route is not None
        assert [p.tcp_address for p in route.partitions] == [where.proxy.address]
        for batch in batches:
            if len(batch) == 1:
                await producer.publish(topic, batch[0])
            else:
                await producer.mpublish(topic, batch)
        return dict(producer.stats)


def blocking_publish(
    where: Proxied, topic: str, batches: list[list[bytes]], *, idempotent: bool
) -> dict[str, int]:
    address, http = where.proxy.address, where.node.http_address
    with BlockingProducer(address, http, timeout=REPLY_TIMEOUT, idempotent=idempotent) as nsq:
        assert [p.tcp_address for p in nsq.partitions(topic).partitions] == [address]
        for batch in batches:
            if len(batch) == 1:
                nsq.publish(topic, batch[0])
            else:
                nsq.mpublish(topic, batch)
        return dict(nsq.stats)


def publish_losing_a_reply(
    where: Proxied, topic: str, client: str, batch: int, after: After, *, idempotent: bool
) -> tuple[list[list[bytes]], dict[str, int]]:
    """Publish three batches of ``batch`` messages (``before``, ``lost``, ``after``) to a new
    topic of one partition through the proxy, which swallows the reply to the second; returns
    the batches and the producer's stats."""
    proxy = where.proxy
    where.create_topic(topic)
    advertised = get_json(where.node, f"/partitions?topic={topic}")
    assert advertised["node"]["tcp_port"] == proxy.port  # the node is reached at the proxy
    proxy.drops[topic] = Drop(index=1, after=after)
    batches = [
        [b"%s-%d" % (name, n) for n in range(batch)] for name in (b"before", b"lost", b"after")
    ]
    if client == "trio":
        stats = trio.run(lambda: trio_publish(where, topic, batches, idempotent=idempotent))
    else:
        stats = blocking_publish(where, topic, batches, idempotent=idempotent)
    # the proxy swallowed nsqd's acknowledgement of the second publish, which it had stored
    assert proxy.swallowed.count(((topic, 1), b"OK")) == 1
    # every try went through the proxy: the three publishes, and one retry of the second
    seen = proxy.publishes[topic]
    assert len(seen) == 4 == 3 + stats["retries"], seen
    assert proxy.errors == []
    return batches, stats


@pytest.mark.parametrize("after", ["reset", "stall"])
@pytest.mark.parametrize(
    ("setup", "client", "batch"),
    [
        ("standalone", "trio", 1),
        ("standalone", "trio", 3),
        ("standalone", "blocking", 1),
        ("cluster", "trio", 1),
    ],
)
def test_a_retry_after_a_lost_acknowledgement_is_stored_once(
    request: pytest.FixtureRequest, setup: str, client: str, batch: int, after: After
) -> None:
    where: Proxied = request.getfixturevalue(setup)
    topic = f"once-{setup}-{client}-{batch}-{after}"
    batches, stats = publish_losing_a_reply(where, topic, client, batch, after, idempotent=True)
    assert where.stored(topic) == [body for bodies in batches for body in bodies]
    assert stats == {"published": 3 * batch, "retries": 1, "duplicates": batch}
    cmd = "PUB" if batch == 1 else "MPUB"
    numbers = [0, batch, batch, 2 * batch]  # each batch's first number; the retry keeps its own
    assert where.proxy.publishes[topic] == [f"{cmd} {topic} 0 {n}" for n in numbers]


@pytest.mark.parametrize("after", ["reset", "stall"])
@pytest.mark.parametrize("client", ["trio", "blocking"])
def test_without_idempotence_the_same_retry_stores_the_message_twice(
    standalone: Proxied, client: str, after: After
) -> None:
    topic = f"twice-{client}-{after}"
    _, stats = publish_losing_a_reply(standalone, topic, client, 1, after, idempotent=False)
    assert standalone.proxy.publishes[topic][1:3] == [f"PUB {topic} 0"] * 2  # not numbered
    assert standalone.stored(topic) == [b"before-0", b"lost-0", b"lost-0", b"after-0"]
    assert stats == {"published": 3, "retries": 1, "duplicates": 0}
