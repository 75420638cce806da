"""TLS between nodes and the authenticated forwarding link, on real processes.

One cluster for the module: a lookupd and two nsqd holding the cluster secret, each with a node
certificate from the cluster's CA, ``--tls-client-auth-policy=require-verify`` (mutual TLS, and
TLS required of TCP clients) and AUTH through a real auth server on loopback. Replication runs,
and a node that leads no partition of a topic forwards a client's PUB to the leader, which asks
no AUTH of the forwarding node; every plaintext link is refused, so what works runs over TLS.
A stranger on the forwarding link gets one refusal; a node whose certificate comes from another
CA cannot follow, nor be followed.
"""

from __future__ import annotations

import json
import socket
import ssl
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from protocol import Pub
from protocol.cluster_auth import FrameType as AuthFrame
from protocol.cluster_links import FORWARDING, TLS
from protocol.encode import encode_command
from protocol.replication import MAGIC, Hello
from protocol.replication_encoder import encode
from tests.authserver import AuthServer
from tests.daemons import Daemon, cluster_secret_flag, pnsq_lookupd, pnsq_nsqd
from tests.integration.lookupd_helpers import get_json, post, roles, wait_for
from tests.integration.test_replication import partition_view
from tests.integration.test_replication_auth import frame_types_until_closed
from tests.tlscerts import NodeCerts, make_node_certs
from tests.upgradeclient import MESSAGE, OK, RESPONSE, UpgradingClient, command, identify

pytestmark = pytest.mark.integration

SECRET = "tls cluster secret"
GRANT = {"topic": ".*", "channels": [".*"], "permissions": ["subscribe", "publish"]}
REPLIES = {"pub-sub": (200, {"ttl": 3600, "identity": "user", "authorizations": [GRANT]})}


@dataclass
class Cluster:
    lookupd: Daemon
    nodes: list[Daemon]
    certs: NodeCerts
    auth: AuthServer

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        self.lookupd.stop()


def start(work: Path, certs: list[NodeCerts], *extra: str) -> tuple[Daemon, list[Daemon]]:
    """A lookupd and one nsqd per entry of ``certs``, all holding :data:`SECRET`; every node
    requires TLS of its TCP clients but keeps plain HTTP (the tests read /stats there)."""
    secret = cluster_secret_flag(work / "cluster.secret", SECRET)
    lookupd = pnsq_lookupd(work / "lookupd", secret).start()
    nodes = []
    for i, node_certs in enumerate(certs):
        flags = (
            f"--lookupd-tcp-address={lookupd.tcp_address}",
            secret,
            *node_certs.flags(),
            "--tls-required=tcp-https",
            "--https-address=127.0.0.1:0",
            *extra,
        )
        nodes.append(pnsq_nsqd(work / f"n{i}", *flags).start())
    wait_for(lambda: len(get_json(lookupd, "/nodes")["producers"]) == len(nodes), what="nodes")
    return lookupd, nodes


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    work = tmp_path_factory.mktemp("tls")
    certs = make_node_certs(work / "certs")
    auth = AuthServer(dict(REPLIES)).start()
    try:
        lookupd, nodes = start(work, [certs, certs], f"--auth-http-address={auth.address}")
    except BaseException:
        auth.stop()
        raise
    made = Cluster(lookupd, nodes, certs, auth)
    try:
        yield made
    finally:
        made.stop()
        auth.stop()


def create(cluster: Cluster, topic: str, prefer: Daemon | None = None) -> tuple[Daemon, Daemon]:
    """A 1-partition topic on both nodes, both in sync; returns (leader, replica)."""
    query = f"/topic/create?topic={topic}&partition_num=1&replicator=2"
    if prefer is not None:
        query += f"&prefer=127.0.0.1:{prefer.tcp_port}"
    assert post(cluster.lookupd, query) == (200, b"")
    nodes = cluster.nodes
    wait_for(lambda: all(roles(n, topic) for n in nodes), what="placed on both")
    leader = next(n for n in nodes if (roles(n, topic) or {}).get(0) == "leader")
    replica = next(n for n in nodes if n is not leader)
    both = {f"127.0.0.1:{leader.tcp_port}", f"127.0.0.1:{replica.tcp_port}"}
    wait_for(lambda: set(partition_view(leader, topic, 0)["isr"]) == both, what="both in sync")
    return leader, replica


def client(cluster: Cluster, node: Daemon) -> UpgradingClient:
    """A V2 client of ``node`` as the node requires it: TLS with a client certificate, then
    AUTH."""
    certs = cluster.certs
    c = UpgradingClient(node.tcp_port, timeout=15)
    c.send(identify(tls_v1=True))
    assert json.loads(c.read_frame()[1])["auth_required"] is True
    c.start_tls(str(certs.cert), str(certs.key), cafile=str(certs.ca))
    assert c.read_frame() == OK
    c.send(command(b"AUTH", b"pub-sub"))
    kind, _ = c.read_frame()
    assert kind == RESPONSE
    return c


def tls_link(node: Daemon, certs: NodeCerts | None, link: bytes) -> ssl.SSLSocket:
    """A raw ``"  S1"`` link to ``node`` asking for ``link``: TLS as a node dials it (with the
    node certificate of ``certs``, or none)."""
    sock = socket.create_connection(("127.0.0.1", node.tcp_port), timeout=10)
    sock.sendall(TLS)
    context = ssl.create_default_context(cafile=None if certs is None else str(certs.ca))
    if certs is None:
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    else:
        context.load_cert_chain(str(certs.cert), str(certs.key))
    tls = context.wrap_socket(sock, server_hostname="127.0.0.1")
    tls.sendall(link)
    return tls


