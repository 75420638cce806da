"""Clients across a failover or a lookupd outage, on pnsq lookupd and two nsqd on fixed ports
(the cluster of test_failover.py): a forwarding link to a leader that restarted, a replica that
forwards stock publishes while lookupd is down, an #ephemeral channel that goes on where it
was on the new leader."""

from __future__ import annotations

import os
import signal
import time

import pytest
import trio

from pnsq.client import open_consumer
from pnsq.client.blocking import Producer
from protocol import Fin, Pub, Rdy, Sub
from tests.integration.lookupd_helpers import get_json, lookup, post, request, wait_for
from tests.integration.test_failover import (
    Cluster,
    cluster as cluster,
    create,
    publish,
    try_publish,
)
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration


def test_a_forwarding_link_the_leader_closed_is_opened_again(cluster: Cluster) -> None:
    """The link a node keeps to a leader it forwards stock publishes to is dead once that
    leader restarted: the next forwarded publish goes again on a new link and is acknowledged,
    instead of a fatal E_PUB_FAILED for the stock client."""
    assert post(cluster.lookupd, "/topic/create?topic=relink&partition_num=1")[0] == 200
    placed = wait_for(lambda: lookup(cluster.lookupd, "relink")["partitions"].get("0"))
    leader = next(n for n in cluster.nodes if n.tcp_port == placed["tcp_port"])
    outsider = next(n for n in cluster.nodes if n is not leader)
    client = RawClient(outsider.tcp_address)
    client.send(Pub("relink", b"before"))
    assert client.read().data == b"OK"  # forwarded: the link is kept
    leader.stop()  # (its only copy: it leads it again once back)
    leader.start()
    wait_for(
        lambda: (
            (lookup(cluster.lookupd, "relink")["partitions"].get("0") or {}).get("tcp_port")
            == leader.tcp_port
        ),
        timeout=30,
        what="relink led again",
    )
    client.send(Pub("relink", b"after"))
    assert client.read().data == b"OK"
    client.close()


def test_a_replica_forwards_stock_publishes_to_its_leader_while_lookupd_is_down(
    cluster: Cluster,
) -> None:
    """A node that holds a topic only as a replica knows its leader from lookupd's placement:
    with lookupd down, a stock publish there is forwarded to that leader, as with lookupd up
    (it was refused: "lookupd unreachable")."""
    assert post(cluster.lookupd, "/topic/create?topic=held&partition_num=1&replicator=2")[0] == 200
    wait_for(lambda: len(cluster.placement("held")["isr"]) == 2, what="both in sync")
    leader = cluster.by_id(cluster.placement("held")["leader"])
    replica = next(n for n in cluster.nodes if n is not leader)
    cluster.lookupd.stop()
    client = RawClient(replica.tcp_address)
    client.send(Pub("held", b"tcp"))
    assert client.read().data == b"OK"
    client.close()
    status, body, _ = request(f"http://{replica.http_address}/pub?topic=held", "POST", {}, b"h")
    assert (status, body) == (200, b"OK")
    consumer = RawClient(leader.tcp_address, timeout=5)
    consumer.send(Sub("held", "c", 0), Rdy(10))
    assert consumer.read().data == b"OK"
    got = {consumer.read(skip_heartbeats=True).body for _ in range(2)}
    assert got == {b"tcp", b"h"}  # stored on the leader


def test_an_ephemeral_channel_goes_on_where_it_was_after_a_failover(cluster: Cluster) -> None:
    """The replica keeps where each #ephemeral channel of its leader is (a mark, not a
    channel): the consumer back on the new leader (nsq_tail's reconnect) goes on from there,
    not from the partition's first message."""
    leader, survivor, _ = create(cluster, "tail")
    publish(leader, "tail", [b"old %d" % i for i in range(20)])
    name = "tail123#ephemeral"
    consumer = RawClient(leader.tcp_address, timeout=5)
    consumer.send(Sub("tail", name, 0), Rdy(100))
    assert consumer.read().data == b"OK"
    for _ in range(20):
        consumer.send(Fin(consumer.read(skip_heartbeats=True).message_id))
    time.sleep(1.0)  # the channel's state reaches the replica (every 0.2 s)
    leader.kill()
    wait_for(lambda: try_publish(survivor, "tail", b"new"), timeout=20, what="writable")
    again = RawClient(survivor.tcp_address, timeout=2)
    again.send(Sub("tail", name, 0), Rdy(100))
    assert again.read().data == b"OK"
    got = again.bodies_until_quiet()
    assert got == [b"new"]  # not the 20 it had finished
    # (a channel made for the first time still gets the partition's kept messages, as in nsqd)


