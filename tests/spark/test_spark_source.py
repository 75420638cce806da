"""``format("pnsq")`` in a real local Spark against a real pnsq nsqd: batch and streaming reads,
restart from a checkpoint, batch and streaming writes."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pnsq.client.blocking import BlockingClient
from pnsq.client.routing import partition_for_key
from protocol.message import MESSAGE_ID
from tests.daemons import Daemon
from tests.spark.conftest import create_topic

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def opts(nsqd: Daemon, topic: str, **extra: object) -> dict[str, str]:
    return {"nsqd": nsqd.http_address, "topic": topic, **{k: str(v) for k, v in extra.items()}}


def stream_rows(
    spark: Any, options: dict[str, str], checkpoint: Path, *, timeout: float = 60
) -> tuple[dict[int, list[tuple[int, int, bytes]]], list[int]]:
    """Run an availableNow query into an idempotent foreachBatch sink (rows by batch id).

    Returns the rows per batch id and the input row count of each batch that ran."""
    got: dict[int, list[tuple[int, int, bytes]]] = {}

    def sink(df: Any, batch_id: int) -> None:
        got[batch_id] = [(r.partition, r.offset, bytes(r.body)) for r in df.collect()]

    query = (
        spark.readStream.format("pnsq")
        .options(**options)
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(timeout), "availableNow query did not finish"
    assert query.exception() is None, query.exception()
    return got, [p["numInputRows"] for p in query.recentProgress]


def test_batch_read_returns_exactly_the_published_rows(spark: Any, shared_nsqd: Daemon) -> None:
    create_topic(shared_nsqd, "batch_read", 3)
    keys = [f"user-{i % 5}" for i in range(60)]
    bodies = [f"event-{i}".encode() for i in range(60)]
    expected: dict[tuple[int, int], bytes] = {}
    next_offset = Counter[int]()
    with BlockingClient(shared_nsqd.tcp_address, shared_nsqd.http_address) as nsq:
        nsq.mpublish("batch_read", bodies, keys=keys)
        traced_id, traced_offset = nsq.publish_traced(
            "batch_read", b"traced", 0xABCDEF, partition=1
        )
    for key, body in zip(keys, bodies, strict=True):
        p = partition_for_key(key, 3)
        expected[(p, next_offset[p])] = body
        next_offset[p] += 1
    expected[(1, traced_offset)] = b"traced"
    before = time.time()

    df = spark.read.format("pnsq").options(**opts(shared_nsqd, "batch_read")).load()
    rows = df.collect()
    assert {(r.partition, r.offset): bytes(r.body) for r in rows} == expected
    assert len(rows) == len(expected)
    assert all(r.topic == "batch_read" and len(r.id) == 16 and r.ext is None for r in rows)
    traced = next(r for r in rows if bytes(r.body) == b"traced")
    assert (bytes(traced.id), traced.trace_id) == (traced_id, 0xABCDEF)
    internal, trace = MESSAGE_ID.unpack(bytes(traced.id))
    assert internal == (1 << 50) + traced_offset + 1
    assert trace == 0xABCDEF
    stamps = [r.timestamp.timestamp() for r in rows]
    assert all(before - 120 < s <= before + 1 for s in stamps)

    # an offset range, split into at least 4 Spark partitions
    ranged = (
        spark.read.format("pnsq")
        .options(**opts(shared_nsqd, "batch_read", minPartitions=4))
        .option("startingOffsets", json.dumps({"0": 2, "2": 1}))
        .option("endingOffsets", json.dumps({"0": -1, "1": 3, "2": 4}))
        .load()
    )
    got = sorted((r.partition, r.offset) for r in ranged.select("partition", "offset").collect())
    want = [(0, o) for o in range(2, next_offset[0])]
    want += [(1, o) for o in range(3)] + [(2, o) for o in range(1, 4)]
    assert got == want
    assert ranged.rdd.getNumPartitions() >= 4


def test_starting_timestamp(spark: Any, shared_nsqd: Daemon) -> None:
    create_topic(shared_nsqd, "by_time", 2)
    with BlockingClient(shared_nsqd.tcp_address, shared_nsqd.http_address) as nsq:
        nsq.mpublish("by_time", [b"old-0", b"old-1"], partition=0)
        nsq.mpublish("by_time", [b"old-2"], partition=1)
        time.sleep(0.05)
        cut = int(time.time() * 1000)
        time.sleep(0.05)
        nsq.mpublish("by_time", [b"new-0"], partition=0)
        nsq.mpublish("by_time", [b"new-1", b"new-2"], partition=1)
    options = opts(shared_nsqd, "by_time", startingTimestamp=cut)
    rows = spark.read.format("pnsq").options(**options).load().collect()
    assert sorted(bytes(r.body) for r in rows) == [b"new-0", b"new-1", b"new-2"]
    future = opts(shared_nsqd, "by_time", startingTimestamp=int(time.time() * 1000) + 60_000)
    assert spark.read.format("pnsq").options(**future).load().count() == 0  # no Spark tasks


def test_available_now_with_max_offsets_runs_several_batches(
    spark: Any, shared_nsqd: Daemon, tmp_path: Path
) -> None:
    create_topic(shared_nsqd, "rate_limited", 3)
    with BlockingClient(shared_nsqd.tcp_address, shared_nsqd.http_address) as nsq:
        for p, n in enumerate((12, 6, 3)):
            nsq.mpublish("rate_limited", [f"p{p}-{i}".encode() for i in range(n)], partition=p)
    options = opts(shared_nsqd, "rate_limited", startingOffsets="earliest", maxOffsetsPerTrigger=8)
    got, sizes = stream_rows(spark, options, tmp_path / "ckpt")
    assert [n for n in sizes if n] == [8, 8, 5]
    rows = [row for batch in got.values() for row in batch]
    assert sorted((p, o) for p, o, _ in rows) == sorted(
        [(0, o) for o in range(12)] + [(1, o) for o in range(6)] + [(2, o) for o in range(3)]
    )


def test_restart_from_checkpoint_gives_each_message_exactly_once(
    spark: Any, shared_nsqd: Daemon, tmp_path: Path
) -> None:
    create_topic(shared_nsqd, "restart", 3)
    published: list[tuple[int, int]] = []

    def publish(count: int, tag: str) -> None:
        with BlockingClient(shared_nsqd.tcp_address, shared_nsqd.http_address) as nsq:
            for p in range(3):
                first = nsq.partitions("restart").partitions[p].latest
                nsq.mpublish("restart", [f"{tag}{i}".encode() for i in range(count)], partition=p)
                published.extend((p, first + i) for i in range(count))

    publish(15, "a")
    options = opts(shared_nsqd, "restart", startingOffsets="earliest", maxOffsetsPerTrigger=5)
    checkpoint = tmp_path / "ckpt"
    got: dict[int, list[tuple[int, int]]] = {}

    def sink(df: Any, batch_id: int) -> None:  # idempotent: a replayed batch replaces itself
        got[batch_id] = [(r.partition, r.offset) for r in df.collect()]

    query = (
        spark.readStream.format("pnsq")
        .options(**options)
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 60
        while len(got) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        query.stop()  # mid-stream: 45 messages at 5 per batch
    first_run = dict(got)
    assert len(first_run) >= 2
    assert sum(map(len, first_run.values())) < 45

    publish(7, "b")  # while the query is down
    second, _ = stream_rows(spark, options, checkpoint)
    assert min(second) >= max(first_run)  # batch ids go on from the checkpoint
    got.update({b: [(p, o) for p, o, _ in rows] for b, rows in second.items()})
    rows = [row for batch in got.values() for row in batch]
    assert len(rows) == len(set(rows)) == len(published)
    assert sorted(rows) == sorted(published)


def test_batch_write_10000_keyed_rows(spark: Any, shared_nsqd: Daemon) -> None:
    create_topic(shared_nsqd, "written", 4)
    df = spark.range(10_000).selectExpr(
        "concat('key-', CAST(id % 37 AS STRING)) AS key",
        "CAST(concat('row-', CAST(id AS STRING)) AS BINARY) AS body",
    )
    df.write.format("pnsq").options(**opts(shared_nsqd, "written")).mode("append").save()

    back = spark.read.format("pnsq").options(**opts(shared_nsqd, "written")).load().collect()
    assert sorted(bytes(r.body) for r in back) == sorted(f"row-{i}".encode() for i in range(10_000))
    partitions_of: dict[str, set[int]] = {}
    for r in back:
        key = f"key-{int(bytes(r.body)[4:]) % 37}"
        partitions_of.setdefault(key, set()).add(r.partition)
    assert len(partitions_of) == 37
    assert all(parts == {partition_for_key(k, 4)} for k, parts in partitions_of.items())


def test_stream_write_with_trace_ids(spark: Any, shared_nsqd: Daemon, tmp_path: Path) -> None:
    create_topic(shared_nsqd, "traced_in", 2)
    create_topic(shared_nsqd, "traced_out", 2)
    with BlockingClient(shared_nsqd.tcp_address, shared_nsqd.http_address) as nsq:
        messages = [(1000 + i, f"in-{i}".encode()) for i in range(20)]
        nsq.mpublish_traced("traced_in", messages, keys=[f"k{i % 3}" for i in range(20)])
    query = (
        spark.readStream.format("pnsq")
        .options(**opts(shared_nsqd, "traced_in", startingOffsets="earliest"))
        .load()
        .selectExpr("concat(CAST(body AS STRING), '!') AS body", "trace_id", "partition")
        .writeStream.format("pnsq")
        .options(**opts(shared_nsqd, "traced_out"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(60)
    assert query.exception() is None, query.exception()
    out = spark.read.format("pnsq").options(**opts(shared_nsqd, "traced_out")).load().collect()
    got = sorted((r.trace_id, bytes(r.body), r.partition) for r in out)
    source = spark.read.format("pnsq").options(**opts(shared_nsqd, "traced_in")).load().collect()
    want = sorted((r.trace_id, bytes(r.body) + b"!", r.partition) for r in source)
    assert got == want
    assert len(got) == 20
    assert all(bytes(r.id)[8:] == r.trace_id.to_bytes(8, "big") for r in out)


def test_write_creates_a_missing_topic(spark: Any, shared_nsqd: Daemon) -> None:
    df = spark.range(30).selectExpr("CAST(concat('w-', CAST(id AS STRING)) AS BINARY) AS body")
    options = opts(shared_nsqd, "created_by_write", partitions=3)
    df.write.format("pnsq").options(**options).mode("append").save()
    back = spark.read.format("pnsq").options(**opts(shared_nsqd, "created_by_write")).load()
    rows = back.collect()
    assert sorted(bytes(r.body) for r in rows) == sorted(f"w-{i}".encode() for i in range(30))
    assert {r.partition for r in rows} == {0, 1, 2}  # created with partitions=3, round-robin


PAD = b"." * 1_000


def _fail_first_attempt_halfway(rows: Any) -> Any:
    """mapPartitions: pass the rows on; a task's first attempt fails halfway through (after
    the write, in the same task, has published some of them)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    first_attempt = context is not None and context.attemptNumber() == 0
    for seen, row in enumerate(rows, 1):
        yield (b"row-%d|" % row + PAD,)  # 1 KB rows: the serializer sends them on in chunks
        if first_attempt and seen == 1_000:
            time.sleep(0.5)  # the write's batches of these rows reach nsqd
            raise RuntimeError("injected failure after half the rows")


