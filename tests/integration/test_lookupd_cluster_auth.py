"""A secured cluster, end to end: a lookupd and two nsqd with ``--cluster-secret-file``, the nodes
with ``--auth-http-address`` pointing at a real auth server on loopback.

* The V1 registration link: a stranger's raw ``"  V1"`` IDENTIFY/REGISTER gets one error and a
  closed connection, a silent one is dropped after the handshake timeout, and a node with the
  wrong secret neither registers nor follows.
* Stock clients (pynsq, go-nsq) publish and consume with AUTH through this cluster unchanged,
  and nsqadmin 1.3.0 lists its topics and nodes.
* lookupd's cluster-control endpoints answer ``401 CLUSTER_AUTH_REQUIRED`` to a request without
  ``X-Pnsq-Cluster-Auth``; nodes holding the secret send it, so placement, failover and
  hand-over work as before; NSQ's own endpoints stay open.

The tests share one cluster and run in file order: the control-endpoint ones come last (the
last of them leaves the first node "leaving", which takes no new partitions).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from protocol.cluster_auth import (
    DIALER,
    HTTP_HEADER,
    FrameType,
    Handshake,
    HandshakeRefused,
    http_credential,
)
from protocol.lookup_v1 import MAGIC_V1, encode_command, encode_identify
from protocol.replication import MAGIC as MAGIC_R1
from tests.authserver import AuthServer
from tests.daemons import (
    Daemon,
    cluster_secret_flag,
    go_lookupd,
    go_nsqd,
    nsqadmin,
    pnsq_nsqd,
)
from tests.integration.lookupd_helpers import (
    ACCEPT,
    get_json,
    lookup,
    post,
    request,
    roles,
    wait_for,
)
from tests.integration.test_replication_auth import create, fail_over, start_cluster
from tests.interop.drivers import Driver
from tests.v1client import v1_replies

pytestmark = pytest.mark.integration

SECRET = "s3cret"
AUTH = {**ACCEPT, HTTP_HEADER: http_credential(SECRET.encode())}
WRONG = {**ACCEPT, HTTP_HEADER: http_credential(b"wrong")}
REFUSED = {"message": "CLUSTER_AUTH_REQUIRED"}
#: the auth server's one client secret: publish and subscribe anywhere
CLIENT_SECRET = "client-token"
GRANT = {"topic": ".*", "channels": [".*"], "permissions": ["subscribe", "publish"]}
#: a node's IDENTIFY body (the fields nsqlookupd requires)
NODE = {"broadcast_address": "127.0.0.1", "tcp_port": 1, "http_port": 2, "version": "1.3.0"}

# (method, path and query, body): each one a request lookupd answers 200 once authorized
# ({node} is the first node's id, {topic} a topic the cluster placed)
PROTECTED = [
    ("GET", "/pnsq/assignments?node={node}", None),
    ("POST", "/pnsq/progress", b'{"node": "{node}", "partitions": []}'),
    ("POST", "/topic/meta/update?topic={topic}&retention=3", None),
    ("POST", "/topic/partition/expand?topic={topic}&partition_num=2", None),
    ("GET", "/cluster/stats", None),
    ("POST", "/cluster/node/remove?remove_node={node}&restore=true", None),  # (not drained)
    ("POST", "/pnsq/leaving?node={node}", None),  # last: the node stays "leaving"
]
STOCK = [
    ("GET", "/ping"),
    ("GET", "/info"),
    ("GET", "/debug"),
    ("GET", "/lookup?topic={topic}"),
    ("GET", "/topics"),
    ("GET", "/channels?topic={topic}"),
    ("GET", "/nodes"),
    ("GET", "/listlookup"),
    ("POST", "/topic/create?topic=stock_made"),
    ("POST", "/channel/create?topic={topic}&channel=ch"),
    ("POST", "/channel/delete?topic={topic}&channel=ch"),
    ("POST", "/topic/tombstone?topic={topic}&node=127.0.0.1:1"),
]


@pytest.fixture(scope="module")
def auth_server() -> Iterator[AuthServer]:
    server = AuthServer({CLIENT_SECRET: (200, {"ttl": 3600, "authorizations": [GRANT]})})
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, auth_server: AuthServer
) -> Iterator[tuple[Daemon, list[Daemon]]]:
    lookupd, nodes = start_cluster(
        tmp_path_factory.mktemp("lookupd_auth"),
        [SECRET, SECRET],
        node_flags=(f"--auth-http-address={auth_server.address}",),
    )
    try:
        yield lookupd, nodes
    finally:
        for node in nodes:
            node.stop()
        lookupd.stop()


def call(
    lookupd: Daemon, method: str, path: str, headers: dict[str, str], body: bytes | None = None
) -> tuple[int, Any]:
    status, raw, _ = request(f"http://{lookupd.http_address}{path}", method, headers, body)
    return status, (json.loads(raw) if raw.startswith(b"{") else raw)


def placement(lookupd: Daemon, node: Daemon, topic: str) -> dict[str, Any]:
    status, doc = call(lookupd, "GET", f"/pnsq/assignments?node=127.0.0.1:{node.tcp_port}", AUTH)
    assert status == 200, doc
    return dict(doc["topics"][topic]["partitions"]["0"])


# ------------------------------------------------------------------ the V1 registration link


def until_closed(sock: socket.socket, wait: float = 10.0) -> bytes:
    """Everything the peer sends until it closes the connection."""
    sock.settimeout(wait)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_a_strangers_registration_gets_one_error_and_a_close(
    cluster: tuple[Daemon, list[Daemon]],
) -> None:
    lookupd, nodes = cluster
    with socket.create_connection(("127.0.0.1", lookupd.tcp_port), timeout=10) as sock:
        sock.sendall(
            MAGIC_V1
            + encode_identify(NODE)
            + encode_command("REGISTER", "stranger_topic")
            + encode_command("PING")
        )
        replies = v1_replies(until_closed(sock))
    # one error, then closed: no IDENTIFY reply (lookupd's ports), no OK
    assert replies == [b"E_CLUSTER_AUTH cluster handshake required (docs/security.md)"]
    producers = get_json(lookupd, "/nodes")["producers"]
    assert {p["tcp_port"] for p in producers} == {n.tcp_port for n in nodes}
    assert "stranger_topic" not in get_json(lookupd, "/topics")["topics"]


def test_a_silent_registration_peer_is_dropped_within_seconds(
    cluster: tuple[Daemon, list[Daemon]],
) -> None:
    lookupd, _ = cluster
    with socket.create_connection(("127.0.0.1", lookupd.tcp_port), timeout=10) as sock:
        sock.sendall(MAGIC_V1)
        started = time.monotonic()
        data = until_closed(sock)
    assert data[4] == FrameType.REFUSAL
    assert b"no handshake in time" in data
    assert time.monotonic() - started < 6


def test_a_node_with_the_wrong_secret_cannot_register_nor_follow(
    cluster: tuple[Daemon, list[Daemon]], auth_server: AuthServer, tmp_path: Path
) -> None:
    lookupd, nodes = cluster
    flags = (
        f"--lookupd-tcp-address={lookupd.tcp_address}",
        cluster_secret_flag(tmp_path / "wrong.secret", "wrong"),
        f"--auth-http-address={auth_server.address}",
    )
    wrong = pnsq_nsqd(tmp_path / "wrong", *flags).start()
    try:
        wait_for(lambda: "cluster handshake with" in wrong.log_text(), what="refused")
        time.sleep(2)  # several reconnections
        producers = get_json(lookupd, "/nodes")["producers"]
        assert {p["tcp_port"] for p in producers} == {n.tcp_port for n in nodes}
        # a topic with as many copies as registered nodes: none placed on it
        leader, _ = create(lookupd, nodes, "withheld")
        assert roles(wrong, "withheld") is None
        # the node says why, at most once a minute however often it retries
        failures = [line for line in wrong.log_text().splitlines() if "cluster handshake" in line]
        assert len(failures) == 1
        assert "E_CLUSTER_AUTH" in failures[0]
        assert "assignments" not in wrong.log_text()  # it never learnt lookupd's HTTP port
        # and it cannot follow: the leader's replication port refuses its credential
        with socket.create_connection(("127.0.0.1", leader.tcp_port), timeout=10) as sock:
            sock.sendall(MAGIC_R1)
            shake = Handshake(b"wrong", DIALER, MAGIC_R1, f"127.0.0.1:{wrong.tcp_port}")
            with pytest.raises(HandshakeRefused, match="E_CLUSTER_AUTH"):
                dial(sock, shake)
    finally:
        wrong.stop()


def dial(sock: socket.socket, shake: Handshake) -> None:
    """Run the dialer's side of ``shake`` over ``sock`` until done (or it raises)."""
    sock.settimeout(10)
    sock.sendall(shake.data_to_send())
    while not shake.done:
        shake.receive_data(sock.recv(65536))
        sock.sendall(shake.data_to_send())


