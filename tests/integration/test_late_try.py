"""A publish given up by pnsq's client whose last try reaches nsqd late: its number is never
given to a later publish.

The client gives a publish up when its tries run out, but a try may still sit in a connection
the client left and be stored afterwards. A proxy in the test holds one publish's bytes (the
client hears nothing and gives up after its reply timeout); the next publish is refused for
the given-up number (``E_PUB_SEQUENCE_GAP ... expected sequence 1``). Before passing that
refusal on, the proxy lets the held try through and waits until nsqd stored it: the late try
arrives between the refusal and the client's answer to it. A client that renumbered the next
publish onto the given-up number would now be told ``DUPLICATE`` and the message would never be
stored (an acknowledged message lost); pnsq's client sends the given-up publish again first
(answered ``DUPLICATE``: stored once) and the next one keeps its own number.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import suppress
from typing import Final

import pytest
import trio

from pnsq.client import open_producer
from pnsq.client.blocking import Producer as BlockingProducer
from pnsq.client.errors import ConnectionClosedError, NsqError
from protocol.frames import MAGIC_V2, FrameType
from tests.daemons import pnsq_nsqd
from tests.integration.lookupd_helpers import wait_for
from tests.integration.test_lost_reply import BODY_SIZE, SIZED, Frames, Proxied
from tests.youzan import create_topic

pytestmark = pytest.mark.integration

REPLY_TIMEOUT: Final = 0.5  # seconds the client waits for a reply before it gives up a try
LATE: Final = b"late"  # the body of the publish whose bytes the proxy holds


def split_commands(buf: bytearray) -> list[bytes]:
    """The complete commands at the head of ``buf`` (taken out of it), each as its bytes."""
    commands = []
    while (end := buf.find(b"\n")) >= 0:
        size = end + 1
        if bytes(buf[:end]).split(b" ", 1)[0] in SIZED:
            if len(buf) < size + BODY_SIZE.size:
                break
            size += BODY_SIZE.size + BODY_SIZE.unpack_from(buf, size)[0]
            if len(buf) < size:
                break
        commands.append(bytes(buf[:size]))
        del buf[:size]
    return commands


class HoldingProxy:
    """A TCP proxy to nsqd that holds every byte a connection sends from the first publish of
    the topic with body ``LATE`` on (the client hears nothing and gives up), and
    releases them (then ends that connection) when nsqd refuses a later publish as out of
    turn, before the refusal goes on to the client. For tests only: it trusts both sides."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.port: int = self._listener.getsockname()[1]
        self.upstream: tuple[str, int] | None = None
        self.held: list[bytes] = []  # the held bytes, and the connection to nsqd they go on
        self._held_on: socket.socket | None = None
        self.released = threading.Event()
        self.refusals: list[bytes] = []
        self.errors: list[BaseException] = []
        self.where: Proxied | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> HoldingProxy:
        self._spawn(self._accept)
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for sock in self._sockets:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(10)
        for sock in self._sockets:
            sock.close()
        self._listener.close()

    def _spawn(self, target: object, *args: object) -> None:
        def run() -> None:
            try:
                target(*args)  # type: ignore[operator]
            except BaseException as exc:
                self.errors.append(exc)
                raise

        thread = threading.Thread(target=run, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            assert self.upstream is not None
            nsqd = socket.create_connection(self.upstream)
            self._sockets += [client, nsqd]
            self._spawn(self._to_nsqd, client, nsqd)
            self._spawn(self._to_client, client, nsqd)

    def _to_nsqd(self, client: socket.socket, nsqd: socket.socket) -> None:
        buf = bytearray()
        magic = False
        holding = False
        with suppress(OSError):
            while data := client.recv(65536):
                if holding:
                    self.held.append(data)
                    continue
                buf += data
                if not magic and len(buf) >= len(MAGIC_V2):
                    nsqd.sendall(bytes(buf[: len(MAGIC_V2)]))
                    del buf[: len(MAGIC_V2)]
                    magic = True
                for command in split_commands(buf):
                    late = command.startswith(b"PUB %s " % self.topic.encode())
                    if late and command.endswith(LATE) and self._held_on is None:
                        holding, self._held_on = True, nsqd
                    if holding:
                        self.held.append(command)
                    else:
                        nsqd.sendall(command)
                if holding and buf:
                    self.held.append(bytes(buf))
                    buf.clear()
        if not holding:
            with suppress(OSError):
                nsqd.shutdown(socket.SHUT_WR)

    def _to_client(self, client: socket.socket, nsqd: socket.socket) -> None:
        frames = Frames()
        with suppress(OSError):
            while data := nsqd.recv(65536):
                for frame_type, body, raw in frames.feed(data):
                    if frame_type == FrameType.ERROR and body.startswith(b"E_PUB_SEQUENCE"):
                        self.refusals.append(body)
                        self._release()
                    client.sendall(raw)
        with suppress(OSError):
            client.shutdown(socket.SHUT_WR)

    def _release(self) -> None:
        """Send the held bytes to nsqd on their own connection, end it, and wait until nsqd
        stored the late try."""
        if self._held_on is None or self.released.is_set():
            return
        self._held_on.sendall(b"".join(self.held))
        self._held_on.shutdown(socket.SHUT_WR)
        assert self.where is not None
        where = self.where
        wait_for(lambda: b"late" in where.stored(self.topic), what="the late try stored")
        self.released.set()


@pytest.fixture
def proxy_and_node(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HoldingProxy]:
    topic = f"given-up-{request.node.callspec.id}"
    with HoldingProxy(topic) as proxy:
        node = pnsq_nsqd(tmp_path_factory.mktemp("late-try"), f"--broadcast-tcp-port={proxy.port}")
        node.start()
        proxy.upstream = ("127.0.0.1", node.tcp_port)
        proxy.where = Proxied(proxy, node)  # type: ignore[arg-type]  # only its node is used
        try:
            create_topic(node.http_address, topic, 1)
            yield proxy
        finally:
            node.stop()


async def trio_publish(proxy: HoldingProxy, http: str) -> list[str]:
    outcomes = []
    async with open_producer(
        proxy.address, http_address=http, max_attempts=1, reply_timeout=REPLY_TIMEOUT
    ) as producer:
        for body in (b"before", b"late", b"after"):
            try:
                await producer.publish(proxy.topic, body)
            except (NsqError, ConnectionClosedError, OSError) as exc:
                outcomes.append(f"{body.decode()}: {type(exc).__name__}")
            else:
                outcomes.append(f"{body.decode()}: ok")
    return outcomes


def blocking_publish(proxy: HoldingProxy, http: str) -> list[str]:
    outcomes = []
    with BlockingProducer(proxy.address, http, timeout=REPLY_TIMEOUT, max_attempts=1) as nsq:
        for body in (b"before", b"late", b"after"):
            try:
                nsq.publish(proxy.topic, body)
            except (NsqError, ConnectionClosedError, OSError) as exc:
                outcomes.append(f"{body.decode()}: {type(exc).__name__}")
            else:
                outcomes.append(f"{body.decode()}: ok")
    return outcomes


@pytest.mark.parametrize("client", ["trio", "blocking"])
def test_a_given_up_publishs_late_try_does_not_take_a_later_publishs_place(
    proxy_and_node: HoldingProxy, client: str
) -> None:
    proxy = proxy_and_node
    assert proxy.where is not None
    http = proxy.where.node.http_address
    if client == "trio":
        outcomes = trio.run(trio_publish, proxy, http)
    else:
        outcomes = blocking_publish(proxy, http)
    assert outcomes[0] == "before: ok"
    assert not outcomes[1].endswith(": ok")  # given up: its reply never came
    assert outcomes[2] == "after: ok"
    assert proxy.released.is_set()  # the late try was stored before the refusal went on
    assert proxy.refusals[0].startswith(b"E_PUB_SEQUENCE_GAP")
    assert b"expected sequence 1" in proxy.refusals[0]
    # the acknowledged "after" is stored; the given-up one once (its late try)
    assert proxy.where.stored(proxy.topic) == [b"before", b"late", b"after"]
    assert proxy.errors == []
