"""Replication heals what one disk lost, on a real 2-node cluster (pnsq lookupd + 2 pnsq nsqd,
replicator=2): a record whose bytes rot in the leader's segment file is copied back from the
in-sync replica and delivered, never skipped; and a replica catching up over records the
leader lost before it had them does not stall there (lost-record markers)."""

from __future__ import annotations

import base64
import json
import urllib.request
from pathlib import Path

import pytest

from protocol import Fin, Pub, Rdy, Sub
from tests.daemons import Daemon, pnsq_lookupd, pnsq_nsqd
from tests.integration.lookupd_helpers import free_port, get_json, post, wait_for
from tests.integration.test_replication import create, partition_view
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration

COUNT = 60


def _body(i: int) -> bytes:
    return b"%05d:" % i + bytes((i * 7 + k) % 251 for k in range(300))


def _offset_position(path: Path, offset: int) -> int:
    """Byte position of the record at ``offset`` (the segment's base is 0)."""
    data, position = path.read_bytes(), 0
    for _ in range(offset):
        position += 4 + (int.from_bytes(data[position : position + 4], "big") & ((1 << 30) - 1))
    return position


def _metric(node: Daemon, name: str) -> float:
    with urllib.request.urlopen(f"http://{node.http_address}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith((name + "{", name + " "))
    )


def test_a_record_damaged_on_the_leader_is_healed_from_the_replica(tmp_path: Path) -> None:
    lookupd = pnsq_lookupd(tmp_path / "lookupd").start()
    flags = (f"--lookupd-tcp-address={lookupd.tcp_address}", "--read-cache-bytes=0")
    nodes = [pnsq_nsqd(tmp_path / name, *flags).start() for name in "ab"]
    try:
        wait_for(lambda: len(get_json(lookupd, "/nodes")["producers"]) == 2, what="2 nodes")
        leader, _replica = create(lookupd, nodes, "heal")
        for channel in ("ch", "web"):  # both before the publishes: both get every message
            assert post(leader, f"/channel/create?topic=heal&channel={channel}")[0] == 200
        producer = RawClient(leader.tcp_address)
        for i in range(COUNT):
            producer.send(Pub("heal", _body(i), 0))
        for _ in range(COUNT):
            assert producer.read().data == b"OK"  # on the replica too
        producer.close()

        (segment,) = sorted((leader.data_path / "topics" / "t-heal" / "0").glob("*.log"))
        original = segment.read_bytes()
        data = bytearray(original)
        data[_offset_position(segment, 20) + 100] ^= 0x04  # in the body of offset 20
        segment.write_bytes(bytes(data))

        consumer = RawClient(leader.tcp_address, timeout=15)
        consumer.send(Sub("heal", "ch", 0), Rdy(COUNT))
        assert consumer.read().data == b"OK"
        got = []
        for _ in range(COUNT):
            frame = consumer.read(skip_heartbeats=True)
            assert frame.is_message, frame.data
            got.append(frame.body)
            consumer.send(Fin(frame.message_id))
        consumer.close()
        assert got == [_body(i) for i in range(COUNT)]  # offset 20 too: healed, not skipped
        assert segment.read_bytes() == original  # written back in place
        assert _metric(leader, "pnsq_corrupt_healed_records_total") == 1
        assert _metric(leader, "pnsq_corrupt_skipped_records_total") == 0
        assert "repaired damaged records at offsets 20-20" in leader.log_text()

        data = bytearray(segment.read_bytes())  # and for an HTTP consumer (channel "web")
        data[_offset_position(segment, 40) + 60] ^= 0x40
        segment.write_bytes(bytes(data))
        bodies: list[bytes] = []
        while len(bodies) < COUNT:
            query = "/consume?topic=heal&channel=web&max=100&wait_ms=5000"
            status, reply = post(leader, query)
            batch = json.loads(reply)
            assert status == 200, reply
            assert batch["messages"], reply
            bodies.extend(base64.b64decode(m["body"]) for m in batch["messages"])
            assert post(leader, f"/consume/ack?token={batch['token']}")[0] == 200
        assert bodies == [_body(i) for i in range(COUNT)]
        assert segment.read_bytes() == original
        assert _metric(leader, "pnsq_corrupt_healed_records_total") == 2
        assert "unexpected error" not in leader.log_text()
    finally:
        for node in nodes:
            node.stop()
        lookupd.stop()


def test_a_replica_catching_up_does_not_stall_on_the_leaders_damage(tmp_path: Path) -> None:
    lookupd = pnsq_lookupd(tmp_path / "lookupd", "--heartbeat-timeout=2s").start()
    flags = (
        f"--lookupd-tcp-address={lookupd.tcp_address}",
        "--read-cache-bytes=0",
        "--replica-lag-max=1s",
    )
    nodes = [
        pnsq_nsqd(tmp_path / name, *flags, f"--tcp-address=127.0.0.1:{free_port()}").start()
        for name in "ab"
    ]
    try:
        wait_for(lambda: len(get_json(lookupd, "/nodes")["producers"]) == 2, what="2 nodes")
        leader, replica = create(lookupd, nodes, "gap")
        producer = RawClient(leader.tcp_address, timeout=60)
        for i in range(20):
            producer.send(Pub("gap", _body(i), 0))
        for _ in range(20):
            assert producer.read().data == b"OK"
        replica.kill()
        for i in range(20, 40):  # acknowledged once the leader is alone in sync
            producer.send(Pub("gap", _body(i), 0))
        for _ in range(20):
            assert producer.read(skip_heartbeats=True).data == b"OK"
        producer.close()
        (segment,) = sorted((leader.data_path / "topics" / "t-gap" / "0").glob("*.log"))
        data = bytearray(segment.read_bytes())
        data[_offset_position(segment, 30) + 100] ^= 0x04  # a record the replica never had
        segment.write_bytes(bytes(data))

        replica.start()  # catches up from offset 20, across the leader's damage at 30
        wait_for(
            lambda: partition_view(replica, "gap", 0)["end_offset"] == 40,
            what="the replica caught up",
            timeout=30,
        )
        wait_for(lambda: len(partition_view(leader, "gap", 0)["isr"]) == 2, what="in sync")
        consumer = RawClient(leader.tcp_address, timeout=15)
        consumer.send(Sub("gap", "ch", 0), Rdy(50))
        assert consumer.read().data == b"OK"
        got = []
        for _ in range(39):
            frame = consumer.read(skip_heartbeats=True)
            assert frame.is_message, frame.data
            got.append(frame.body)
            consumer.send(Fin(frame.message_id))
        consumer.close()
        assert got == [_body(i) for i in range(40) if i != 30]  # both copies lack it: skipped
        assert "has no intact copy of offsets 30-30 either" in leader.log_text()
        for node in nodes:
            assert "unexpected error" not in node.log_text()
    finally:
        for node in nodes:
            node.stop()
        lookupd.stop()