def test_stock_go_nsqd_cannot_register_with_a_lookupd_holding_a_secret(
    cluster: tuple[Daemon, list[Daemon]], tmp_path: Path
) -> None:
    lookupd, nodes = cluster
    stock = go_nsqd(tmp_path / "go-nsqd", f"--lookupd-tcp-address={lookupd.tcp_address}")
    stock.start()
    try:
        wait_for(lambda: "E_CLUSTER_AUTH" in stock.log_text(), what="refused")
        producers = get_json(lookupd, "/nodes")["producers"]
        assert {p["tcp_port"] for p in producers} == {n.tcp_port for n in nodes}
    finally:
        stock.stop()


# ------------------------------------------------------------------ stock clients and tools


@pytest.mark.interop
@pytest.mark.parametrize("client", ["pynsq", "go-nsq"])
def test_stock_clients_publish_and_consume_with_auth(
    cluster: tuple[Daemon, list[Daemon]], client: str
) -> None:
    """A new topic published on a node (which has lookupd create it, leading it itself), then
    consumed through lookupd's /lookup: both with AUTH, as against any nsqd."""
    lookupd, nodes = cluster
    driver = Driver(client)
    flags = driver.conn_flags(auth_secret=CLIENT_SECRET)
    topic = f"sealed_{client.replace('-', '_')}"
    published = driver.run(driver.pub_argv(nodes[0].tcp_address, topic, 30, extra=flags))
    assert published.returncode == 0, published.stderr
    wait_for(lambda: (lookup(lookupd, topic) or {}).get("producers"), what="at lookupd")
    argv = driver.sub_argv(
        "", topic, "ch", 30, timeout=30, extra=flags, lookupd=lookupd.http_address
    )
    consumed = driver.run(argv)
    assert consumed.returncode == 0, consumed.stderr
    assert {d["body"] for d in consumed.deliveries} == {f"msg-{i}" for i in range(30)}


