"""lookupd's cluster-control endpoints under the cluster credential: with
``--cluster-secret-file`` every endpoint that moves leadership, ISR or placement (or reveals
placement) answers ``401 CLUSTER_AUTH_REQUIRED`` to a request without ``X-Pnsq-Cluster-Auth``;
nodes holding the same secret send it, so placement, failover and hand-over work as before;
NSQ's own endpoints stay open for nsqadmin and the NSQ tools; a node with the wrong secret
gets no placement at all."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from protocol.cluster_auth import HTTP_HEADER, http_credential
from tests.daemons import Daemon
from tests.integration.lookupd_helpers import ACCEPT, get_json, post, request, roles, wait_for
from tests.integration.test_replication_auth import create, fail_over, start_cluster

pytestmark = pytest.mark.integration

SECRET = "s3cret"
AUTH = {**ACCEPT, HTTP_HEADER: http_credential(SECRET.encode())}
WRONG = {**ACCEPT, HTTP_HEADER: http_credential(b"wrong")}
REFUSED = {"message": "CLUSTER_AUTH_REQUIRED"}

# (method, path and query, body): each one a request lookupd answers 200 once authorized
# ({node} is the first node's id, {topic} a topic the cluster placed)
PROTECTED = [
    ("GET", "/pnsq/assignments?node={node}", None),
    ("POST", "/pnsq/progress", b'{"node": "{node}", "partitions": []}'),
    ("POST", "/topic/meta/update?topic={topic}&retention=3", None),
    ("POST", "/topic/partition/expand?topic={topic}&partition_num=2", None),
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
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, list[Daemon]]]:
    lookupd, nodes = start_cluster(tmp_path_factory.mktemp("lookupd_auth"), [SECRET, SECRET])
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


def test_a_node_with_the_wrong_secret_gets_no_assignments(tmp_path: Path) -> None:
    lookupd, nodes = start_cluster(tmp_path, [SECRET, "wrong"])
    right, wrong = nodes
    try:
        # it registers (the V1 link is not guarded yet), so lookupd places partitions on it
        assert len(get_json(lookupd, "/nodes")["producers"]) == 2
        query = "/topic/create?topic=withheld&partition_num=2&replicator=2"
        assert post(lookupd, query) == (200, b"")
        wait_for(lambda: roles(right, "withheld"), what="placed on the right node")
        time.sleep(3)  # several assignments polls
        # but lookupd never tells it: it holds nothing, and says why
        assert roles(wrong, "withheld") is None
        refused = [
            line
            for line in wrong.log_text().splitlines()
            if "assignments" in line and "401" in line
        ]
        assert refused
        assert not any(
            "assignments" in line and "401" in line for line in right.log_text().splitlines()
        )
    finally:
        for node in nodes:
            node.stop()
        lookupd.stop()
