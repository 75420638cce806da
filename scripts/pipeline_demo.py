"""A worked Spark pipeline over pnsq (run it with ``scripts/pipeline_demo``; docs/spark.md).

1. A producer thread publishes traced JSON events ``{"user", "action", "sent_ms"}`` to the topic
   ``demo_events`` (4 partitions) with MPUB_TRACE, keyed by user, at ``--rate`` events/s.
2. A Structured Streaming query reads ``demo_events`` with ``format("pnsq")`` and counts events
   per user per minute of publish time, with latencies from the timestamps: ``publish_ms``
   (nsqd's publish timestamp - the producer's ``sent_ms``) and ``end_to_end_ms`` (the micro-batch's
   processing time - ``sent_ms``).
3. Every micro-batch's updated counts go back to pnsq (topic ``demo_counts``, keyed by user,
   traced with the newest event's trace id) and are appended to Parquet (``<out>/counts``).
4. At the end the final counts (the newest row per minute and user) are read back from Parquet
   and checked against what was published.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from pnsq.client.blocking import BlockingClient

EVENTS, COUNTS = "demo_events", "demo_counts"
ACTIONS = ("view", "click", "buy")


def create_topic(http: str, topic: str, partitions: int) -> None:
    """``POST /topic/create`` (a topic that already exists is fine)."""
    url = f"http://{http}/topic/create?topic={topic}&partition_num={partitions}"
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=10).close()
    except urllib.error.HTTPError as exc:
        if exc.code != 400:  # TOPIC_ALREADY_EXIST with other parameters: use it as it is
            raise


def latest_offsets(http: str, topic: str) -> str:
    """The topic's current end, as a startingOffsets JSON (so a run sees only its own events)."""
    with BlockingClient(http_address=http) as nsq:
        route = nsq.partitions(topic)
    return json.dumps({str(p.partition): p.latest for p in route.partitions})


def produce(tcp: str, http: str, events: int, keys: int, rate: float) -> None:
    """Publish ``events`` traced events in batches of up to 100, about ``rate`` per second."""
    base = (int(time.time()) & 0xFFFFFFFF) << 24  # trace ids unique to this run
    batch = 100 if rate <= 0 else max(1, min(100, int(rate / 10)))
    with BlockingClient(tcp, http) as nsq:
        for first in range(0, events, batch):
            started = time.monotonic()
            users, messages = [], []
            for i in range(first, min(first + batch, events)):
                user = f"user-{i % keys}"
                body = {"user": user, "action": ACTIONS[i % 3], "sent_ms": int(time.time() * 1000)}
                users.append(user)
                messages.append((base + i, json.dumps(body).encode()))
            nsq.mpublish_traced(EVENTS, messages, keys=users)
            if rate > 0:
                time.sleep(max(0.0, len(messages) / rate - (time.monotonic() - started)))


def start_query(spark: Any, http: str, start: str, out: Path, trigger: str) -> Any:
    """The streaming query: per-user per-minute counts and latencies → pnsq + Parquet."""
    from pyspark.sql import functions as F

    sent_us = F.get_json_object(F.col("body").cast("string"), "$.sent_ms").cast("long") * 1000
    events = (
        spark.readStream.format("pnsq")
        .option("nsqd", http)
        .option("topic", EVENTS)
        .option("startingOffsets", start)
        .option("maxOffsetsPerTrigger", 5000)
        .load()
        .select(
            F.get_json_object(F.col("body").cast("string"), "$.user").alias("user"),
            "timestamp",
            "trace_id",
            ((F.unix_micros("timestamp") - sent_us) / 1000).alias("publish_ms"),
            ((F.unix_micros(F.current_timestamp()) - sent_us) / 1000).alias("end_to_end_ms"),
        )
    )
    counts = (
        events.withWatermark("timestamp", "2 minutes")
        .groupBy(F.window("timestamp", "1 minute").alias("w"), "user")
        .agg(
            F.count("*").alias("events"),
            F.round(F.avg("publish_ms"), 2).alias("avg_publish_ms"),
            F.round(F.avg("end_to_end_ms"), 1).alias("avg_end_to_end_ms"),
            F.max("end_to_end_ms").alias("max_end_to_end_ms"),
            F.max("trace_id").alias("last_trace_id"),
        )
    )

    def emit(batch: Any, batch_id: int) -> None:
        rows = batch.select(
            F.col("w.start").alias("minute"), "*", F.lit(batch_id).alias("batch_id")
        ).drop("w")
        rows.persist()
        try:
            if rows.isEmpty():
                return
            rows.select(
                F.col("user").alias("key"),
                F.to_json(F.struct(*rows.columns)).alias("body"),
                F.col("last_trace_id").alias("trace_id"),
            ).write.format("pnsq").option("nsqd", http).option("topic", COUNTS).mode(
                "append"
            ).save()
            rows.write.mode("append").parquet(str(out / "counts"))
        finally:
            rows.unpersist()

    return (
        counts.writeStream.outputMode("update")
        .foreachBatch(emit)
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(processingTime=trigger)
        .start()
    )


def final_counts(spark: Any, out: Path) -> list[Any]:
    """The newest row per (minute, user) of the Parquet output."""
    from pyspark.sql import Window, functions as F

    newest = Window.partitionBy("minute", "user").orderBy(F.col("batch_id").desc())
    table = spark.read.parquet(str(out / "counts"))
    latest = table.withColumn("n", F.row_number().over(newest)).where("n = 1").drop("n")
    return list(latest.orderBy("minute", "user").collect())


def run(
    spark: Any,
    tcp: str,
    http: str,
    out: Path,
    *,
    events: int,
    keys: int,
    rate: float,
    trigger: str = "1 second",
) -> list[Any]:
    """The whole demo on an existing session; returns the final counts."""
    from pnsq.spark.source import PnsqDataSource

    spark.dataSource.register(PnsqDataSource)
    shutil.rmtree(out, ignore_errors=True)
    create_topic(http, EVENTS, 4)
    create_topic(http, COUNTS, 2)
    query = start_query(spark, http, latest_offsets(http, EVENTS), out, trigger)
    try:
        producer = threading.Thread(target=produce, args=(tcp, http, events, keys, rate))
        producer.start()
        producer.join()
        query.processAllAvailable()
    finally:
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(f"the streaming query failed: {query.exception()}")
    rows = final_counts(spark, out)
    counted = sum(r.events for r in rows)
    if counted != events:
        raise RuntimeError(f"counted {counted} events, published {events}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nsqd-tcp", default="127.0.0.1:4150")
    parser.add_argument("--nsqd-http", default="127.0.0.1:4151")
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--keys", type=int, default=8, help="distinct users")
    parser.add_argument("--rate", type=float, default=1000, help="events/s (0: at once)")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir(), "pnsq-demo"))
    args = parser.parse_args()

    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("pnsq-pipeline-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    started = time.monotonic()
    try:
        rows = run(
            spark,
            args.nsqd_tcp,
            args.nsqd_http,
            args.out,
            events=args.events,
            keys=args.keys,
            rate=args.rate,
        )
        spark.createDataFrame(rows).drop("batch_id").show(50, truncate=False)
        print(f"{args.events} events counted exactly, in {time.monotonic() - started:.1f} s")
        print(f"Parquet: {args.out / 'counts'}; counts also published to topic {COUNTS}")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
