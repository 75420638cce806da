"""Replication under the cluster credential: with ``--cluster-secret-file`` on every node a
``"  R1"`` peer proves it holds the secret, and which node it is, before anything else. A
stranger gets one refusal and a closed connection (no WELCOME, no record) and cannot get a
publish acknowledged by posing as the real follower; with the same secret replication and
failover work as without one. (A node with the wrong secret never registers, so it is never
placed, and cannot follow either: test_lookupd_cluster_auth.py.)"""

from __future__ import annotations

import os
import signal
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol import Pub
from protocol.cluster_auth import FrameType as AuthFrame
from protocol.cluster_links import FORWARDING
from protocol.encode import encode_command
from protocol.replication import MAGIC, Ack, FrameType, Hello
from protocol.replication_encoder import encode
from tests.daemons import Daemon, cluster_secret_flag, pnsq_lookupd, pnsq_nsqd
from tests.integration.lookupd_helpers import get_json, post, roles, wait_for
from tests.integration.test_replication import partition_view
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration

TOPIC_FRAMES = {FrameType.WELCOME, FrameType.APPEND, FrameType.HIGH_WATERMARK, FrameType.CURSORS}


def start_cluster(
    work: Path,
    secrets: list[str],
    *lookupd_flags: str,
    lookupd_secret: bool = True,
    node_flags: tuple[str, ...] = (),
) -> tuple[Daemon, list[Daemon]]:
    """A lookupd and one nsqd per entry of ``secrets`` (each node's secret file content, with
    ``node_flags``); the lookupd holds the first node's secret, or none without
    ``lookupd_secret``. Returns once the nodes holding the lookupd's secret are registered."""
    if lookupd_secret:
        lookupd_flags = (cluster_secret_flag(work / "lookupd.secret", secrets[0]), *lookupd_flags)
    lookupd = pnsq_lookupd(work / "lookupd", *lookupd_flags).start()
    nodes = []
    for name, secret in zip("abc", secrets, strict=False):
        flags = (
            f"--lookupd-tcp-address={lookupd.tcp_address}",
            cluster_secret_flag(work / f"{name}.secret", secret),
            *node_flags,
        )
        nodes.append(pnsq_nsqd(work / name, *flags).start())
    count = secrets.count(secrets[0]) if lookupd_secret else 0
    wait_for(lambda: len(get_json(lookupd, "/nodes")["producers"]) == count, what="nodes")
    return lookupd, nodes


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, list[Daemon]]]:
    # a paused replica must not be taken for dead while a test watches it hold acks back
    work = tmp_path_factory.mktemp("auth")
    lookupd, nodes = start_cluster(work, ["s3cret", "s3cret"], "--heartbeat-timeout=30s")
    try:
        yield lookupd, nodes
    finally:
        for node in nodes:
            node.stop()
        lookupd.stop()


def create(lookupd: Daemon, nodes: list[Daemon], topic: str) -> tuple[Daemon, Daemon]:
    """A 1-partition topic on both nodes, both in sync; returns (leader, replica)."""
    query = f"/topic/create?topic={topic}&partition_num=1&replicator=2"
    assert post(lookupd, query) == (200, b"")
    wait_for(lambda: all(roles(n, topic) for n in nodes), what="placed on both")
    leader = next(n for n in nodes if (roles(n, topic) or {}).get(0) == "leader")
    replica = next(n for n in nodes if n is not leader)
    both = [f"127.0.0.1:{leader.tcp_port}", f"127.0.0.1:{replica.tcp_port}"]
    wait_for(lambda: partition_view(leader, topic, 0)["isr"] == both, what="both in sync")
    return leader, replica


def frame_types_until_closed(sock: socket.socket, wait: float = 10.0) -> list[int]:
    """The type byte of every frame the peer sends until it closes the connection."""
    sock.settimeout(wait)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    types, pos = [], 0
    while pos + 5 <= len(data):
        size, kind = struct.unpack_from(">IB", data, pos)
        types.append(kind)
        pos += 4 + size
    return types