@pytest.mark.interop
def test_nsqadmin_lists_the_topics_and_nodes_of_the_secured_cluster(
    cluster: tuple[Daemon, list[Daemon]], tmp_path: Path
) -> None:
    lookupd, nodes = cluster
    query = "/topic/create?topic=admin_sealed&partition_num=2&replicator=1"
    assert post(lookupd, query) == (200, b"")

    def placed() -> list[Daemon]:
        found = lookup(lookupd, "admin_sealed") or {}
        held = [n for n in nodes if roles(n, "admin_sealed")]
        return held if len(found.get("partitions") or {}) == 2 and found["producers"] else []

    held = wait_for(placed, what="placed, at lookupd")
    admin = nsqadmin(tmp_path / "admin", flags=(f"--lookupd-http-address={lookupd.http_address}",))
    admin.start()
    try:

        def admin_get(path: str) -> Any:
            status, body, _ = request(f"{admin.url}{path}")
            assert status == 200, (path, status, body, admin.log_text()[-2000:])
            document = json.loads(body)
            assert document["message"] == "", document  # nsqadmin read every upstream
            return document

        assert "admin_sealed" in admin_get("/api/topics")["topics"]
        listed = admin_get("/api/nodes")["nodes"]
        assert {n["tcp_port"] for n in listed} == {n.tcp_port for n in nodes}
        view = admin_get("/api/topics/admin_sealed")
        assert {n["node"] for n in view["nodes"]} == {n.http_address for n in held}
    finally:
        admin.stop()


# ------------------------------------------------------------------ lookupd's HTTP endpoints


@pytest.mark.parametrize(("method", "path", "body"), PROTECTED, ids=[p[1] for p in PROTECTED])
def test_a_control_endpoint_refuses_without_the_credential_and_accepts_with_it(
    cluster: tuple[Daemon, list[Daemon]], method: str, path: str, body: bytes | None
) -> None:
    lookupd, nodes = cluster
    topic = "ctl_" + path.split("?")[0].replace("/", "_").strip("_")
    assert post(lookupd, f"/topic/create?topic={topic}&partition_num=1&replicator=1") == (200, b"")
    node = f"127.0.0.1:{nodes[0].tcp_port}"
    path = path.format(node=node, topic=topic)
    data = body.replace(b"{node}", node.encode()) if body is not None else None
    assert call(lookupd, method, path, ACCEPT, data) == (401, REFUSED)
    assert call(lookupd, method, path, WRONG, data) == (401, REFUSED)
    status, answer = call(lookupd, method, path, AUTH, data)
    assert status == 200, answer


@pytest.mark.parametrize(("method", "path"), STOCK, ids=[s[1] for s in STOCK])
def test_a_stock_endpoint_answers_without_the_credential(
    cluster: tuple[Daemon, list[Daemon]], method: str, path: str
) -> None:
    lookupd, _ = cluster
    assert post(lookupd, "/topic/create?topic=stock&partition_num=1&replicator=1") == (200, b"")
    status, answer = call(lookupd, method, path.format(topic="stock"), ACCEPT)
    assert status == 200, answer


def test_placement_and_failover_with_the_shared_secret(tmp_path: Path) -> None:
    lookupd, nodes = start_cluster(tmp_path, [SECRET, SECRET])
    try:
        fail_over(lookupd, nodes, "guarded_failover", 3)
    finally:
        for node in nodes:
            node.stop()
        lookupd.stop()


