"""The real nsqadmin 1.3.0 pointed at a daemon (--nsqd-http-address, no lookupd): its JSON API
must show the topic, the channel, depths and client counts, with no upstream error.

nsqadmin reads nsqd's /info and /stats?format=json (with topic=, channel= and
include_clients=false filters); see nsqadmin/http.go and internal/clusterinfo in
github.com/nsqio/nsq@v1.3.0. Run against Go nsqd 1.3.0 (proving each expectation) and pnsq.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from protocol import Rdy, Sub
from tests.daemons import Daemon, Peer, go_nsqd, nsqadmin, pnsq_nsqd
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration

TOPIC = "admin_topic"
CHANNEL = "admin_chan"
N = 5  # messages published; the consumer holds one in flight, so the channel's depth is N - 1
CLIENT_ID = "admin-probe"


@dataclass
class Setup:
    daemon: Daemon
    admin: Peer


def get(url: str) -> tuple[int, Any]:
    req = urllib.request.Request(url, headers={"Accept": "application/vnd.nsq; version=1.0"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


@pytest.fixture(scope="module", params=["go-nsqd", "pnsq"])
def setup(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    path: Path = tmp_path_factory.mktemp(f"admin-{request.param}")
    make = go_nsqd if request.param == "go-nsqd" else pnsq_nsqd
    daemon = make(path / "data").start()
    consumer: RawClient | None = None
    admin: Peer | None = None
    try:
        body = b"\n".join(b"m%d" % i for i in range(N))
        pub = urllib.request.Request(
            f"http://{daemon.http_address}/mpub?topic={TOPIC}", body, method="POST"
        )
        with urllib.request.urlopen(pub, timeout=5) as r:
            assert r.read() == b"OK"
        consumer = RawClient(daemon.tcp_address)
        consumer.identify(client_id=CLIENT_ID, hostname="probe.local", user_agent="probe/1")
        consumer.send(Sub(TOPIC, CHANNEL), Rdy(1))
        assert consumer.read().data == b"OK"
        assert consumer.read(skip_heartbeats=True).is_message  # now one in flight, not FINed
        admin = nsqadmin(path / "admin", daemon.http_address).start()
        yield Setup(daemon, admin)
    finally:
        if admin is not None:
            admin.stop()
        if consumer is not None:
            consumer.close()
        daemon.stop()


def nsqd_stats(daemon: Daemon) -> dict[str, Any]:
    status, stats = get(f"http://{daemon.http_address}/stats?format=json&topic={TOPIC}")
    assert status == 200, stats
    [topic] = stats["topics"]
    return dict(topic)


def admin_get(setup: Setup, path: str) -> Any:
    status, body = get(f"{setup.admin.url}{path}")
    assert status == 200, f"{path}: {status} {body}\n{setup.admin.log_text()[-2000:]}"
    assert body["message"] == "", body  # a warning means nsqadmin failed to read some nsqd
    return body


def test_topics_lists_the_topic(setup: Setup) -> None:
    body = admin_get(setup, "/api/topics")
    assert body["topics"] == [TOPIC]


def test_nodes_lists_the_daemon(setup: Setup) -> None:
    body = admin_get(setup, "/api/nodes")
    [node] = body["nodes"]
    assert node["broadcast_address"] == "127.0.0.1"
    assert (node["tcp_port"], node["http_port"]) == (setup.daemon.tcp_port, setup.daemon.http_port)
    assert node["version"] == "1.3.0"
    assert node["topics"] == [{"topic": TOPIC, "tombstoned": False}]
    assert node["hostname"]


def test_topic_detail_has_depths_and_the_channel(setup: Setup) -> None:
    body = admin_get(setup, f"/api/topics/{TOPIC}")
    stats = nsqd_stats(setup.daemon)
    assert body["topic_name"] == TOPIC
    assert body["node"] == "*"  # the aggregate over nodes
    assert body["message_count"] == N == stats["message_count"]
    assert body["depth"] == stats["depth"]
    assert body["backend_depth"] == stats["backend_depth"]
    assert body["memory_depth"] == stats["depth"] - stats["backend_depth"]
    assert body["paused"] is False
    [node] = body["nodes"]
    assert node["node"] == setup.daemon.http_address
    assert node["topic_name"] == TOPIC
    [channel] = body["channels"]
    [nsqd_channel] = stats["channels"]
    assert channel["channel_name"] == CHANNEL
    assert channel["depth"] == N - 1 == nsqd_channel["depth"]
    assert channel["in_flight_count"] == 1 == nsqd_channel["in_flight_count"]
    assert channel["message_count"] == N == nsqd_channel["message_count"]
    assert channel["client_count"] == 1 == nsqd_channel["client_count"]
    assert (channel["deferred_count"], channel["requeue_count"], channel["timeout_count"]) == (
        0,
        0,
        0,
    )


def test_channel_detail_has_the_client(setup: Setup) -> None:
    body = admin_get(setup, f"/api/topics/{TOPIC}/{CHANNEL}")
    assert (body["topic_name"], body["channel_name"]) == (TOPIC, CHANNEL)
    assert (body["depth"], body["in_flight_count"], body["client_count"]) == (N - 1, 1, 1)
    [client] = body["clients"]
    assert client["client_id"] == CLIENT_ID
    assert client["hostname"] == "probe.local"
    assert client["user_agent"] == "probe/1"
    assert client["version"] == "V2"
    assert client["node"] == setup.daemon.http_address
    assert (client["in_flight_count"], client["ready_count"], client["message_count"]) == (1, 1, 1)
    assert client["remote_address"].startswith("127.0.0.1:")


def test_node_detail_totals(setup: Setup) -> None:
    node = urllib.parse.quote(setup.daemon.http_address)
    body = admin_get(setup, f"/api/nodes/{node}")
    assert body["node"] == setup.daemon.http_address
    assert [t["topic_name"] for t in body["topics"]] == [TOPIC]
    assert body["total_messages"] == N
    assert body["total_clients"] == 1
