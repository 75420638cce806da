"""youzan-style partition-aware clients and stock clients on a 2-node pnsq cluster around pnsq's
lookupd: every message is stored once, on the leader lookupd placed its partition on, and read
once through lookupd.

The partition-aware client is tests/interop/youzan (yzgonsq-interop): it finds each partition's
leader in lookupd's ``/lookup?access=w|r&metainfo=true`` ``partitions`` map and sends
``PUB t <pid>`` / ``SUB t c <pid>`` / ``SUB_ORDERED t c <pid>`` there, as youzan's go-nsq does.
Topics: ``yzparts`` (4 partitions), ``yzordered`` (4 partitions, ``orderedmulti``) and
``yzstock`` (1 partition, so one node leads none of it and forwards stock publishes).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.daemons import Daemon
from tests.integration.lookupd_helpers import get_json, pnsq_cluster, post, request, wait_for
from tests.interop.drivers import Driver, Run
from tests.interop.youzan_driver import run_yz, yz_pub_argv, yz_sub_argv

pytestmark = [pytest.mark.integration, pytest.mark.interop]

PARTITIONED = "yzparts"
ORDERED = "yzordered"
STOCK = "yzstock"
TOPICS = {
    PARTITIONED: "partition_num=4",
    ORDERED: "partition_num=4&orderedmulti=true",
    STOCK: "partition_num=1",
}
COUNT = 200


@dataclass
class Cluster:
    lookupd: Daemon
    nodes: list[Daemon]

    def node_id(self, node: Daemon) -> str:
        return f"127.0.0.1:{node.tcp_port}"

    def leaders(self, topic: str) -> dict[int, Daemon]:
        """Partition -> the node lookupd placed its leadership on."""
        out = {}
        by_id = {self.node_id(n): n for n in self.nodes}
        for node in self.nodes:
            doc = get_json(self.lookupd, f"/pnsq/assignments?node={self.node_id(node)}")
            for number, part in doc["topics"].get(topic, {}).get("partitions", {}).items():
                out[int(number)] = by_id[part["leader"]]
        return out

    def leading(self, topic: str) -> list[Daemon]:
        """The nodes that lead at least one of ``topic``'s partitions."""
        leaders = self.leaders(topic).values()
        return [n for n in self.nodes if any(n is leader for leader in leaders)]


def stored(node: Daemon, topic: str) -> dict[int, int]:
    """Partition -> messages stored on ``node`` (its /stats), for the partitions it lists."""
    stats = get_json(node, f"/stats?format=json&topic={topic}")
    out: dict[int, int] = {}
    for entry in stats["topics"] or ():
        if entry["topic_name"] == topic:
            for part in entry["partitions"]:
                out[part["partition"]] = part["message_count"]
    return out


def has_topic(node: Daemon, topic: str) -> bool:
    status, _, _ = request(f"http://{node.http_address}/partitions?topic={topic}")
    return status == 200


def create_channel(cluster: Cluster, topic: str, channel: str) -> None:
    """The channel first on every node that leads a partition, so no message predates it."""
    for node in cluster.leading(topic):
        status, body = post(node, f"/channel/create?topic={topic}&channel={channel}")
        assert status == 200, (node.tcp_port, status, body)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with pnsq_cluster(tmp_path_factory.mktemp("youzan"), 2) as (lookupd, nodes):
        for topic, query in TOPICS.items():
            assert post(lookupd, f"/topic/create?topic={topic}&{query}") == (200, b"")
        found = Cluster(lookupd, nodes)
        for topic, query in TOPICS.items():
            want = int(query.split("&")[0].split("=")[1])
            wait_for(lambda t=topic, w=want: len(found.leaders(t)) == w, what=f"{topic} placed")
            for node in found.leading(topic):  # and each leader has opened the topic
                wait_for(
                    lambda n=node, t=topic: has_topic(n, t), what=f"{topic} on {node.tcp_port}"
                )
        yield found


@pytest.fixture(scope="module")
def partitioned(cluster: Cluster) -> Run:
    """yzgonsq-interop's producer published COUNT round-robin messages to ``yzparts``, starting
    from a stale partition map that names the first node as every partition's leader: its
    publishes to the partitions that node does not hold must be refused (youzan's
    ``E_TOPIC_NOT_EXIST``), after which it looks the topic up again and goes to the leaders."""
    create_channel(cluster, PARTITIONED, "yz")
    stale = cluster.node_id(cluster.nodes[0])
    argv = yz_pub_argv(cluster.lookupd.http_address, PARTITIONED, COUNT, stale_leader=stale)
    published = run_yz(argv)
    assert published.returncode == 0, published.stderr
    assert published.summary["published"] == COUNT
    return published


