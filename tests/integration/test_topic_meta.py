"""lookupd's topic meta applied on the nsqds of a 2-node cluster, without a restart:
``disable_channel_auto_create`` (youzan's ``E_SUB_CHANNEL_NOT_REGISTERED``), ``orderedmulti``
(``E_SUB_ORDER_IS_MUST``), ``/topic/meta/update`` and ``/topic/partition/expand``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from protocol import Pub, Sub
from tests.daemons import Daemon
from tests.integration.lookupd_helpers import pnsq_cluster, post, request, wait_for
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration

NOT_REGISTERED = b"E_SUB_CHANNEL_NOT_REGISTERED channel is not registered under topic."


@dataclass
class Cluster:
    lookupd: Daemon
    nodes: list[Daemon]

    def leader(self, topic: str, partition: int) -> Daemon:
        for node in self.nodes:
            doc = _partitions(node, topic)
            if doc and partition in [p["partition"] for p in doc["partitions"]]:
                return node
        raise AssertionError(f"no node leads {topic}/{partition}")


def _partitions(node: Daemon, topic: str) -> dict[str, Any] | None:
    status, body, _ = request(f"http://{node.http_address}/partitions?topic={topic}", "GET", {})
    return json.loads(body) if status == 200 else None


def _led(cluster: Cluster, topic: str) -> list[int]:
    out = []
    for node in cluster.nodes:
        doc = _partitions(node, topic) or {"partitions": []}
        out += [p["partition"] for p in doc["partitions"]]
    return sorted(out)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with pnsq_cluster(tmp_path_factory.mktemp("meta"), 2) as (lookupd, nodes):
        yield Cluster(lookupd, nodes)


def _sub(node: Daemon, command: Sub) -> bytes:
    client = RawClient(node.tcp_address)
    client.send(command)
    reply = client.read().data
    client.close()
    return reply


def test_channels_must_be_registered_until_the_meta_says_otherwise(cluster: Cluster) -> None:
    query = "/topic/create?topic=closed&partition_num=1&disable_channel_auto_create=true"
    assert post(cluster.lookupd, query) == (200, b"")
    wait_for(lambda: _led(cluster, "closed") == [0], what="placement")
    node = cluster.leader("closed", 0)
    assert _sub(node, Sub("closed", "adhoc")) == NOT_REGISTERED
    assert post(node, "/channel/create?topic=closed&channel=known")[0] == 200
    assert _sub(node, Sub("closed", "known")) == b"OK"
    update = "/topic/meta/update?topic=closed&disable_channel_auto_create=false"
    assert post(cluster.lookupd, update) == (200, b"")
    wait_for(lambda: _sub(node, Sub("closed", "adhoc")) == b"OK", what="meta applied")


def test_an_ordered_topic_refuses_plain_sub(cluster: Cluster) -> None:
    query = "/topic/create?topic=inorder&partition_num=2&orderedmulti=true"
    assert post(cluster.lookupd, query) == (200, b"")
    wait_for(lambda: _led(cluster, "inorder") == [0, 1], what="placement")
    node = cluster.leader("inorder", 0)
    reply = _sub(node, Sub("inorder", "c", 0))
    assert reply.startswith(b"E_SUB_ORDER_IS_MUST ")


def test_expanding_a_topic_places_the_new_partitions(cluster: Cluster) -> None:
    assert post(cluster.lookupd, "/topic/create?topic=grows&partition_num=2") == (200, b"")
    wait_for(lambda: _led(cluster, "grows") == [0, 1], what="placement")
    expand = "/topic/partition/expand?topic=grows&partition_num=4"
    assert post(cluster.lookupd, expand) == (200, b"")
    wait_for(lambda: _led(cluster, "grows") == [0, 1, 2, 3], what="expansion applied")
    for node in cluster.nodes:
        assert (_partitions(node, "grows") or {})["partition_num"] == 4
    leader = cluster.leader("grows", 3)
    client = RawClient(leader.tcp_address)
    client.send(Pub("grows", b"x", 3))
    assert client.read().data == b"OK"
    client.close()
    shrink = "/topic/partition/expand?topic=grows&partition_num=3"
    status, body = post(cluster.lookupd, shrink)
    assert status == 400
    assert b"PARTITION_NUM_DECREASE_NOT_ALLOWED" in body


def test_retention_and_sync_meta_reach_the_nodes(cluster: Cluster) -> None:
    assert post(cluster.lookupd, "/topic/create?topic=kept&partition_num=1") == (200, b"")
    wait_for(lambda: _led(cluster, "kept") == [0], what="placement")
    node = cluster.leader("kept", 0)
    update = "/topic/meta/update?topic=kept&retention=3&syncdisk=100"
    assert post(cluster.lookupd, update) == (200, b"")
    wait_for(
        lambda: "retention_days=3, sync_every=100" in node.log_text(),
        what="meta applied on the leader",
    )
    missing = post(cluster.lookupd, "/topic/meta/update?topic=nope&retention=3")
    assert missing[0] == 404
