"""A 3-node cluster (pnsq lookupd + 3 pnsq nsqd): with 3 partitions and 2 replicas each node
leads one partition, replicates one and does not hold the third, and each is served, refused
or forwarded accordingly; stock producers on every node and a stock reader through lookupd get
every message exactly once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from protocol import Pub, Sub
from tests.daemons import Daemon
from tests.integration.lookupd_helpers import (
    lookup,
    pnsq_cluster,
    post,
    roles,
    stored,
    wait_for,
)
from tests.interop.drivers import Driver
from tests.rawclient import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.interop]


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, list[Daemon]]]:
    with pnsq_cluster(tmp_path_factory.mktemp("three"), 3) as started:
        yield started


def _roles(node: Daemon, topic: str) -> dict[int, str]:
    return roles(node, topic) or {}


def test_each_node_leads_one_replicates_one_and_lacks_one(
    nodes: tuple[Daemon, list[Daemon]],
) -> None:
    lookupd, cluster = nodes
    query = "/topic/create?topic=tri&partition_num=3&replicator=2"
    assert post(lookupd, query) == (200, b"")
    wait_for(lambda: all(len(_roles(n, "tri")) == 2 for n in cluster), what="placement")
    for node in cluster:
        roles = _roles(node, "tri")
        assert sorted(roles.values()) == ["leader", "replica"]
        (led,) = [p for p, role in roles.items() if role == "leader"]
        (replica,) = [p for p, role in roles.items() if role == "replica"]
        (absent,) = {0, 1, 2} - set(roles)
        client = RawClient(node.tcp_address)
        client.send(Pub("tri", b"here", led))
        assert client.read().data == b"OK"
        client.send(Pub("tri", b"not leader", replica))
        assert client.read().data == b"E_FAILED_ON_NOT_LEADER "  # non-fatal: still open
        client.send(Pub("tri", b"not here", absent))
        assert client.read().data == b"E_TOPIC_NOT_EXIST "
        assert client.closed_by_server()
        consumer = RawClient(node.tcp_address)
        consumer.send(Sub("tri", "c", replica))
        assert consumer.read().data == b"E_FAILED_ON_NOT_LEADER "
        assert consumer.closed_by_server()
    assert sorted(stored(n, "tri") for n in cluster) == [1, 1, 1]  # each on its leader only


def test_stock_producers_on_three_nodes_and_a_reader_through_lookupd(
    nodes: tuple[Daemon, list[Daemon]],
) -> None:
    lookupd, cluster = nodes
    assert post(lookupd, "/topic/create?topic=single&partition_num=1") == (200, b"")
    wait_for(
        lambda: (lookup(lookupd, "single") or {}).get("partitions", {}).get("0"),
        what="placement registered",
    )
    (leader,) = [n for n in cluster if _roles(n, "single") == {0: "leader"}]
    assert post(leader, "/channel/create?topic=single&channel=r")[0] == 200
    count = 30
    expected = []
    go = Driver("go-nsq")
    try:
        for node in cluster:  # two of the three lead nothing of the topic: forwarded
            prefix = f"n{node.tcp_port}-"
            run = go.run(go.pub_argv(node.tcp_address, "single", count, extra=["-prefix", prefix]))
            assert run.returncode == 0, run.stderr[-2000:]
            expected += [f"{prefix}{i}" for i in range(count)]
    finally:
        go.cleanup()
    reader = Driver("pynsq")
    try:
        argv = reader.sub_argv(
            "", "single", "r", 3 * count, timeout=40, lookupd=lookupd.http_address
        )
        run = reader.run(argv)
    finally:
        reader.cleanup()
    assert run.returncode == 0, run.stderr[-3000:]
    assert sorted(str(d["body"]) for d in run.deliveries) == sorted(expected)
    assert stored(leader, "single") == 3 * count
    assert all(_roles(n, "single") == {} for n in cluster if n is not leader)
