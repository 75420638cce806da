"""Ordered consumption (youzan SUB_ORDERED, ``orderedmulti`` topics), on the wire.

youzan go-nsq cannot be fetched here (the Go module proxy refuses github.com/youzan/go-nsq), so
its behaviour is replayed from the reference (youzan-nsq.md §11.4, §2.2, §4, §8.3): the exact
bytes it sends, and the exact bytes pnsq must answer.
"""

from __future__ import annotations

import json
import struct
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests.daemons import Daemon, pnsq_nsqd
from tests.rawclient import RawClient
from tests.youzan import (
    OK_FRAME,
    create_topic,
    decode,
    fin,
    next_message,
    partition_for,
    pub_line,
    sized,
)

pytestmark = pytest.mark.integration

#: youzan go-nsq 1.7.12's IDENTIFY (conn.go ``identify``): a Go map, so keys come sorted.
GONSQ_IDENTIFY = json.dumps(
    {
        "client_id": "host",
        "deflate": False,
        "deflate_level": 6,
        "desired_tag": "",
        "feature_negotiation": True,
        "heartbeat_interval": 30000,
        "hostname": "host.example",
        "long_id": "host.example",
        "msg_timeout": 0,
        "multiplexing": False,
        "output_buffer_size": 0,
        "output_buffer_timeout": 150,
        "sample_rate": 0,
        "short_id": "host",
        "snappy": False,
        "tls_v1": False,
        "user_agent": "go-nsq/1.7.12 HA",
    },
    separators=(",", ":"),
    sort_keys=True,
).encode()


def _gonsq_connect(address: str) -> RawClient:
    """``"  V2"`` + youzan go-nsq's IDENTIFY; checks the reply it parses."""
    client = RawClient(address)
    client.send(b"IDENTIFY\n" + sized(GONSQ_IDENTIFY))
    reply = client.read()
    assert reply.type == 0
    negotiated = json.loads(reply.data)
    for key in ("max_rdy_count", "max_msg_timeout", "msg_timeout", "tls_v1", "deflate"):
        assert key in negotiated  # what go-nsq's IdentifyResponse reads
    assert negotiated["snappy"] is False
    assert negotiated["auth_required"] is False
    return client