def test_partitioned_producer_stores_each_message_once_on_its_leader(
    cluster: Cluster, partitioned: Run
) -> None:
    leaders = cluster.leaders(PARTITIONED)
    assert len(cluster.leading(PARTITIONED)) == 2  # both nodes lead some partition
    sent = [line for line in partitioned.lines if "sent" in line]
    assert Counter(str(line["sent"]) for line in sent) == {f"msg-{i}": 1 for i in range(COUNT)}
    per_partition = Counter(int(str(line["partition"])) for line in sent)
    assert set(per_partition) == set(leaders)  # round-robin reached every partition
    for node in cluster.nodes:
        mine = {p: n for p, n in per_partition.items() if leaders[p] is node}
        on_node = stored(node, PARTITIONED)
        # the node lists and stores exactly the partitions it leads: nothing on a non-leader
        assert on_node == mine, (cluster.node_id(node), on_node, mine)
    for line in sent:  # acknowledged by the placed leader
        assert line["node"] == cluster.node_id(leaders[int(str(line["partition"]))])
    refusals = partitioned.summary["refusals"]
    assert isinstance(refusals, list)
    assert refusals  # the stale map was corrected by a refusal
    assert all(r.startswith("refused: E_TOPIC_NOT_EXIST") for r in refusals), refusals


def test_partitioned_consumer_reads_each_message_once(cluster: Cluster, partitioned: Run) -> None:
    sent_to = {str(line["sent"]): line["partition"] for line in partitioned.lines if "sent" in line}
    got = run_yz(yz_sub_argv(cluster.lookupd.http_address, PARTITIONED, "yz", COUNT))
    assert got.returncode == 0, got.stderr
    assert got.summary["refusals"] == []
    bodies = Counter(str(d["body"]) for d in got.deliveries)
    assert bodies == dict.fromkeys(sent_to, 1)  # every message, exactly once
    assert got.summary["connections"] == len(cluster.leaders(PARTITIONED))  # one per partition
    leaders = cluster.leaders(PARTITIONED)
    for delivery in got.deliveries:
        # the id carries the partition (id >> 50), the one it was published to and subscribed on
        assert delivery["partition"] == delivery["conn"] == sent_to[str(delivery["body"])]
        # read from the node lookupd placed the partition's leadership on
        assert delivery["node"] == cluster.node_id(leaders[int(str(delivery["partition"]))])


def test_ordered_consumer_gets_each_partition_in_publish_order(cluster: Cluster) -> None:
    lookupd = cluster.lookupd.http_address
    create_channel(cluster, ORDERED, "yzo")
    published = run_yz(yz_pub_argv(lookupd, ORDERED, COUNT, keys=16))
    assert published.returncode == 0, published.stderr
    sent = [line for line in published.lines if "sent" in line]
    order: dict[int, list[str]] = defaultdict(list)  # partition -> bodies in publish order
    for line in sent:
        order[int(str(line["partition"]))].append(str(line["sent"]))
    keys = defaultdict(set)
    for line in sent:
        keys[line["key"]].add(line["partition"])
    assert all(len(pids) == 1 for pids in keys.values())  # a key always maps to one partition
    assert len(order) > 1  # the keys spread over several partitions

    got = run_yz(yz_sub_argv(lookupd, ORDERED, "yzo", COUNT, ordered=True))
    assert got.returncode == 0, got.stderr
    assert got.summary["refusals"] == []
    received: dict[int, list[str]] = defaultdict(list)
    for delivery in got.deliveries:
        received[int(str(delivery["partition"]))].append(str(delivery["body"]))
        assert int(str(delivery["offset"])) >= 0  # the detail block came with each message
    assert received == order
    leaders = cluster.leaders(ORDERED)
    for node in cluster.nodes:
        mine = {p: len(b) for p, b in order.items() if leaders[p] is node}
        assert {p: n for p, n in stored(node, ORDERED).items() if n} == mine


def test_stock_producer_on_each_node_and_pynsq_through_lookupd(cluster: Cluster) -> None:
    """go-nsq's stock Producer on each node (one leads yzstock's only partition, the other
    forwards), pynsq's Reader through lookupd: every message exactly once, stored once."""
    create_channel(cluster, STOCK, "stock")
    (leader,) = cluster.leaders(STOCK).values()
    gonsq = Driver("go-nsq")
    per_node = COUNT // 2
    for index, node in enumerate(cluster.nodes):
        extra = ["-prefix", f"n{index}-"]
        done = gonsq.run(gonsq.pub_argv(node.tcp_address, STOCK, per_node, extra=extra))
        assert done.returncode == 0, done.stderr
    reader = Driver("pynsq")
    argv = reader.sub_argv(
        "", STOCK, "stock", 2 * per_node, timeout=40, lookupd=cluster.lookupd.http_address
    )
    got = reader.run(argv)
    assert got.returncode == 0, got.stderr
    want = {f"n{i}-{j}": 1 for i in range(2) for j in range(per_node)}
    assert Counter(str(d["body"]) for d in got.deliveries) == want
    assert stored(leader, STOCK) == {0: 2 * per_node}
    (other,) = (n for n in cluster.nodes if n is not leader)
    assert sum(stored(other, STOCK).values()) == 0  # the forwarding node stored nothing
