"""Replication heals what one disk lost, on a real 2-node cluster (pnsq lookupd + 2 pnsq nsqd,
replicator=2): a record whose bytes rot in the leader's segment file is copied back from the
in-sync replica and delivered, never skipped."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

from protocol import Fin, Pub, Rdy, Sub
from tests.daemons import Daemon, pnsq_lookupd, pnsq_nsqd
from tests.integration.lookupd_helpers import get_json, wait_for
from tests.integration.test_replication import create
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
        assert "unexpected error" not in leader.log_text()
    finally:
        for node in nodes:
            node.stop()
        lookupd.stop()
