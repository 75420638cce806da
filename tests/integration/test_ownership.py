"""Partition ownership on a 2-node cluster around pnsq's lookupd: a node serves exactly the
partitions lookupd placed on it, in the role lookupd gave it (youzan's replies otherwise), and
stores nothing for a partition it does not lead.

Topic ``solo`` has 2 partitions and no replicas (each node holds one); topic ``pair`` has 2
partitions with 2 replicas (each node leads one and replicates the other).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from pnsq.client import open_consumer, open_producer, partition_for_key
from protocol import Dpub, Fin, Mpub, Pub, Rdy, Sub
from tests.daemons import Daemon, pnsq_lookupd, pnsq_nsqd
from tests.integration.lookupd_helpers import (
    get_json,
    lookup,
    pnsq_cluster,
    post,
    request,
    roles,
    stored,
    wait_for,
)
from tests.interop.drivers import Driver
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration

NOT_LEADER = b"E_FAILED_ON_NOT_LEADER "
NOT_EXIST = b"E_TOPIC_NOT_EXIST "


@dataclass
class Cluster:
    lookupd: Daemon
    nodes: list[Daemon]

    def leaders(self, topic: str) -> dict[int, Daemon]:
        """Partition -> leading node, from lookupd's placement."""
        node_id = {f"127.0.0.1:{n.tcp_port}": n for n in self.nodes}
        out = {}
        for node in self.nodes:
            doc = get_json(self.lookupd, f"/pnsq/assignments?node=127.0.0.1:{node.tcp_port}")
            entry = doc["topics"].get(topic)
            if entry is None:
                continue
            for number, part in entry["partitions"].items():
                out[int(number)] = node_id[part["leader"]]
        return out


def _http(node: Daemon, method: str, path: str, data: bytes | None = None) -> tuple[int, bytes]:
    status, body, _ = request(f"http://{node.http_address}{path}", method, {}, data)
    return status, body


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with pnsq_cluster(tmp_path_factory.mktemp("ownership"), 2) as (lookupd, nodes):
        for topic, replica in (("solo", 1), ("pair", 2)):
            query = f"/topic/create?topic={topic}&partition_num=2&replicator={replica}"
            assert post(lookupd, query) == (200, b"")
        for topic, per_node in (("solo", 1), ("pair", 2)):
            for node in nodes:
                wait_for(
                    lambda n=node, t=topic, k=per_node: (h := roles(n, t)) and len(h) == k,
                    what=f"{topic} on {node.tcp_port}",
                )
        yield Cluster(lookupd, nodes)


def _other(cluster: Cluster, node: Daemon) -> Daemon:
    return next(n for n in cluster.nodes if n is not node)


def test_each_node_holds_exactly_its_placement(cluster: Cluster) -> None:
    leaders = cluster.leaders("pair")
    assert set(leaders) == {0, 1}
    assert leaders[0] is not leaders[1]  # spread: each node leads one partition
    for number, leader in leaders.items():
        assert (roles(leader, "pair") or {}).get(number) == "leader"
        assert (roles(_other(cluster, leader), "pair") or {}).get(number) == "replica"
    solo = cluster.leaders("solo")
    for number, leader in solo.items():
        assert list(roles(leader, "solo") or {}) == [number]  # the other partition is not here


