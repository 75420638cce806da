"""A running ``readStream`` query rides out broker trouble: its nsqd killed with SIGKILL and back
on the same ports 2 s later, and (on a replicated cluster) the leader of a partition killed and
replaced by its replica. Every message reaches the output exactly once (an idempotent
``foreachBatch`` sink: a re-run micro-batch replaces its own rows)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from pnsq.client.blocking import Producer
from tests.daemons import Daemon, pnsq_lookupd, pnsq_nsqd
from tests.integration.lookupd_helpers import free_port, get_json, post, wait_for
from tests.spark.conftest import create_topic

pytestmark = [pytest.mark.spark, pytest.mark.integration]

Row = tuple[int, int, bytes]


class Stream:
    """A ``readStream`` of ``options`` into an idempotent ``foreachBatch`` sink."""

    def __init__(self, spark: Any, options: dict[str, str], checkpoint: Path) -> None:
        self.batches: dict[int, list[Row]] = {}

        def sink(df: Any, batch_id: int) -> None:
            self.batches[batch_id] = [(r.partition, r.offset, bytes(r.body)) for r in df.collect()]

        self.query = (
            spark.readStream.format("pnsq")
            .options(**options)
            .load()
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds")
            .start()
        )

    def rows(self) -> list[Row]:
        return [row for rows in list(self.batches.values()) for row in rows]

    def wait_rows(self, count: int, timeout: float = 90.0) -> list[Row]:
        deadline = time.monotonic() + timeout
        while len(self.rows()) < count and time.monotonic() < deadline:
            assert self.query.exception() is None, self.query.exception()
            assert self.query.isActive, "the query stopped"
            time.sleep(0.1)
        rows = self.rows()
        assert len(rows) >= count, f"{len(rows)} of {count} rows"
        return rows


def publish(
    nodes: Daemon | dict[int, Daemon], topic: str, tag: str, per_partition: int
) -> set[bytes]:
    """``per_partition`` PUBs to each partition at its leader (``nodes[p]``, or one node)."""
    bodies = set()
    for p in (0, 1):
        node = nodes if isinstance(nodes, Daemon) else nodes[p]
        with Producer(node.tcp_address, node.http_address, max_attempts=10) as producer:
            batch = [f"{tag}-p{p}-{i}".encode() for i in range(per_partition)]
            for body in batch:  # one PUB each: a stream of small appends
                producer.publish(topic, body, partition=p)
            bodies.update(batch)
    return bodies


def check_exactly_once(rows: list[Row], published: set[bytes]) -> None:
    assert len(rows) == len({(p, o) for p, o, _ in rows}), "a row was delivered twice"
    assert sorted(body for _, _, body in rows) == sorted(published)
    for p in (0, 1):  # offsets contiguous per partition
        offsets = sorted(o for q, o, _ in rows if q == p)
        assert offsets == list(range(len(offsets)))


def test_stream_rides_out_a_kill_9_and_restart_of_its_nsqd(spark: Any, tmp_path: Path) -> None:
    node = pnsq_nsqd(
        tmp_path / "nsqd",
        f"--tcp-address=127.0.0.1:{free_port()}",
        f"--http-address=127.0.0.1:{free_port()}",
    ).start()
    stream: Stream | None = None
    try:
        create_topic(node, "restarted", 2)
        published = publish(node, "restarted", "before", 30)
        options = {
            "nsqd": node.http_address,
            "topic": "restarted",
            "startingOffsets": "earliest",
            "maxOffsetsPerTrigger": "10",
            "requestTimeoutMs": "2000",
        }
        stream = Stream(spark, options, tmp_path / "ckpt")
        stream.wait_rows(10)  # mid-stream: 60 messages at 10 per micro-batch
        node.kill()
        time.sleep(2)
        node.start()  # same data path, same ports
        published |= publish(node, "restarted", "after", 20)
        rows = stream.wait_rows(len(published))
        time.sleep(1)  # nothing more comes
        check_exactly_once(stream.rows(), published)
        assert len(rows) == 100
    finally:
        if stream is not None:
            stream.query.stop()
        node.stop()


class Cluster:
    """pnsq lookupd + 2 nsqd on fixed ports, a topic of 2 partitions with 2 copies each."""

    def __init__(self, work: Path, topic: str) -> None:
        self.lookupd = pnsq_lookupd(work / "lookupd", "--heartbeat-timeout=2s").start()
        flag = f"--lookupd-tcp-address={self.lookupd.tcp_address}"
        self.nodes = [
            pnsq_nsqd(work / name, flag, f"--tcp-address=127.0.0.1:{free_port()}").start()
            for name in ("a", "b")
        ]
        wait_for(lambda: len(get_json(self.lookupd, "/nodes")["producers"]) == 2, what="nodes")
        query = f"/topic/create?topic={topic}&partition_num=2&replicator=2"
        assert post(self.lookupd, query)[0] == 200
        self.topic = topic
        wait_for(lambda: self.leaders(self.nodes[0], isr=2), what="2 in-sync copies")

    def leaders(self, via: Daemon, isr: int = 1) -> dict[int, Daemon] | None:
        """Each partition's leader, as lookupd's placement (asked for ``via``) says, once
        every partition has at least ``isr`` in-sync copies; else None."""
        doc = get_json(self.lookupd, f"/pnsq/assignments?node=127.0.0.1:{via.tcp_port}")
        parts = doc.get("topics", {}).get(self.topic, {}).get("partitions", {})
        by_id = {f"127.0.0.1:{n.tcp_port}": n for n in self.nodes}
        if len(parts) != 2 or any(len(p["isr"]) < isr for p in parts.values()):
            return None
        return {int(p): by_id[placed["leader"]] for p, placed in parts.items()}

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        self.lookupd.stop()


def test_stream_survives_a_leader_failover(spark: Any, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, "replicated")
    stream: Stream | None = None
    try:
        leaders = cluster.leaders(cluster.nodes[0])
        assert leaders is not None
        published = publish(leaders, "replicated", "before", 30)
        options = {
            "lookupd": cluster.lookupd.http_address,
            "topic": "replicated",
            "startingOffsets": "earliest",
            "maxOffsetsPerTrigger": "10",
            "requestTimeoutMs": "2000",
        }
        stream = Stream(spark, options, tmp_path / "ckpt")
        stream.wait_rows(10)
        victim = leaders[0]
        victim.kill()
        survivor = next(n for n in cluster.nodes if n is not victim)

        def failed_over() -> bool:
            found = cluster.leaders(survivor)
            return found is not None and all(n is survivor for n in found.values())

        wait_for(failed_over, timeout=30, what="failover to the survivor")
        published |= publish(survivor, "replicated", "after", 20)
        stream.wait_rows(len(published))
        time.sleep(1)
        check_exactly_once(stream.rows(), published)
    finally:
        if stream is not None:
            stream.query.stop()
        cluster.stop()
