"""statsd parity: the real Go nsqd 1.3.0 and pnsq's nsqd push to one UDP listener on loopback
after the same workload (a topic, a channel, a consumer that finishes one message and requeues
one), and send the same set of (metric name, type) once each node's prefix is normalised; a
pnsq node whose topics have two partitions sends exactly that set plus its per-partition gauges.

The interval is 2 s: Go spreads a push over the interval less one second, and panics at 1 s
(a zero ticker period)."""

from __future__ import annotations

import re
import socket
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol import Fin, Pub, Rdy, Req, Sub
from tests.daemons import Daemon, go_nsqd, pnsq_nsqd
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration

TOPIC, CHANNEL, INTERVAL = "sd", "ch", 2.0
LINE = re.compile(rb"^(nsq\.127_0_0_1_(\d+)\.)([^:]+):(-?\d+)\|(c|g)$")
Names = set[tuple[str, str]]


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield sock
    finally:
        sock.close()


def _flags(listener: socket.socket) -> tuple[str, ...]:
    port = listener.getsockname()[1]
    return (
        f"--statsd-address=127.0.0.1:{port}",
        f"--statsd-interval={INTERVAL:.0f}s",
        "--e2e-processing-latency-percentile=0.99,0.5",
    )


def _workload(d: Daemon) -> list[RawClient]:
    """Publish 4, consume 3: FIN one, REQ one, hold one; the consumer stays connected."""
    producer = RawClient(d.tcp_address)
    producer.identify()
    for i in range(4):
        producer.send(Pub(TOPIC, b"m%d" % i))
        assert producer.read().data == b"OK"
    consumer = RawClient(d.tcp_address)
    consumer.identify()
    consumer.send(Sub(TOPIC, CHANNEL), Rdy(3))
    assert consumer.read().data == b"OK"
    first, second, _held = (consumer.read(skip_heartbeats=True) for _ in range(3))
    consumer.send(Rdy(0), Fin(first.message_id), Req(second.message_id, 0))
    return [producer, consumer]


def _collect(sock: socket.socket, seconds: float) -> dict[int, Names]:
    """The (name, type) pairs each node (by HTTP port in its prefix) sent in ``seconds``."""
    got: dict[int, Names] = defaultdict(set)
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            packet = sock.recv(65536)
        except TimeoutError:
            break
        assert packet.endswith(b"\n"), packet  # whole lines only
        for line in packet.splitlines():
            match = LINE.match(line)
            assert match, line
            got[int(match[2])].add((match[3].decode(), match[5].decode()))
    return got


def _run(daemons: list[Daemon], listener: socket.socket) -> dict[int, Names]:
    clients: list[RawClient] = []
    try:
        for d in daemons:
            d.start()
            clients += _workload(d)
        time.sleep(INTERVAL + 0.5)  # a push begun before the workload has ended
        listener.settimeout(0.05)
        while True:  # drain what is queued
            try:
                listener.recv(65536)
            except TimeoutError:
                break
        return _collect(listener, 2 * INTERVAL + 0.5)  # at least one whole push of each
    finally:
        for client in clients:
            client.close()
        for d in daemons:
            d.stop()


def test_pnsq_sends_go_nsqds_metric_names_and_types(
    tmp_path: Path, listener: socket.socket
) -> None:
    go = go_nsqd(tmp_path / "go", *_flags(listener))
    stock = pnsq_nsqd(tmp_path / "pnsq", *_flags(listener))
    parted = pnsq_nsqd(tmp_path / "parted", *_flags(listener), "--default-partitions=2")
    daemons = [go, stock, parted]
    got = _run(daemons, listener)
    go_names, stock_names, parted_names = (got[d.http_port] for d in daemons)
    topic = {
        (f"topic.{TOPIC}.{key}", kind)
        for key, kind in [("message_count", "c"), ("message_bytes", "c"), ("depth", "g")]
    }
    channel = {(f"topic.{TOPIC}.channel.{CHANNEL}.requeue_count", "c")}
    memory = {("mem.gc_runs", "c"), ("mem.heap_objects", "g")}
    e2e = {(f"topic.{TOPIC}.channel.{CHANNEL}.e2e_processing_latency_99", "g")}
    assert topic | channel | memory | e2e <= go_names  # the workload was seen
    assert stock_names == go_names
    extra = parted_names - go_names
    assert parted_names - extra == go_names
    base, chan = f"topic.{TOPIC}.partition", f"topic.{TOPIC}.channel.{CHANNEL}.partition"
    assert extra == {
        *((f"{base}.{n}.{key}", "g") for n in (0, 1) for key in ("depth", "backend_depth")),
        *(
            (f"{chan}.{n}.{key}", "g")
            for n in (0, 1)
            for key in ("depth", "backend_depth", "in_flight_count", "deferred_count", "lag")
        ),
    }
