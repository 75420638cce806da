"""A streaming copy job for tests/spark/test_spark_exactly_once.py, run as its own process so the
test can kill -9 its driver: ``readStream`` of one pnsq topic, ``writeStream`` to another, with a
checkpoint, a few messages per micro-batch, until killed.

    python tests/spark/copy_stream.py NSQD_HTTP SOURCE TARGET CHECKPOINT
"""

from __future__ import annotations

import sys
import time


def main(nsqd: str, source: str, target: str, checkpoint: str) -> None:
    from pyspark.sql import SparkSession

    from pnsq.spark.source import PnsqDataSource

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("pnsq-copy-stream")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(PnsqDataSource)
    query = (
        spark.readStream.format("pnsq")
        .options(nsqd=nsqd, topic=source, startingOffsets="earliest", maxOffsetsPerTrigger="400")
        .load()
        .select("body", "partition")
        .writeStream.format("pnsq")
        .options(nsqd=nsqd, topic=target, batchSize="20")
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    print("started", flush=True)
    while query.isActive:
        time.sleep(0.2)
    raise SystemExit(f"the query stopped: {query.exception()}")


if __name__ == "__main__":
    main(*sys.argv[1:5])