def _raw_recv(client: RawClient, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = client.sock.recv(n - len(data))
        assert chunk, "closed"
        data += chunk
    return data


@pytest.fixture
def nsqd_ordered(tmp_path: Path) -> Daemon:
    daemon = pnsq_nsqd(tmp_path / "nsqd").start()
    yield daemon  # type: ignore[misc]
    daemon.stop()


def test_gonsq_handshakes_byte_for_byte(nsqd_ordered: Daemon) -> None:
    """§11.4: producer ``PUB t 1``, consumer ``SUB_ORDERED t c 1``; the message frame carries
    the 12-byte detail block between the id and the body (§2.2)."""
    d = nsqd_ordered
    create_topic(d.http_address, "t", 2, orderedmulti="true")
    producer = _gonsq_connect(d.tcp_address)
    bodies = [b"first", b"second \n body"]
    before = time.time_ns()
    for body in bodies:
        producer.send(b"PUB t 1\n" + struct.pack(">I", len(body)) + body)
        assert _raw_recv(producer, len(OK_FRAME)) == OK_FRAME
    after = time.time_ns()

    consumer = _gonsq_connect(d.tcp_address)
    consumer.send(b"SUB_ORDERED t c 1\n")
    assert _raw_recv(consumer, len(OK_FRAME)) == OK_FRAME
    consumer.send(b"RDY 1\n")
    for offset, body in enumerate(bodies):
        size = 4 + 8 + 2 + 16 + 12 + len(body)
        frame = _raw_recv(consumer, 4 + size)
        assert frame[:8] == struct.pack(">Ii", size, 2)  # [size][type 2 = message]
        (timestamp,) = struct.unpack_from(">q", frame, 8)
        assert before <= timestamp <= after  # ns since the epoch, set at publish
        assert frame[16:18] == b"\x00\x01"  # attempts 1
        internal_id = (1 << 50) + offset + 1  # (partition << 50) + sequence
        message_id = struct.pack(">QQ", internal_id, 0)  # trace id 0
        assert frame[18:34] == message_id
        assert frame[34:46] == struct.pack(">QI", offset, len(body) + 4)  # detail block
        assert frame[46:] == body
        consumer.send(b"FIN " + message_id + b"\n")  # the next one follows only after the FIN


def test_ordered_topic_refuses_plain_sub_and_unpartitioned_pub(nsqd_ordered: Daemon) -> None:
    d = nsqd_ordered
    create_topic(d.http_address, "ord", 4, orderedmulti="true")
    cases = [
        (b"SUB ord c\n", b"E_SUB_ORDER_IS_MUST this topic is configured only allow ordered sub"),
        (
            b"SUB_ADVANCED ord c 1\n",
            b"E_SUB_ORDER_IS_MUST this topic is configured only allow ordered sub",
        ),
        (b"SUB ord c 2\n", b"E_SUB_ORDER_IS_MUST this topic is configured only allow ordered sub"),
        (
            pub_line("ord", b"x"),
            b"E_BAD_PARTITION topic partition is not valid for multi partition: -1",
        ),
        (
            pub_line("ord", b"x", -1),
            b"E_BAD_PARTITION topic partition is not valid for multi partition: -1",
        ),
        (
            b"MPUB ord\n" + sized(struct.pack(">I", 1) + sized(b"x")),
            b"E_BAD_PARTITION topic partition is not valid for multi partition: -1",
        ),
        (
            pub_line("ord", b"\x00" * 8 + b"x", cmd="PUB_TRACE"),
            b"E_BAD_PARTITION topic partition is not valid for multi partition: -1",
        ),
        (pub_line("ord", b"x", 4), b"E_TOPIC_NOT_EXIST "),  # trailing space: empty description
        (b"SUB_ORDERED ord c 9\n", b"E_TOPIC_NOT_EXIST "),
    ]
    for command, error in cases:
        client = RawClient(d.tcp_address)
        client.send(command)
        frame = client.read()
        assert (frame.type, frame.data) == (1, error), command
        assert client.closed_by_server(), command  # all fatal
    client = RawClient(d.tcp_address)
    client.identify(sample_rate=10)
    client.send(b"SUB_ORDERED ord c 0\n")
    frame = client.read()
    assert frame.data == b"E_INVALID order consume is not allowed while sample rate is not 0"
    assert client.closed_by_server()
    # with a partition, every publish is fine
    client = RawClient(d.tcp_address)
    client.send(pub_line("ord", b"x", 3))
    assert client.read().data == b"OK"


def test_requeue_and_timeout_redeliver_the_same_message_first(nsqd_ordered: Daemon) -> None:
    d = nsqd_ordered
    create_topic(d.http_address, "rq", 1, orderedmulti="true")
    producer = RawClient(d.tcp_address)
    producer.send(*(pub_line("rq", b"m%d" % i, 0) for i in range(3)))
    assert [producer.read().data for _ in range(3)] == [b"OK"] * 3
    consumer = RawClient(d.tcp_address)
    consumer.identify(msg_timeout=1000)
    consumer.send(b"SUB_ORDERED rq c 0\n", b"RDY 10\n")
    assert consumer.read().data == b"OK"
    first = decode(next_message(consumer), detail=True)
    assert (first.body, first.attempts, first.offset) == (b"m0", 1, 0)
    consumer.sock.settimeout(0.5)
    with pytest.raises(TimeoutError):
        next_message(consumer)  # RDY 10, yet one in flight per partition
    consumer.sock.settimeout(5)
    consumer.send(b"REQ " + first.message_id + b" 60000\n")  # the delay is ignored
    again = decode(next_message(consumer), detail=True)
    assert (again.body, again.attempts, again.message_id) == (b"m0", 2, first.message_id)
    started = time.monotonic()
    timed_out = decode(next_message(consumer), detail=True)  # not FINed: msg_timeout 1 s
    assert time.monotonic() - started >= 0.9
    assert (timed_out.body, timed_out.attempts) == (b"m0", 3)
    fin(consumer, timed_out.message_id)
    nxt = decode(next_message(consumer), detail=True)
    assert (nxt.body, nxt.attempts, nxt.offset) == (b"m1", 1, 1)


def _publish_keys(
    address: str, topic: str, keys: list[str], per_key: int, batch: int, partitions: int = 4
) -> None:
    """One producer connection: ``per_key`` messages for each of its keys, interleaved, pipelined
    ``batch`` at a time; each key's messages go to ``murmur3(key) % partitions``."""
    client = RawClient(address, timeout=30)
    pending: list[bytes] = []

    def flush() -> None:
        client.send(b"".join(pending))
        for _ in pending:
            assert client.read().data == b"OK"
        pending.clear()

    for seq in range(per_key):
        for key in keys:
            part = partition_for(key, partitions)
            pending.append(pub_line(topic, f"{key}:{seq}".encode(), part))
            if len(pending) >= batch:
                flush()
    flush()
    client.close()


class _OrderedConsumer(threading.Thread):
    """One connection per partition, as youzan go-nsq opens them: SUB_ORDERED, FIN in order."""

    def __init__(self, address: str, topic: str, partition: int, expected: int) -> None:
        super().__init__(daemon=True)
        self.address, self.topic, self.partition, self.expected = (
            address,
            topic,
            partition,
            expected,
        )
        self.received: list[tuple[int, int, bytes]] = []  # (offset, attempts, body)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            client = RawClient(self.address, timeout=60)
            client.send(f"SUB_ORDERED {self.topic} c {self.partition}\n".encode(), b"RDY 20\n")
            assert client.read().data == b"OK"
            while len(self.received) < self.expected:
                m = decode(next_message(client), detail=True)
                assert m.partition == self.partition
                self.received.append((m.offset or 0, m.attempts, m.body))
                fin(client, m.message_id)
            client.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def test_per_key_order_over_four_partitions(nsqd_ordered: Daemon) -> None:
    """20,000 messages over 500 keys, ``PUB t <murmur3(key) % 4>`` from four producers while
    four SUB_ORDERED consumers FIN in order: every key's messages arrive in publish order."""
    d = nsqd_ordered
    create_topic(d.http_address, "keys", 4, orderedmulti="true")
    keys = [f"key-{i}" for i in range(500)]
    per_key = 40
    expected = defaultdict(int)
    for key in keys:
        expected[partition_for(key, 4)] += per_key
    assert all(expected[p] for p in range(4))
    consumers = [_OrderedConsumer(d.tcp_address, "keys", p, expected[p]) for p in range(4)]
    for c in consumers:
        c.start()
    producers = [
        threading.Thread(
            target=_publish_keys, args=(d.tcp_address, "keys", keys[i::4], per_key, 200)
        )
        for i in range(4)
    ]
    for t in producers:
        t.start()
    for t in producers:
        t.join(120)
    for c in consumers:
        c.join(120)
        assert c.error is None, c.error
    per_key_seen: dict[str, list[int]] = defaultdict(list)
    for c in consumers:
        offsets = [offset for offset, _, _ in c.received]
        assert offsets == list(range(expected[c.partition]))  # log order, nothing skipped
        assert {attempts for _, attempts, _ in c.received} == {1}  # no redelivery
        for _, _, body in c.received:
            key, seq = body.decode().split(":")
            assert partition_for(key, 4) == c.partition
            per_key_seen[key].append(int(seq))
    assert per_key_seen == {key: list(range(per_key)) for key in keys}


def _state_confirmed(data_path: Path, topic: str, partition: int) -> int:
    path = data_path / "topics" / f"t-{topic}" / str(partition) / "state.json"
    return int(json.loads(path.read_text())["channels"]["c"]["confirmed"])


def _consume(
    address: str, topic: str, partition: int, count: int
) -> tuple[RawClient, list[tuple[int, bytes]]]:
    """SUB_ORDERED one partition and FIN ``count`` messages; the connection is returned open
    (with the next message possibly in flight)."""
    client = RawClient(address, timeout=30)
    client.send(f"SUB_ORDERED {topic} c {partition}\n".encode(), b"RDY 5\n")
    assert client.read().data == b"OK"
    got = []
    for _ in range(count):
        m = decode(next_message(client), detail=True)
        got.append((m.offset or 0, m.body))
        fin(client, m.message_id)
    return client, got


def _per_key(stream: list[tuple[int, bytes]]) -> dict[str, list[int]]:
    seen: dict[str, list[int]] = defaultdict(list)
    for _, body in stream:
        key, seq = body.decode().split(":")
        seen[key].append(int(seq))
    return seen


def test_kill_9_keeps_per_partition_order(tmp_path: Path) -> None:
    """Consumers stop in the middle, nsqd is killed with -9 and restarted: each partition
    resumes exactly at its checkpoint (never behind it, nothing skipped), in order; what was
    FINed after the last checkpoint comes again. The topic is still ordered afterwards."""
    data = tmp_path / "nsqd"
    d = pnsq_nsqd(data, "--sync-timeout=100ms").start()
    clients: list[RawClient] = []
    try:
        create_topic(d.http_address, "crash", 2, orderedmulti="true")
        keys = [f"k{i}" for i in range(50)]
        per_key = 40
        _publish_keys(d.tcp_address, "crash", keys, per_key, 100, partitions=2)
        totals = defaultdict(int)
        for key in keys:
            totals[partition_for(key, 2)] += per_key
        before = {}
        client, before[0] = _consume(d.tcp_address, "crash", 0, totals[0] // 2)
        clients.append(client)
        time.sleep(0.5)  # partition 0 is checkpointed; partition 1 is killed mid-stream
        client, before[1] = _consume(d.tcp_address, "crash", 1, totals[1] // 2)
        clients.append(client)
        d.kill()
        checkpoint = {part: _state_confirmed(data, "crash", part) for part in (0, 1)}
        assert checkpoint[0] == len(before[0])
        d.start()
        plain = RawClient(d.tcp_address)
        plain.send(b"SUB crash c\n")
        assert plain.read().data.startswith(b"E_SUB_ORDER_IS_MUST")  # still an ordered topic
        for part in (0, 1):
            fined = len(before[part])
            assert [o for o, _ in before[part]] == list(range(fined))
            assert 0 <= checkpoint[part] <= fined  # the checkpoint never runs ahead of FINs
            client, after = _consume(d.tcp_address, "crash", part, totals[part] - checkpoint[part])
            clients.append(client)
            assert [o for o, _ in after] == list(range(checkpoint[part], totals[part]))
            redelivered = fined - checkpoint[part]
            assert after[:redelivered] == before[part][checkpoint[part] :]
            stream = before[part] + after[redelivered:]
            assert _per_key(stream) == {
                k: list(range(per_key)) for k in keys if partition_for(k, 2) == part
            }
    finally:
        for client in clients:
            client.close()
        d.stop()


def test_sub_ordered_flips_the_channel_and_the_flag_survives_kill_9(tmp_path: Path) -> None:
    """youzan: SUB_ORDERED on a plain topic makes the channel ordered for every client; pnsq
    saves the flag before the OK, so a plain SUB after kill -9 still gets one at a time."""
    data = tmp_path / "nsqd"
    d = pnsq_nsqd(data).start()
    try:
        producer = RawClient(d.tcp_address)
        producer.send(*(pub_line("flip", b"m%d" % i) for i in range(3)))
        assert [producer.read().data for _ in range(3)] == [b"OK"] * 3
        ordered = RawClient(d.tcp_address)
        ordered.send(b"SUB_ORDERED flip c\n")
        assert ordered.read().data == b"OK"
        d.kill()
        meta = json.loads((data / "pnsq.dat").read_text())
        (topic,) = meta["topics"]
        assert topic["channels"] == [
            {
                "name": "c",
                "paused": False,
                "ordered": True,
                "skipped": False,
                "skip_zan_test": False,
            }
        ]
        d.start()
        plain = RawClient(d.tcp_address)
        plain.send(b"SUB flip c\n", b"RDY 10\n")
        assert plain.read().data == b"OK"
        first = decode(next_message(plain))  # stock layout: no detail block for plain SUB
        assert (first.body, first.attempts) == (b"m0", 1)
        plain.sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            next_message(plain)
        plain.sock.settimeout(5)
        fin(plain, first.message_id)
        assert decode(next_message(plain)).body == b"m1"
    finally:
        d.stop()