def test_a_consumer_through_lookupd_leaves_a_leader_that_hangs(cluster: Cluster) -> None:
    """A leader stopped (SIGSTOP) closes no connection and sends nothing: pnsq's consumer
    waited for it until it came back (100 s in an audit) while lookupd had promoted the
    replica in ~2 s and publishes went there. It now follows lookupd's new leader within
    seconds, and gets what was published there."""
    leader, replica, placed = create(cluster, "hung")
    publish(leader, "hung", [b"before"])
    assert leader.proc is not None
    pid = leader.proc.pid

    async def consume() -> float:
        async with open_consumer(
            leader.tcp_address, "hung", "c", lookupd_http_address=cluster.lookupd.http_address
        ) as consumer:
            first = await consumer.receive()
            assert first.body == b"before"
            await first.finish()
            await trio.sleep(0.5)  # the FIN reaches the leader, its state the replica
            os.kill(pid, signal.SIGSTOP)
            stopped = trio.current_time()
            try:

                def moved() -> bool:
                    return cluster.placement("hung")["leader"] != placed["leader"] and (
                        try_publish(replica, "hung", b"after")
                    )

                await trio.to_thread.run_sync(lambda: wait_for(moved, what="a new leader"))
                with trio.fail_after(15):  # (the stop lasts until then: the old code waited)
                    message = await consumer.receive()
                assert message.body == b"after"
                await message.finish()
                return trio.current_time() - stopped
            finally:
                os.kill(pid, signal.SIGCONT)

    took = trio.run(consume)
    print(f"the consumer had the new leader's message {took:.2f} s after the stop")


def test_the_blocking_producer_through_lookupd_reaches_every_leader_across_a_failover(
    cluster: Cluster,
) -> None:
    """A node's own /partitions lists only the partitions it leads: the blocking producer,
    given one node, sent the others to that node and was refused E_FAILED_ON_NOT_LEADER until
    its attempts ran out. With lookupd it publishes each partition at its leader, and after a
    leader's kill -9 at the one lookupd promotes."""
    query = "/topic/create?topic=blocked&partition_num=2&replicator=2"
    assert post(cluster.lookupd, query) == (200, b"")
    node = f"127.0.0.1:{cluster.nodes[0].tcp_port}"

    def in_sync() -> bool:
        doc = get_json(cluster.lookupd, f"/pnsq/assignments?node={node}")
        parts = doc["topics"]["blocked"]["partitions"].values()
        led = lookup(cluster.lookupd, "blocked")["partitions"]
        return len(led) == 2 and all(len(p["isr"]) == 2 for p in parts)

    wait_for(in_sync, what="both partitions in sync, each led")
    a, b = cluster.nodes
    sent: list[bytes] = []
    with Producer(
        a.tcp_address, lookupd_http_address=cluster.lookupd.http_address, max_attempts=20
    ) as producer:
        for n in range(10):
            body = b"m%d" % n
            producer.publish("blocked", body, partition=n % 2)
            sent.append(body)
        port0 = lookup(cluster.lookupd, "blocked")["partitions"]["0"]["tcp_port"]
        leader0 = next(n for n in cluster.nodes if n.tcp_port == port0)
        leader0.kill()  # (the fixture stops it)
        for n in range(10, 20):  # waits out the failover: ~2 s of retries
            body = b"m%d" % n
            producer.publish("blocked", body, partition=n % 2)
            sent.append(body)
    survivor = b if leader0 is a else a  # leads both now
    with Producer(http_address=survivor.http_address) as reader:
        stored = [r.body for p in (0, 1) for r in reader.read_range("blocked", p, 0, 100).records]
    assert sorted(stored) == sorted(sent)  # each once