def stranger(node: Daemon, payload: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", node.tcp_port), timeout=10)
    sock.sendall(MAGIC + payload)
    return sock


def _pid(node: Daemon) -> int:
    assert node.proc is not None
    return node.proc.pid


def test_replication_works_with_the_secret(cluster: tuple[Daemon, list[Daemon]]) -> None:
    lookupd, nodes = cluster
    leader, replica = create(lookupd, nodes, "sealed")
    producer = RawClient(leader.tcp_address)
    for i in range(1, 11):
        producer.send(Pub("sealed", b"m%d" % i, 0))
        assert producer.read().data == b"OK"
        assert partition_view(replica, "sealed", 0)["end_offset"] >= i
    producer.close()


@pytest.mark.parametrize("epoch", [0, 1, 2, 1000, 2**32 - 1])
def test_a_strangers_hello_gets_one_refusal_and_no_record(
    cluster: tuple[Daemon, list[Daemon]], epoch: int
) -> None:
    lookupd, nodes = cluster
    topic = f"peek{epoch}"
    leader, replica = create(lookupd, nodes, topic)
    RawClient(leader.tcp_address).send(Pub(topic, b"secret data", 0))
    wait_for(lambda: partition_view(leader, topic, 0)["high_watermark"] == 1, what="published")
    hello = Hello(f"127.0.0.1:{replica.tcp_port}", topic, 0, epoch, 0, 0)
    types = frame_types_until_closed(stranger(leader, encode(hello)))
    assert types == [AuthFrame.REFUSAL]  # one error, then closed: no WELCOME, no APPEND
    assert not TOPIC_FRAMES & set(types)


def test_a_silent_stranger_is_dropped_within_seconds(cluster: tuple[Daemon, list[Daemon]]) -> None:
    _, nodes = cluster
    sock = socket.create_connection(("127.0.0.1", nodes[0].tcp_port), timeout=10)
    sock.sendall(MAGIC)
    started = time.monotonic()
    types = frame_types_until_closed(sock)
    assert types == [AuthFrame.REFUSAL]
    assert time.monotonic() - started < 6


def test_a_stranger_naming_the_follower_cannot_get_a_publish_acknowledged(
    cluster: tuple[Daemon, list[Daemon]],
) -> None:
    lookupd, nodes = cluster
    leader, replica = create(lookupd, nodes, "forged")
    producer = RawClient(leader.tcp_address)
    os.kill(_pid(replica), signal.SIGSTOP)  # the real follower cannot ack
    try:
        epoch = 0
        for epoch_guess in range(1, 4):
            node = f"127.0.0.1:{replica.tcp_port}"
            hello = Hello(node, "forged", 0, epoch_guess, 0, 0)
            acks = b"".join(encode(Ack(e, 10**6)) for e in range(epoch, 5))
            stranger(leader, encode(hello) + acks).close()
        producer.send(Pub("forged", b"must wait for the real replica", 0))
        producer.sock.settimeout(2.0)
        with pytest.raises(TimeoutError):
            producer.sock.recv(1, socket.MSG_PEEK)
        assert partition_view(leader, "forged", 0)["high_watermark"] == 0
    finally:
        os.kill(_pid(replica), signal.SIGCONT)
    producer.sock.settimeout(20.0)
    assert producer.read().data == b"OK"  # the real follower's ack
    producer.close()


def test_forwarding_proves_the_secret(cluster: tuple[Daemon, list[Daemon]]) -> None:
    lookupd, nodes = cluster
    leader, replica = create(lookupd, nodes, "relayed")
    producer = RawClient(replica.tcp_address)  # leads no partition: forwards
    producer.send(Pub("relayed", b"through the forwarding link"))
    assert producer.read().data == b"OK"
    producer.close()
    assert partition_view(leader, "relayed", 0)["end_offset"] == 1
    # a stranger on the forwarding link: one refusal, nothing published
    sock = socket.create_connection(("127.0.0.1", leader.tcp_port), timeout=10)
    sock.sendall(FORWARDING + encode_command(Pub("relayed", b"forged", 0)))
    assert frame_types_until_closed(sock) == [AuthFrame.REFUSAL]
    assert partition_view(leader, "relayed", 0)["end_offset"] == 1


def fail_over(lookupd: Daemon, nodes: list[Daemon], topic: str, before: int) -> Daemon:
    """``before`` publishes to a new replicated topic's leader, kill -9 of that leader, then a
    publish to the promoted replica; returns the replica."""
    leader, replica = create(lookupd, nodes, topic)
    producer = RawClient(leader.tcp_address)
    for i in range(before):
        producer.send(Pub(topic, b"before %d" % i, 0))
        assert producer.read().data == b"OK"
    producer.close()
    leader.kill()
    wait_for(lambda: (roles(replica, topic) or {}).get(0) == "leader", 30, "promoted")
    producer = RawClient(replica.tcp_address)
    producer.send(Pub(topic, b"after", 0))
    assert producer.read().data == b"OK"
    producer.close()
    return replica


def test_failover_with_the_secret(cluster: tuple[Daemon, list[Daemon]]) -> None:
    lookupd, nodes = cluster
    replica = fail_over(lookupd, nodes, "moved", 5)
    assert partition_view(replica, "moved", 0)["end_offset"] == 6


def test_nodes_with_a_secret_do_not_register_with_a_lookupd_without_one(tmp_path: Path) -> None:
    """A lookupd without the secret cannot prove it: a node holding one neither registers with
    it nor tells it anything, and says why in its log (at most once a minute)."""
    lookupd, nodes = start_cluster(tmp_path, ["right"], lookupd_secret=False)
    try:
        wait_for(lambda: "holds no cluster secret" in nodes[0].log_text(), what="the refusal")
        time.sleep(2)  # several reconnections
        assert get_json(lookupd, "/nodes")["producers"] == []
        failures = [
            line for line in nodes[0].log_text().splitlines() if "cluster handshake with" in line
        ]
        assert len(failures) == 1
        assert "E_CLUSTER_AUTH" in failures[0]
    finally:
        for node in nodes:
            node.stop()
        lookupd.stop()