def test_replicated_publish_and_consume_over_tls(cluster: Cluster) -> None:
    leader, replica = create(cluster, "sealed")
    producer = client(cluster, leader)
    for i in range(1, 11):
        producer.send(encode_command(Pub("sealed", b"m%d" % i)))
        assert producer.read_frame() == OK
        assert partition_view(replica, "sealed", 0)["end_offset"] >= i
    consumer = client(cluster, leader)
    consumer.send(command(b"SUB sealed ch") + command(b"RDY 100"))
    assert consumer.read_frame() == OK
    bodies = set()
    while len(bodies) < 10:
        kind, data = consumer.read_frame()
        if kind == MESSAGE:
            bodies.add(data[26:])
            consumer.send(command(b"FIN " + data[10:26]))
    assert bodies == {b"m%d" % i for i in range(1, 11)}


def test_plaintext_links_are_refused_once(cluster: Cluster) -> None:
    # both links work between the nodes (the other tests), and neither is taken in plaintext:
    # so replication and forwarding run inside TLS
    node = cluster.nodes[0]
    for link, payload in (
        (MAGIC, encode(Hello("127.0.0.1:1", "sealed", 0, 0, 0, 0))),
        (FORWARDING, encode_command(Pub("sealed", b"plain"))),
    ):
        sock = socket.create_connection(("127.0.0.1", node.tcp_port), timeout=10)
        sock.sendall(link + payload)
        assert frame_types_until_closed(sock) == [AuthFrame.REFUSAL]
    assert "over TLS only" in node.log_text()


def test_a_link_without_a_client_certificate_gets_no_tls(cluster: Cluster) -> None:
    with pytest.raises((ssl.SSLError, ConnectionError, EOFError)):  # noqa: PT012
        tls = tls_link(cluster.nodes[0], None, MAGIC)
        tls.sendall(b"x")
        if not tls.recv(1):  # TLS 1.3: the refusal of the certificate comes after the hello
            raise EOFError


def test_a_stranger_on_the_forwarding_link_gets_one_refusal(cluster: Cluster) -> None:
    leader, replica = create(cluster, "nostranger")
    # TLS with a good certificate, but without the cluster secret: refused, nothing stored
    tls = tls_link(replica, cluster.certs, FORWARDING)
    tls.sendall(encode_command(Pub("nostranger", b"forged")))
    assert frame_types_until_closed(tls) == [AuthFrame.REFUSAL]
    time.sleep(0.5)
    assert partition_view(leader, "nostranger", 0)["end_offset"] == 0


def test_forwarding_over_tls_with_auth_on_the_leader(cluster: Cluster) -> None:
    leader, replica = create(cluster, "forwarded")
    asked = len(cluster.auth.requests)
    producer = client(cluster, replica)  # a node that leads no partition of the topic
    assert len(cluster.auth.requests) == asked + 1  # the client's AUTH, at the replica
    for i in range(5):
        producer.send(encode_command(Pub("forwarded", b"f%d" % i)))
        assert producer.read_frame() == OK  # acknowledged once the leader stored it
    producer.send(command(b"MPUB forwarded", struct.pack(">I", 2) + _bodies(b"x", b"y")))
    assert producer.read_frame() == OK
    assert partition_view(leader, "forwarded", 0)["end_offset"] == 7
    assert partition_view(replica, "forwarded", 0)["end_offset"] == 7  # replicated back
    # the leader asked the auth server nothing: a forwarding node is trusted
    assert len(cluster.auth.requests) == asked + 1
    assert "FORWARD: connected to leader" in replica.log_text()


def _bodies(*bodies: bytes) -> bytes:
    return b"".join(struct.pack(">I", len(b)) + b for b in bodies)


def test_a_node_with_a_certificate_from_another_ca_cannot_follow(tmp_path: Path) -> None:
    good = make_node_certs(tmp_path / "good")
    other = make_node_certs(tmp_path / "other", "another-ca")
    # the stranger trusts the cluster's CA (it could verify a leader) but its own certificate
    # comes from another CA
    stranger = NodeCerts(good.ca, other.cert, other.key)
    lookupd, nodes = start(tmp_path, [good, stranger], "--replica-lag-max=60s")
    pending: list[socket.socket] = []
    try:
        member, outsider = nodes
        for topic, prefer in (("led-by-member", member), ("led-by-outsider", outsider)):
            query = f"/topic/create?topic={topic}&partition_num=1&replicator=2"
            query += f"&prefer=127.0.0.1:{prefer.tcp_port}"
            assert post(lookupd, query) == (200, b"")
            wait_for(lambda t=topic: all(roles(n, t) for n in nodes), what="placed on both")
            assert (roles(prefer, topic) or {}).get(0) == "leader"
            # not acknowledged while the replica does not follow: sent without waiting
            pending.append(publish_no_wait(prefer, topic, b"kept from the outsider"))
        time.sleep(3)  # several follow attempts
        for topic, leader, follower in (
            ("led-by-member", member, outsider),
            ("led-by-outsider", outsider, member),
        ):
            assert partition_view(leader, topic, 0)["end_offset"] == 1
            assert partition_view(follower, topic, 0)["end_offset"] == 0
        # the member refused the outsider's certificate, and would not trust the outsider's
        assert "cluster handshake with 127.0.0.1 failed: TLS" in member.log_text()
        assert "certificate verify failed" in member.log_text()
    finally:
        for sock in pending:
            sock.close()
        for node in nodes:
            node.stop()
        lookupd.stop()


def publish_no_wait(node: Daemon, topic: str, body: bytes) -> socket.socket:
    """``POST /pub`` to ``node``, not waiting for the answer (the open socket)."""
    sock = socket.create_connection(("127.0.0.1", node.http_port), timeout=10)
    head = f"POST /pub?topic={topic} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
    sock.sendall(head.encode() + body)
    return sock