def test_publish_to_a_partition_led_elsewhere_is_refused_and_notstored(cluster: Cluster) -> None:
    leaders = cluster.leaders("pair")
    replica_node = _other(cluster, leaders[1])  # holds partition 1 as a replica
    before = stored(replica_node, "pair")
    client = RawClient(replica_node.tcp_address)
    client.send(Pub("pair", b"x", 1))
    assert client.read().data == NOT_LEADER  # youzan's non-fatal form on a publish
    client.send(Pub("pair", b"y", next(p for p, n in leaders.items() if n is replica_node)))
    assert client.read().data == b"OK"  # the connection stays; its own partition works
    client.close()
    status, body = _http(replica_node, "POST", "/pub?topic=pair&partition=1", b"z")
    assert (status, body) == (400, b'{"message":"E_FAILED_ON_NOT_LEADER"}')
    assert stored(replica_node, "pair") == before + 1  # only the accepted one

    solo = cluster.leaders("solo")
    outsider = _other(cluster, solo[0])  # does not hold solo's partition 0 at all
    client = RawClient(outsider.tcp_address)
    client.send(Pub("solo", b"x", 0))
    assert client.read().data == NOT_EXIST
    assert client.closed_by_server()  # fatal
    status, body = _http(outsider, "POST", "/pub?topic=solo&partition=0", b"z")
    assert (status, body) == (404, b'{"message":"E_TOPIC_NOT_EXIST"}')


def test_subscribe_to_a_partition_led_elsewhere_is_fatal(cluster: Cluster) -> None:
    leaders = cluster.leaders("pair")
    replica_node = _other(cluster, leaders[0])
    client = RawClient(replica_node.tcp_address)
    client.send(Sub("pair", "c", 0))
    assert client.read().data == NOT_LEADER
    assert client.closed_by_server()


def test_stock_clients_use_the_partitions_the_node_leads(cluster: Cluster) -> None:
    leaders = cluster.leaders("pair")
    for number, node in leaders.items():
        consumer = RawClient(node.tcp_address, timeout=10)
        consumer.send(Sub("pair", f"stock{number}", None), Rdy(100))
        assert consumer.read().data == b"OK"
        producer = RawClient(node.tcp_address)
        for i in range(6):
            producer.send(Pub("pair", b"m%d" % i))  # no partition: spread over the led ones
            assert producer.read().data == b"OK"
        got = []
        for _ in range(6):
            frame = consumer.read(skip_heartbeats=True)
            assert frame.is_message
            internal = int.from_bytes(frame.message_id[:8], "big")
            got.append(internal >> 50)  # the partition in the id
            consumer.send(Fin(frame.message_id))
        assert set(got) == {number}  # only the partition led here, both ways
        producer.close()
        consumer.close()


def test_lookup_producers_are_the_leaders(cluster: Cluster) -> None:
    leaders = cluster.leaders("solo")
    found = wait_for(
        lambda: (f := lookup(cluster.lookupd, "solo")) and len(f["partitions"]) == 2 and f,
        what="both partitions registered",
    )
    partitions = found["partitions"]
    for number, node in leaders.items():
        assert partitions[str(number)]["tcp_port"] == node.tcp_port


def test_a_stock_publish_on_a_node_that_leads_nothing_is_forwarded(cluster: Cluster) -> None:
    assert post(cluster.lookupd, "/topic/create?topic=one&partition_num=1") == (200, b"")
    leader = wait_for(lambda: cluster.leaders("one").get(0), what="placement of one")
    outsider = _other(cluster, leader)
    wait_for(lambda: roles(leader, "one") == {0: "leader"}, what="one on its leader")
    wait_for(lambda: lookup(cluster.lookupd, "one")["partitions"].get("0"), what="registered")
    client = RawClient(outsider.tcp_address)
    client.send(Pub("one", b"p1"), Pub("one", b"p2"))  # pipelined: one group commit
    assert [client.read().data for _ in range(2)] == [b"OK", b"OK"]
    client.send(Mpub("one", [b"m1", b"m2"]))
    assert client.read().data == b"OK"
    client.send(Dpub("one", 10, b"d1"))
    assert client.read().data == b"OK"
    client.close()
    assert _http(outsider, "POST", "/pub?topic=one", b"h1") == (200, b"OK")
    assert _http(outsider, "POST", "/mpub?topic=one", b"h2\nh3") == (200, b"OK")
    assert roles(outsider, "one") is None  # nothing of it here, not even the topic
    assert stored(leader, "one") == 8  # all on the leader, acknowledged after it stored them
    consumer = RawClient(leader.tcp_address, timeout=10)
    consumer.send(Sub("one", "c", None), Rdy(10))
    assert consumer.read().data == b"OK"
    bodies = set()
    for _ in range(8):
        frame = consumer.read(skip_heartbeats=True)
        bodies.add(frame.body)
        consumer.send(Fin(frame.message_id))
    assert bodies == {b"p1", b"p2", b"m1", b"m2", b"d1", b"h1", b"h2", b"h3"}
    consumer.close()