def test_sigterm_hands_over_with_the_shared_secret(tmp_path: Path) -> None:
    lookupd, nodes = start_cluster(tmp_path, [SECRET, SECRET], "--heartbeat-timeout=60s")
    try:
        leader, replica = create(lookupd, nodes, "guarded_handover")
        epoch = placement(lookupd, replica, "guarded_handover")["epoch"]
        assert leader.stop() == 0
        # lookupd took the leaving node's POST /pnsq/leaving: the replica leads at once, long
        # before the heartbeat timeout would have moved it
        after = placement(lookupd, replica, "guarded_handover")
        assert after["leader"] == f"127.0.0.1:{replica.tcp_port}"
        assert after["epoch"] == epoch + 1
        assert "leaderships handed over" in leader.log_text()
    finally:
        for node in nodes:
            node.stop()
        lookupd.stop()


# ------------------------------------------------------------------ a stock nsqlookupd


def test_a_node_with_the_secret_registers_with_a_stock_nsqlookupd_as_go_nsqd_does(
    tmp_path: Path, auth_server: AuthServer
) -> None:
    """Go nsqlookupd 1.3.0 cannot answer the handshake: the node takes it for a stock lookupd
    and registers with it without pnsq's extensions (so it is never sent the credential nor
    obeyed), and a stock consumer finds the node's topic through it."""
    stock = go_lookupd(tmp_path / "go-lookupd").start()
    flags = (
        f"--lookupd-tcp-address={stock.tcp_address}",
        cluster_secret_flag(tmp_path / "node.secret", SECRET),
        f"--auth-http-address={auth_server.address}",
    )
    node = pnsq_nsqd(tmp_path / "node", *flags).start()
    try:
        assert post(node, "/pub?topic=via_stock", b"m") == (200, b"OK")
        found = wait_for(lambda: (lookup(stock, "via_stock") or {}).get("producers"), 20, "found")
        assert [p["tcp_port"] for p in found] == [node.tcp_port]
        assert "registering with it as with a stock nsqlookupd" in node.log_text()
        assert "assignments" not in node.log_text()  # no pnsq HTTP call went to it
        assert "ERROR" not in node.log_text()  # a stock lookupd is no error
    finally:
        node.stop()
        stock.stop()


def test_a_lookupd_taken_for_a_stock_one_gets_the_handshake_again(tmp_path: Path) -> None:
    """A secured lookupd that does not answer in time (here: paused) is taken for a stock
    one; its refusal of the plain IDENTIFY that follows (E_CLUSTER_AUTH) brings the handshake
    back, and the node is registered and placed as before."""
    lookupd, [node] = start_cluster(tmp_path, [SECRET])
    assert lookupd.proc is not None
    os.kill(lookupd.proc.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: "as with a stock nsqlookupd" in node.log_text(), 20, "taken for stock")
    finally:
        os.kill(lookupd.proc.pid, signal.SIGCONT)
    try:
        taken_at = node.log_text().index("as with a stock nsqlookupd")
        wait_for(lambda: "proved the cluster credential" in node.log_text()[taken_at:], 30, "again")
        wait_for(lambda: get_json(lookupd, "/nodes")["producers"], 10, "registered again")
        assert post(lookupd, "/topic/create?topic=after_pause&partition_num=1") == (200, b"")
        wait_for(lambda: roles(node, "after_pause"), what="placed")
    finally:
        node.stop()
        lookupd.stop()


def test_a_stranger_cannot_change_which_lookupds_a_node_registers_with(tmp_path: Path) -> None:
    """nsqd's PUT /config/nsqlookupd_tcp_addresses was open (as Go's): a stranger detached a
    node (its partitions failed over, or went offline), or pointed it at a relay that passed
    the handshake through to the real lookupd, then took the node's HTTP credential and fed it
    placement. On a node with the secret it asks for the credential now; reading stays open."""
    lookupd, [node] = start_cluster(tmp_path, [SECRET])
    try:
        url = f"http://{node.http_address}/config/nsqlookupd_tcp_addresses"
        for headers in ({}, {HTTP_HEADER: "wrong"}, {HTTP_HEADER: ""}):
            status, body, _ = request(url, "PUT", headers, b"[]")
            assert (status, json.loads(body)) == (401, REFUSED)
        status, body, _ = request(url, "GET", {}, None)
        assert (status, json.loads(body)) == (200, [lookupd.tcp_address])  # unchanged
        time.sleep(1.0)
        assert [p["tcp_port"] for p in get_json(lookupd, "/nodes")["producers"]] == [
            node.tcp_port
        ]  # still registered
        assert request(url, "PUT", AUTH, b"[]")[0] == 200  # the operator, with the credential
        wait_for(lambda: not get_json(lookupd, "/nodes")["producers"], what="detached")
    finally:
        node.stop()
        lookupd.stop()