@pytest.mark.parametrize("exactly_once", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_a_task_failing_halfway_then_retried_stores_each_row_once(
    spark: Any, shared_nsqd: Daemon, exactly_once: bool
) -> None:
    """Every task publishes half its rows, fails, and is run again (maxFailures 4): with
    exactlyOnce (the default) each row is stored once; without it the first halves twice."""
    topic = f"retried_{str(exactly_once).lower()}"
    create_topic(shared_nsqd, topic, 3)
    rows = spark.sparkContext.parallelize(range(4_000), 2)  # two tasks of 2,000 rows
    df = spark.createDataFrame(rows.mapPartitions(_fail_first_attempt_halfway), "body binary")
    options = opts(shared_nsqd, topic, batchSize=100, exactlyOnce=str(exactly_once).lower())
    batch_rows = "spark.sql.execution.arrow.maxRecordsPerBatch"
    spark.conf.set(batch_rows, "100")  # the write sees the rows as they come, 100 at a time
    try:
        df.write.format("pnsq").options(**options).mode("append").save()
    finally:
        spark.conf.unset(batch_rows)
    back = spark.read.format("pnsq").options(**opts(shared_nsqd, topic)).load().collect()
    counts = Counter(bytes(r.body).split(b"|")[0] for r in back)
    assert set(counts) == {f"row-{i}".encode() for i in range(4_000)}
    twice = sum(1 for n in counts.values() if n > 1)
    if exactly_once:
        assert twice == 0
    else:  # the injected failure did publish rows that the retry published again
        assert twice >= 1_000