def test_without_lookupd_an_unknown_topic_is_refused_and_known_ones_work(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    work = tmp_path_factory.mktemp("nolookupd")
    lookupd = pnsq_lookupd(work / "lookupd").start()
    node = pnsq_nsqd(work / "n", f"--lookupd-tcp-address={lookupd.tcp_address}").start()
    try:
        wait_for(lambda: get_json(lookupd, "/nodes")["producers"], what="registration")
        client = RawClient(node.tcp_address)
        client.send(Pub("known", b"a"))
        assert client.read().data == b"OK"  # a new topic while lookupd is up: created here
        lookupd.stop()
        client.send(Pub("known", b"b"))
        assert client.read().data == b"OK"  # known topics keep working
        client.send(Pub("unknown", b"c"))
        reply = client.read().data
        assert reply.startswith(b"E_PUB_FAILED PUB failed lookupd unreachable")
        assert roles(node, "unknown") is None  # not created behind lookupd's back
    finally:
        node.stop()
        lookupd.stop()


def test_a_node_joining_with_data_never_makes_a_second_live_copy(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    work = tmp_path_factory.mktemp("joining")
    lookupd = pnsq_lookupd(work / "lookupd").start()
    placed = pnsq_nsqd(work / "a", f"--lookupd-tcp-address={lookupd.tcp_address}").start()
    joiner = pnsq_nsqd(work / "b").start()  # standalone first, with data of its own
    try:
        wait_for(lambda: get_json(lookupd, "/nodes")["producers"], what="registration")
        assert post(lookupd, "/topic/create?topic=shared&partition_num=1") == (200, b"")
        wait_for(lambda: roles(placed, "shared") == {0: "leader"}, what="placement")
        for topic, count in (("shared", 3), ("mine", 2)):
            for i in range(count):
                assert _http(joiner, "POST", f"/pub?topic={topic}", b"old%d" % i)[0] == 200
        joiner.stop()
        joiner.argv.append(f"--lookupd-tcp-address={lookupd.tcp_address}")
        joiner.start()

        # a topic nobody else has is adopted: the joiner leads it and keeps serving it
        wait_for(lambda: (lookup(lookupd, "mine") or {}).get("partitions"), what="adoption")
        assert roles(joiner, "mine") == {0: "leader"}
        # a topic placed elsewhere: the joiner's copy stops being served, kept on disk
        wait_for(lambda: roles(joiner, "shared") == {}, what="the joiner's copy dropped")
        assert "partition 0 is no longer placed here: not served (3 message(s) kept" in (
            joiner.log_text()
        )
        wait_for(
            lambda: (
                [p["tcp_port"] for p in lookup(lookupd, "shared")["producers"]] == [placed.tcp_port]
            ),
            what="the joiner no longer a producer of the topic",
        )
        client = RawClient(joiner.tcp_address)
        client.send(Pub("shared", b"new"))  # a stock publish there goes to the leader
        assert client.read().data == b"OK"
        client.close()
        assert stored(placed, "shared") == 1
        assert list((work / "b" / "topics" / "t-shared" / "0").glob("*.log"))  # data kept
    finally:
        joiner.stop()
        placed.stop()
        lookupd.stop()


@pytest.mark.interop
def test_stock_producers_on_every_node_and_a_stock_reader_through_lookupd(
    cluster: Cluster,
) -> None:
    """go-nsq's stock producer on each node (one of them leads no partition of the topic, so
    its PUBs are forwarded) and pynsq's stock reader through lookupd: every message once."""
    assert post(cluster.lookupd, "/topic/create?topic=stock&partition_num=1") == (200, b"")
    leader = wait_for(lambda: cluster.leaders("stock").get(0), what="placement")
    wait_for(lambda: lookup(cluster.lookupd, "stock")["partitions"].get("0"), what="registered")
    assert post(leader, "/channel/create?topic=stock&channel=readers")[0] == 200
    count = 50
    go = Driver("go-nsq")
    expected = []
    try:
        for node in cluster.nodes:
            prefix = f"from-{node.tcp_port}-"
            argv = go.pub_argv(node.tcp_address, "stock", count, extra=["-prefix", prefix])
            run = go.run(argv)
            assert run.returncode == 0, run.stderr[-2000:]
            expected += [f"{prefix}{i}" for i in range(count)]
    finally:
        go.cleanup()
    reader = Driver("pynsq")
    try:
        argv = reader.sub_argv(
            "", "stock", "readers", 2 * count, timeout=40, lookupd=cluster.lookupd.http_address
        )
        run = reader.run(argv)
    finally:
        reader.cleanup()
    assert run.returncode == 0, run.stderr[-3000:]
    assert sorted(str(d["body"]) for d in run.deliveries) == sorted(expected)  # each once
    assert stored(leader, "stock") == 2 * count
    assert roles(_other(cluster, leader), "stock") is None  # nothing stored elsewhere


async def test_the_pnsq_client_through_lookupd_reaches_every_leader(cluster: Cluster) -> None:
    """pnsq's own partition-aware client, given lookupd: keyed publishes go to each partition's
    leader wherever it is, and one consumer reads every partition from its leader."""
    assert post(cluster.lookupd, "/topic/create?topic=viaclient&partition_num=4") == (200, b"")
    wait_for(
        lambda: len((lookup(cluster.lookupd, "viaclient") or {}).get("partitions", {})) == 4,
        what="all four partitions registered by their leaders",
    )
    lookupd = cluster.lookupd.http_address
    keys = [f"key-{i}" for i in range(40)]
    async with open_producer(cluster.nodes[0].tcp_address, lookupd_http_address=lookupd) as p:
        for key in keys:
            await p.publish("viaclient", key.encode(), key=key)
    leaders = cluster.leaders("viaclient")
    for node in cluster.nodes:
        led = {n for n, leader in leaders.items() if leader is node}
        wanted = sum(1 for key in keys if partition_for_key(key, 4) in led)
        assert stored(node, "viaclient") == wanted  # each message on its partition's leader
    got: list[bytes] = []
    async with open_consumer(
        cluster.nodes[0].tcp_address, "viaclient", "c", lookupd_http_address=lookupd
    ) as consumer:
        assert consumer.connection_count == 4
        async for message in consumer:
            got.append(message.body)
            await message.finish()
            if len(got) == len(keys):
                break
    assert sorted(got) == sorted(key.encode() for key in keys)


def test_a_publish_of_a_new_topic_has_lookupd_create_it_led_by_that_node(cluster: Cluster) -> None:
    for node in cluster.nodes:
        topic = f"fresh{node.tcp_port}"
        client = RawClient(node.tcp_address)
        client.send(Pub(topic, b"first"))
        assert client.read().data == b"OK"
        client.close()
        assert cluster.leaders(topic) == {0: node}  # placed by lookupd, led by the asker
        assert stored(node, topic) == 1
    # both nodes publishing one new topic at once: one copy, every acknowledged message on it
    clients = [RawClient(node.tcp_address) for node in cluster.nodes]
    for client in clients:
        client.send(*[Pub("race", b"m%d" % i) for i in range(20)])
    for client in clients:
        assert [client.read().data for _ in range(20)] == [b"OK"] * 20
        client.close()
    (leader,) = cluster.leaders("race").values()  # one partition, one leader
    assert stored(leader, "race") == 40
    assert roles(_other(cluster, leader), "race") is None
