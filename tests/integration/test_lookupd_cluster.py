"""A 2-node pnsq cluster around one pnsq nsqlookupd: placement through /topic/create, youzan's
/lookup shape, real pynsq and go-nsq consumers finding every partition through lookupd, a real
Go nsqd 1.3.0 registering, and default placements for topics stock clients auto-create."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from protocol import Sub
from tests.daemons import Daemon, go_nsqd
from tests.integration.lookupd_helpers import (
    get_json,
    in_sync,
    lookup,
    pnsq_cluster,
    post,
    publish_to_partition,
    request,
    roles,
    wait_for,
)
from tests.interop.drivers import Driver
from tests.rawclient import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.interop]

TOPIC = "parts"
PARTITIONS = 4
PEER_KEYS = [
    "id",
    "remote_address",
    "hostname",
    "broadcast_address",
    "tcp_port",
    "http_port",
    "version",
    "distributed_id",
]  # fmt: skip  (youzan nsqlookupd's PeerInfo, in its struct order)
META_KEYS = [
    "partition_num", "replica", "extend_support", "ordered", "multi_part",
    "disable_channel_auto_create",
]  # fmt: skip


@dataclass
class Cluster:
    lookupd: Daemon
    nodes: list[Daemon]
    work: Path

    def node_by_tcp_port(self, port: int) -> Daemon:
        return next(n for n in self.nodes if n.tcp_port == port)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    work = tmp_path_factory.mktemp("cluster")
    with pnsq_cluster(work, 2) as (lookupd, nodes):
        status, body = post(lookupd, f"/topic/create?topic={TOPIC}&partition_num={PARTITIONS}")
        assert (status, body) == (200, b"")
        yield Cluster(lookupd, nodes, work)


def placed(cluster: Cluster) -> dict[str, object] | None:
    """The youzan-style lookup once both nodes registered all partitions of the topic."""
    found = lookup(cluster.lookupd, TOPIC, "&access=w&metainfo=true")
    if found and len(found["partitions"]) == PARTITIONS and len(found["producers"]) == 2:
        return dict(found)
    return None


def test_partitions_are_spread_over_both_nodes(cluster: Cluster) -> None:
    found = wait_for(lambda: placed(cluster), what="placement")
    leaders = {info["tcp_port"] for info in found["partitions"].values()}  # type: ignore[attr-defined]
    assert leaders == {n.tcp_port for n in cluster.nodes}
    for node in cluster.nodes:  # each node holds all 4 partitions locally (for now)
        stats = get_json(node, f"/stats?format=json&topic={TOPIC}")
        [topic] = stats["topics"]
        assert topic["topic_name"] == TOPIC


def test_lookup_has_youzans_shape_key_for_key(cluster: Cluster) -> None:
    found = wait_for(lambda: placed(cluster), what="placement")
    assert list(found) == ["channels", "meta", "producers", "partitions"]
    meta = found["meta"]
    assert isinstance(meta, dict)
    assert list(meta) == META_KEYS
    assert (meta["partition_num"], meta["replica"]) == (PARTITIONS, 1)
    assert meta["extend_support"] is meta["ordered"] is meta["multi_part"] is False
    partitions = found["partitions"]
    assert isinstance(partitions, dict)
    assert list(partitions) == [str(p) for p in range(PARTITIONS)]
    producers = found["producers"]
    assert isinstance(producers, list)
    for peer in [*producers, *partitions.values()]:
        assert list(peer) == PEER_KEYS
        assert peer["id"] == peer["remote_address"]
        assert peer["broadcast_address"] == "127.0.0.1"
        assert peer["version"] == "1.3.0"
    plain = lookup(cluster.lookupd, TOPIC)  # a stock client's request: same keys, no meta
    assert list(plain) == ["channels", "producers", "partitions"]


def test_no_envelope_whatever_the_accept_header(cluster: Cluster) -> None:
    url = f"http://{cluster.lookupd.http_address}/lookup?topic={TOPIC}"
    status, raw, headers = request(url, headers={})
    assert status == 200
    assert headers["X-Nsq-Content-Type"] == "nsq; version=1.0"
    assert set(json.loads(raw)) == {"channels", "producers", "partitions"}
    status, raw, _ = request(f"http://{cluster.lookupd.http_address}/lookup?topic=nope", headers={})
    assert (status, json.loads(raw)) == (404, {"message": "TOPIC_NOT_FOUND"})
    status, raw, _ = request(f"http://{cluster.lookupd.http_address}/ping", headers={})
    assert (status, raw) == (200, b"OK")


@pytest.mark.parametrize("client", ["pynsq", "go-nsq"])
def test_stock_consumers_through_lookupd_get_every_partition(cluster: Cluster, client: str) -> None:
    found = wait_for(lambda: placed(cluster), what="placement")
    channel = f"ch-{client}"
    for node in cluster.nodes:  # the channel first, so no message predates it
        assert post(node, f"/channel/create?topic={TOPIC}&channel={channel}")[0] == 200
    wait_for(
        lambda: channel in (lookup(cluster.lookupd, TOPIC) or {}).get("channels", []),
        what="channel registration",
    )
    count = 40
    bodies = [f"{client}-{i}" for i in range(count)]
    partitions = found["partitions"]
    assert isinstance(partitions, dict)
    for i, body in enumerate(bodies):
        leader = cluster.node_by_tcp_port(partitions[str(i % PARTITIONS)]["tcp_port"])
        publish_to_partition(leader, TOPIC, i % PARTITIONS, body.encode())
    driver = Driver(client)
    try:
        argv = driver.sub_argv(
            "", TOPIC, channel, count, timeout=40, lookupd=cluster.lookupd.http_address
        )
        run = driver.run(argv)
    finally:
        driver.cleanup()
    assert run.returncode == 0, run.stderr[-3000:]
    assert sorted(str(d["body"]) for d in run.deliveries) == sorted(bodies)
    assert run.summary["connections"] == 2  # one per nsqd that lookupd listed


def test_auto_created_topic_gets_a_default_placement(cluster: Cluster) -> None:
    node = cluster.nodes[1]
    assert post(node, "/pub?topic=auto_made", b"hello") == (200, b"OK")

    def adopted() -> dict[str, object] | None:
        found = lookup(cluster.lookupd, "auto_made", "&metainfo=true")
        return dict(found) if found and found["partitions"] else None

    found = wait_for(adopted, what="adoption")
    assert found["meta"]["partition_num"] == 1  # type: ignore[index]
    assert found["partitions"]["0"]["tcp_port"] == node.tcp_port  # type: ignore[index]
    assignments = get_json(cluster.lookupd, f"/pnsq/assignments?node=127.0.0.1:{node.tcp_port}")
    assert assignments["topics"]["auto_made"]["partitions"]["0"]["leader"] == (
        f"127.0.0.1:{node.tcp_port}"
    )


def test_go_nsqd_registers_with_pnsq_lookupd(cluster: Cluster) -> None:
    go = go_nsqd(cluster.work / "go", f"--lookupd-tcp-address={cluster.lookupd.tcp_address}")
    go.start()
    try:
        assert post(go, "/topic/create?topic=from_go")[0] == 200
        assert post(go, "/channel/create?topic=from_go&channel=gc")[0] == 200

        def registered() -> dict[str, object] | None:
            found = lookup(cluster.lookupd, "from_go", "&metainfo=true")
            if found and found["channels"] == ["gc"]:
                return dict(found)
            return None

        found = wait_for(registered, what="Go nsqd registration")
        [producer] = found["producers"]  # type: ignore[misc]
        assert (producer["tcp_port"], producer["http_port"]) == (go.tcp_port, go.http_port)
        assert found["partitions"] == {}  # a stock nsqd registers no partition
        assert found["meta"]["partition_num"] == 0  # type: ignore[index]  (no placement: not pnsq's)
        nodes = get_json(cluster.lookupd, "/nodes")["producers"]
        assert go.tcp_port in {n["tcp_port"] for n in nodes}
    finally:
        go.stop()
    lookupd_errors = [
        line for line in go.log_text().splitlines() if "LOOKUPD" in line and "ERROR" in line
    ]
    assert lookupd_errors == []


CREATE_CASES = [
    ("topic=c1&partition_num=0", 400, "INVALID_ARG_TOPIC_PARTITION_NUM"),
    ("topic=c1&partition_num=256", 400, "INVALID_ARG_TOPIC_PARTITION_NUM"),
    ("topic=c1&replicator=6", 400, "INVALID_ARG_TOPIC_REPLICATOR"),
    ("topic=c1&replicator=3", 400,
     "NOT_ENOUGH_NODES: replicator 3 needs 3 nsqd nodes, 2 registered"),
    ("topic=c1&suggestload=10001", 400, "INVALID_ARG_TOPIC_LOAD_FACTOR"),
    ("topic=c1&syncdisk=x", 400, "INVALID_ARG_TOPIC_SYNC_DISK"),
    ("topic=c1&retention=x", 400, 'strconv.Atoi: parsing "x": invalid syntax'),
    ("topic=c1&syncdisk=-3", 400, "INVALID_ARG_TOPIC_SYNC_DISK"),
    ("topic=c1&retention=-5", 400, "INVALID_ARG_TOPIC_RETENTION"),
    ("topic=a!", 400, "INVALID_ARG_TOPIC"),
]  # fmt: skip


@pytest.mark.parametrize(("query", "status", "message"), CREATE_CASES)
def test_topic_create_refusals(cluster: Cluster, query: str, status: int, message: str) -> None:
    got, raw = post(cluster.lookupd, f"/topic/create?{query}")
    assert (got, json.loads(raw)) == (status, {"message": message})
    assert "c1" not in get_json(cluster.lookupd, "/topics")["topics"]  # nothing left behind


CHANGE_CASES = [
    ("/topic/meta/update?topic=chg&retention=-5", "INVALID_ARG_TOPIC_RETENTION"),
    ("/topic/meta/update?topic=chg&syncdisk=-3", "INVALID_ARG_TOPIC_SYNC_DISK"),
    ("/topic/meta/update?topic=chg&replicator=0", "INVALID_ARG_TOPIC_REPLICATOR"),
    ("/topic/partition/expand?topic=chg", "INVALID_ARG_TOPIC_PARTITION_NUM"),
    ("/topic/partition/expand?topic=chg&partition_num=", "INVALID_ARG_TOPIC_PARTITION_NUM"),
    ("/cluster/node/remove?remove_node={node}&restore=maybe", "INVALID_ARG_RESTORE: true or false"),
    ("/cluster/node/remove?remove_node={node}&restore=1", "INVALID_ARG_RESTORE: true or false"),
    ("/cluster/node/remove?remove_node=127.0.0.1:1&restore=true", "REMOVE_NODE_NOT_FOUND"),
]


@pytest.mark.parametrize(("path", "message"), CHANGE_CASES)
def test_topic_and_node_change_refusals(cluster: Cluster, path: str, message: str) -> None:
    """A bad value is one 400 and changes nothing (a negative retention or fsync interval
    was saved, ``restore=`` anything but ``true`` drained the node)."""
    assert post(cluster.lookupd, "/topic/create?topic=chg&partition_num=1")[0] == 200
    node = f"127.0.0.1:{cluster.nodes[0].tcp_port}"
    got, raw = post(cluster.lookupd, path.format(node=node))
    assert (got, json.loads(raw)) == (400, {"message": message})
    meta = lookup(cluster.lookupd, "chg", "&metainfo=true")["meta"]
    assert (meta["partition_num"], meta["replica"]) == (1, 1)
    stats = get_json(cluster.lookupd, "/cluster/stats")["node_stat_list"]
    assert not any(n["removing"] for n in stats)  # nothing drained
    placed = get_json(cluster.lookupd, f"/pnsq/assignments?node={node}")["topics"]["chg"]
    assert (placed["meta"]["retention_days"], placed["meta"]["sync_every"]) == (0, 0)


def test_topic_create_with_youzans_parameters(cluster: Cluster) -> None:
    query = "topic=rich&partition_num=2&replicator=2&orderedmulti=true&extend=true&retention=3"
    assert post(cluster.lookupd, f"/topic/create?{query}") == (200, b"")
    assert post(cluster.lookupd, f"/topic/create?{query}") == (200, b"")  # idempotent
    got, raw = post(cluster.lookupd, "/topic/create?topic=rich&partition_num=3&replicator=2")
    assert (got, json.loads(raw)) == (400, {"message": "TOPIC_ALREADY_EXISTS"})
    # named without any topic parameter (nsqadmin's create before a channel): 200, unchanged,
    # as nsqlookupd answers for a topic it knows
    assert post(cluster.lookupd, "/topic/create?topic=rich") == (200, b"")
    node = f"127.0.0.1:{cluster.nodes[0].tcp_port}"
    assignment = get_json(cluster.lookupd, f"/pnsq/assignments?node={node}")["topics"]["rich"]
    parts = assignment["partitions"]
    names = {f"127.0.0.1:{n.tcp_port}" for n in cluster.nodes}
    for part in parts.values():  # leaders go to the least-loaded node; replicas elsewhere
        assert {part["leader"], *part["replicas"]} == names
    meta = wait_for(lambda: lookup(cluster.lookupd, "rich", "&metainfo=true"))["meta"]
    assert (meta["ordered"], meta["extend_support"], meta["replica"]) == (True, True, 2)
    # both nodes hold and registered it before it is deleted (a registration arriving after
    # the delete would have lookupd adopt the topic again: see docs/cluster.md, Not yet)
    leaders = {part["leader"] for part in parts.values()}
    wait_for(
        lambda: len(lookup(cluster.lookupd, "rich")["producers"]) == len(leaders),
        what="registered by its leaders",
    )
    got, raw = post(cluster.lookupd, "/topic/delete?topic=rich&partition=1")
    assert (got, json.loads(raw)) == (400, {"message": "REMOVE_SINGLE_PARTITION_NOT_ALLOWED"})
    assert post(cluster.lookupd, "/topic/delete?topic=rich&partition=**") == (200, b"")
    assert "rich" not in get_json(cluster.lookupd, f"/pnsq/assignments?node={node}")["topics"]


def test_listlookup_names_this_lookupd(cluster: Cluster) -> None:
    listed = get_json(cluster.lookupd, "/listlookup")
    me = {
        "ID": f"127.0.0.1:{cluster.lookupd.http_port}:{cluster.lookupd.tcp_port}",
        "NodeIP": "127.0.0.1",
        "TcpPort": str(cluster.lookupd.tcp_port),
        "HttpPort": str(cluster.lookupd.http_port),
        "RpcPort": "",
        "Epoch": 0,
    }
    assert listed == {"lookupdnodes": [me], "lookupdleader": me}


def test_stats_count_each_message_once_over_the_nodes(cluster: Cluster) -> None:
    """nsqadmin and nsq_stat add each node's /stats: a replica's copy of a partition (and of
    its channels) is counted by its leader only, so a replicated topic's backlog is not
    counted once per copy. The partitions list still shows every partition held."""
    assert (
        post(cluster.lookupd, "/topic/create?topic=counted&partition_num=2&replicator=2")[0] == 200
    )
    wait_for(
        lambda: all(
            roles(n, "counted") and len(roles(n, "counted") or {}) == 2 for n in cluster.nodes
        )
    )

    def summed(key: str, channel: bool) -> int:
        total = 0
        for node in cluster.nodes:
            for topic in get_json(node, "/stats?format=json&topic=counted")["topics"] or ():
                entries = topic["channels"] if channel else [topic]
                total += sum(entry[key] for entry in entries)
        return total

    leaders = wait_for(
        lambda: len(found := lookup(cluster.lookupd, "counted")["partitions"]) == 2 and found
    )
    for n in range(4):
        leader = cluster.node_by_tcp_port(leaders[str(n % 2)]["tcp_port"])
        publish_to_partition(leader, "counted", n % 2, b"m%d" % n)
    wait_for(lambda: summed("depth", channel=False) == 4, what="topic depth 4 over the nodes")
    for node in cluster.nodes:
        assert post(node, "/channel/create?topic=counted&channel=c")[0] == 200
    wait_for(lambda: summed("depth", channel=True) == 4, what="channel depth 4 over the nodes")
    assert summed("message_count", channel=False) == 4
    held = get_json(cluster.nodes[0], "/stats?format=json&topic=counted")["topics"][0]
    assert len(held["partitions"]) == 2  # one led, one a replica: both listed


def test_a_silent_node_takes_no_new_partitions(cluster: Cluster) -> None:
    """A node still registered but not heard from (hung, cut off) is given no new partition:
    they were offline from their first moment. Once it is back it takes its share again."""
    a, b = cluster.nodes
    a_id, b_id = (f"127.0.0.1:{n.tcp_port}" for n in (a, b))
    query = f"/topic/create?topic=watch&partition_num=1&replicator=2&prefer={a_id}"
    assert post(cluster.lookupd, query)[0] == 200

    def isr() -> list[str]:
        return in_sync(cluster.lookupd, a_id, "watch")

    wait_for(lambda: isr() == [a_id, b_id] or isr() == [b_id, a_id], what="b in sync")
    assert b.proc is not None
    b.proc.send_signal(signal.SIGSTOP)
    try:
        wait_for(lambda: isr() == [a_id], what="lookupd takes b for gone")
        assert post(cluster.lookupd, "/topic/create?topic=afresh&partition_num=4")[0] == 200
        placed = get_json(cluster.lookupd, f"/pnsq/assignments?node={a_id}")["topics"]["afresh"]
        assert {p["leader"] for p in placed["partitions"].values()} == {a_id}
    finally:
        b.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: sorted(isr()) == sorted([a_id, b_id]), what="b back in sync")


def test_a_topic_created_while_every_node_is_drained_is_placed_once_one_is_back(
    cluster: Cluster,
) -> None:
    """Nothing to place it on: lookupd keeps it pending (and answers at once instead of waiting
    for registrations that cannot come: the node's request timed out, and its publish said
    "lookupd unreachable: <address>: "); a publish says the topic has no leader; once a node
    takes placements again, the topic is placed there and takes publishes. Last in the module:
    it drains both nodes (restored before it ends)."""
    ids = [f"127.0.0.1:{node.tcp_port}" for node in cluster.nodes]
    node_http = f"http://{cluster.nodes[0].http_address}"
    try:
        for node_id in ids:
            assert post(cluster.lookupd, f"/cluster/node/remove?remove_node={node_id}")[0] == 200
        assert post(cluster.lookupd, "/topic/create?topic=waiting&partition_num=2") == (200, b"")
        assert lookup(cluster.lookupd, "waiting", "&access=r")["partitions"] == {}
        for topic in ("waiting", "unknown_yet"):  # placed by lookupd, and made by the publish
            status, body, _ = request(f"{node_http}/pub?topic={topic}", "POST", data=b"m")
            expected = f"E_PUB_FAILED topic {topic} has no partition leader"
            assert (status, json.loads(body)) == (503, {"message": expected})
        consumer = RawClient(cluster.nodes[0].tcp_address)
        consumer.send(Sub("waiting", "c"))  # made no copy of its own (acknowledged, then lost)
        assert consumer.read().data == b"E_FAILED_ON_NOT_LEADER "
        assert consumer.closed_by_server()
        assert roles(cluster.nodes[0], "waiting") is None
    finally:
        for node_id in ids:
            query = f"/cluster/node/remove?remove_node={node_id}&restore=true"
            assert post(cluster.lookupd, query)[0] == 200
    placed_now = wait_for(lambda: lookup(cluster.lookupd, "waiting")["partitions"] or None)
    assert sorted(placed_now) == ["0", "1"]
    status, body, _ = request(f"{node_http}/pub?topic=waiting", "POST", data=b"m")
    assert (status, body) == (200, b"OK")
