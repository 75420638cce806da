"""HTTP consume in a cluster: a node that leads none of the topic's partitions names the leaders,
and acknowledged batches stay acknowledged across a failover (kill -9 of the leader)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.daemons import Daemon
from tests.integration.lookupd_helpers import lookup, post, wait_for
from tests.integration.test_failover import (
    Cluster,
    cluster as cluster,
    create,
    publish,
    try_publish,
)
from tests.integration.test_http_consume import _post

pytestmark = pytest.mark.integration


def test_a_node_leading_none_of_the_partitions_names_the_leaders(cluster: Cluster) -> None:
    assert post(cluster.lookupd, "/topic/create?topic=one&partition_num=1&replicator=1") == (
        200,
        b"",
    )

    def leader_of_0() -> dict[str, Any] | None:
        found = lookup(cluster.lookupd, "one", "&metainfo=true") or {}
        return (found.get("partitions") or {}).get("0")

    placed = wait_for(leader_of_0, what="placed")
    leader = cluster.by_id(f"{placed['broadcast_address']}:{placed['tcp_port']}")
    other = next(n for n in cluster.nodes if n is not leader)
    wait_for(lambda: try_publish(leader, "one", b"x"), what="the leader writable")
    status, reply = _post(other, "/consume", topic="one", channel="c")
    assert (status, reply) == (
        400,
        {"message": "E_FAILED_ON_NOT_LEADER", "leaders": {"0": leader.http_address}},
    )
    status, reply = _post(leader, "/consume", topic="one", channel="c", max=5)
    assert status == 200
    assert reply["partition"] == 0
    assert len(reply["messages"]) == 1


def _consume_all(node: Daemon, topic: str) -> list[str]:
    """Consume and ack channel ``c`` of ``topic`` on ``node`` until it gives nothing more; the
    ids given."""
    seen: list[str] = []
    while True:
        status, batch = _post(node, "/consume", topic=topic, channel="c", max=50)
        assert status == 200, batch
        if batch["token"] is None:
            return seen
        seen.extend(m["id"] for m in batch["messages"])
        assert _post(node, "/consume/ack", token=batch["token"]) == (200, b"OK")


def test_acked_batches_are_not_delivered_again_after_a_failover(cluster: Cluster) -> None:
    leader, replica, _ = create(cluster, "hcfo")
    publish(leader, "hcfo", [b"m%03d" % i for i in range(100)])
    acked: list[str] = []
    for _ in range(3):
        status, batch = _post(leader, "/consume", topic="hcfo", channel="c", max=20)
        assert status == 200
        assert _post(leader, "/consume/ack", token=batch["token"]) == (200, b"OK")
        acked.extend(m["id"] for m in batch["messages"])
    leader.kill()  # at once: the acks' 200 promised the followers hold the offsets
    killed = time.monotonic()
    wait_for(lambda: try_publish(replica, "hcfo", b"after"), timeout=20, what="failover")
    print(f"writable again {time.monotonic() - killed:.2f} s after kill -9")
    seen = _consume_all(replica, "hcfo")
    assert len(acked) == 60
    assert not set(acked) & set(seen)
    assert len(seen) == 41  # the 40 left and the one published after the failover


def test_a_batch_acked_while_an_earlier_one_waits_is_not_delivered_again(
    cluster: Cluster,
) -> None:
    """The ack of a batch above the confirmed offset (an earlier batch nacked with a delay,
    waiting) returns only once the followers hold its FINs: kill -9 of the leader right after
    it never brings the acknowledged batches back."""
    leader, replica, _ = create(cluster, "hcooo")
    publish(leader, "hcooo", [b"m%03d" % i for i in range(60)])
    status, held = _post(leader, "/consume", topic="hcooo", channel="c", max=20)
    assert status == 200
    nacked = _post(leader, "/consume/nack", token=held["token"], delay_ms=60_000)
    assert nacked == (200, b"OK")
    acked: list[str] = []
    for _ in range(2):
        status, batch = _post(leader, "/consume", topic="hcooo", channel="c", max=20)
        assert status == 200
        assert batch["messages"][0]["offset"] >= 20  # past the waiting batch
        assert _post(leader, "/consume/ack", token=batch["token"]) == (200, b"OK")
        acked.extend(m["id"] for m in batch["messages"])
    leader.kill()  # the waiting batch keeps the confirmed offset below the acked ones
    wait_for(lambda: try_publish(replica, "hcooo", b"after"), timeout=20, what="failover")
    seen = _consume_all(replica, "hcooo")
    assert len(acked) == 40
    assert not set(acked) & set(seen)
    assert len(seen) == 1  # the one published after the failover (the nacked batch waits)


def test_a_batch_acked_while_an_earlier_one_is_out_is_not_delivered_again(
    cluster: Cluster,
) -> None:
    """A replicated partition gives several batches at once; the ack of a later one returns
    only once the followers hold its FINs: kill -9 of the leader right after it brings back
    the batch still out, never the acknowledged one."""
    leader, replica, _ = create(cluster, "hcout")
    publish(leader, "hcout", [b"m%03d" % i for i in range(60)])
    status, held = _post(leader, "/consume", topic="hcout", channel="c", max=20)
    assert status == 200
    status, batch = _post(leader, "/consume", topic="hcout", channel="c", max=20)
    assert status == 200
    assert [m["offset"] for m in batch["messages"]] == list(range(20, 40))
    assert _post(leader, "/consume/ack", token=batch["token"]) == (200, b"OK")
    leader.kill()  # the held batch is out: the confirmed offset is still below the acked one
    wait_for(lambda: try_publish(replica, "hcout", b"after"), timeout=20, what="failover")
    seen = _consume_all(replica, "hcout")
    assert not {m["id"] for m in batch["messages"]} & set(seen)
    assert set(seen) >= {m["id"] for m in held["messages"]}  # never acknowledged: again
    assert len(seen) == 41  # the held 20, the 20 never taken, the one after the failover
