"""Idempotent publishing through failures, with real processes: lookupd and three nsqd on racks,
a topic of three partitions with two copies, pnsq's client (idempotent by default) publishing
from eight tasks at once, each one message after another over every partition, retrying each
until it is acknowledged. The leader of a partition is killed with kill -9 in the middle, then
started again (or paused with SIGSTOP past the failover, then woken up); lookupd is killed and
restarted too. Afterwards every partition's log is read whole
(``/partition/read`` on its leader): every acknowledged message is there exactly once — the
retries of publishes whose replies were lost with the leader were answered, not stored again.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
import trio

from pnsq.client import open_producer
from tests.integration.cluster_load import RackedCluster
from tests.integration.lookupd_helpers import get_json, post, wait_for

pytestmark = pytest.mark.integration

TOPIC = "once"
PARTITIONS = 3
TASKS = 8  # publishing at once through one producer (its numbers interleave per partition)


def leaders(cluster: RackedCluster) -> dict[int, str]:
    """Partition -> the node id leading it, as lookupd saved it."""
    found: dict[int, str] = {}
    for node in cluster.nodes:
        node_id = cluster.node_id(node)
        topics = get_json(cluster.lookupd, f"/pnsq/assignments?node={node_id}")["topics"]
        for number, part in topics.get(TOPIC, {}).get("partitions", {}).items():
            found[int(number)] = part["leader"]
    return found


def stored(cluster: RackedCluster) -> Counter[bytes]:
    """Every message body in every partition's log, counted."""
    bodies: Counter[bytes] = Counter()
    by_id = {cluster.node_id(n): n for n in cluster.nodes}
    for number, leader in leaders(cluster).items():
        node = by_id[leader]
        offset = 0
        while True:
            url = (
                f"http://{node.http_address}/partition/read?topic={TOPIC}&partition={number}"
                f"&offset={offset}&max=1000&format=ndjson"
            )
            with urllib.request.urlopen(url, timeout=10) as reply:
                lines = reply.read().splitlines()
            if not lines:
                break
            for line in lines:
                record = json.loads(line)
                bodies[base64.b64decode(record["body"])] += 1
            offset = json.loads(lines[-1])["offset"] + 1
    return bodies


@pytest.mark.parametrize(
    "fault", ["kill_9", pytest.param("sigstop", marks=[pytest.mark.slow, pytest.mark.fault])]
)
def test_retries_across_a_leader_kill_and_a_lookupd_restart_store_each_message_once(
    tmp_path: Path, fault: str
) -> None:
    cluster = RackedCluster(tmp_path)
    try:
        wait_for(lambda: len(get_json(cluster.lookupd, "/nodes")["producers"]) == 3, what="nodes")
        query = f"/topic/create?topic={TOPIC}&partition_num={PARTITIONS}&replicator=2"
        assert post(cluster.lookupd, query)[0] == 200
        wait_for(lambda: len(leaders(cluster)) == PARTITIONS, what="placed")
        acked: list[bytes] = []
        stats: dict[str, int] = {}

        async def publish(stop: trio.Event) -> None:
            async with open_producer(
                cluster.nodes[0].tcp_address,
                lookupd_http_address=cluster.lookupd.http_address,
                max_attempts=200,
                retry_backoff=0.02,
                route_ttl=0.2,
                reply_timeout=3.0,
            ) as producer:

                async def one_after_another(task: int) -> None:
                    number = 0
                    while not stop.is_set():
                        body = b"t%d-m%06d" % (task, number)
                        await producer.publish(TOPIC, body, partition=number % PARTITIONS)
                        acked.append(body)
                        number += 1

                async with trio.open_nursery() as nursery:  # several in flight at a kill
                    for task in range(TASKS):
                        nursery.start_soon(one_after_another, task)
                stats.update(producer.stats)

        def faults() -> None:
            time.sleep(1.0)
            victim_id = leaders(cluster)[0]
            victim = next(n for n in cluster.nodes if cluster.node_id(n) == victim_id)
            if fault == "kill_9":
                victim.kill()  # kill -9 of partition 0's leader, replies in flight lost
                time.sleep(3.0)
                victim.start()
            else:  # paused: replies time out, lookupd fails it over, then it wakes up deposed
                assert victim.proc is not None
                os.kill(victim.proc.pid, signal.SIGSTOP)
                time.sleep(5.0)
                os.kill(victim.proc.pid, signal.SIGCONT)
            time.sleep(2.0)
            cluster.lookupd.kill()
            time.sleep(0.5)
            cluster.lookupd.start()
            time.sleep(2.0)

        async def run() -> None:
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(publish, stop)
                await trio.to_thread.run_sync(faults)
                stop.set()

        trio.run(run)
        counts = stored(cluster)
        lost = [b for b in acked if counts[b] == 0]
        twice = {b: n for b, n in counts.items() if n > 1}
        print(
            f"idempotent publishing through a {fault} and a lookupd restart: {len(acked)} "
            f"acknowledged, {stats['retries']} tries after a failure, {stats['duplicates']} "
            f"told duplicates, {len(twice)} stored twice, {len(lost)} lost"
        )
        assert acked
        assert not lost
        assert not twice
        assert stats["retries"] > 0  # the faults did reach the producer
    finally:
        cluster.stop()


def test_an_http_idempotency_key_is_stored_once_whichever_node_is_asked(tmp_path: Path) -> None:
    """The same keyed ``/pub`` to each of the three nodes (two of which do not lead the key's
    partition, and send it on to the leader): stored once; another key once too."""
    cluster = RackedCluster(tmp_path)
    try:
        wait_for(lambda: len(get_json(cluster.lookupd, "/nodes")["producers"]) == 3, what="nodes")
        query = f"/topic/create?topic={TOPIC}&partition_num={PARTITIONS}&replicator=2"
        assert post(cluster.lookupd, query)[0] == 200
        wait_for(lambda: len(leaders(cluster)) == PARTITIONS, what="placed")
        for key, body in (("pay-17", b"paid 17"), ("pay-18", b"paid 18")):
            for node in cluster.nodes:
                request = urllib.request.Request(
                    f"http://{node.http_address}/pub?topic={TOPIC}",
                    data=body,
                    headers={"Idempotency-Key": key},
                    method="POST",
                )
                with urllib.request.urlopen(request, timeout=10) as answer:
                    assert answer.read() == b"OK"
        assert stored(cluster) == Counter({b"paid 17": 1, b"paid 18": 1})
    finally:
        cluster.stop()
