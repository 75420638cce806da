"""``df.write.format("pnsq")`` and ``df.writeStream.format("pnsq")``: each Spark task publishes
its rows with MPUB / MPUB_TRACE batches (:class:`pnsq.spark.writing.Publisher`). Imports pyspark;
:class:`pnsq.spark.source.PnsqDataSource` creates these writers.

Columns: ``body`` (binary or string, required), optional ``key`` (string or binary: the
partition is ``murmur3(key) % partition_num``), ``partition`` (int, wins over ``key``) and
``trace_id`` (long: the rows go out with MPUB_TRACE); other columns are ignored.

What commit and abort mean here: a task's messages are published while the task runs, and a
batch that nsqd acknowledged cannot be taken back. ``commit`` (all tasks succeeded) only logs
what was published; ``abort`` (a task failed) logs it as a warning: messages of the tasks that
did finish, and of the failed task's batches sent before it failed, stay in the topic.

Exactly once (``exactlyOnce``, default true; :mod:`pnsq.spark.writing`): each task publishes as
a producer named after the write and its partition — a batch write's id (made once on the
driver, or ``writeId``), or a streaming query's id (kept in its checkpoint) and micro-batch —
so Spark re-running a task, a speculative copy, or a micro-batch after a driver restart stores
what the first run stored only once. ``exactlyOnce=false``: at-least-once, like Spark's Kafka
sink.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from .options import OptionError, WriteOptions
from .writing import WRITE_COLUMNS, Publisher, PublishReport, plan_route, producer_name

#: the local properties Spark's micro-batch execution sets on its tasks (StreamExecution's
#: QUERY_ID_KEY, kept in the query's checkpoint, and BATCH_ID_KEY)
QUERY_ID = "sql.streaming.queryId"
BATCH_ID = "streaming.sql.batchId"

log = logging.getLogger("pnsq.spark")

_ALLOWED: dict[str, tuple[type[DataType], ...]] = {
    "body": (BinaryType, StringType),
    "key": (BinaryType, StringType),
    "partition": (IntegerType, LongType, ShortType),
    "trace_id": (LongType, IntegerType),
}


def write_columns(schema: StructType) -> tuple[str, ...]:
    """The columns of ``schema`` the write uses, checked.

    Raises:
        OptionError: no ``body`` column, or one of the used columns has the wrong type.
    """
    fields = {f.name: f.dataType for f in schema.fields}
    if "body" not in fields:
        raise OptionError("a pnsq write needs a body column (binary or string)")
    for name in WRITE_COLUMNS:
        kind = fields.get(name)
        if kind is not None and not isinstance(kind, _ALLOWED[name]):
            allowed = " or ".join(t.typeName() for t in _ALLOWED[name])
            raise OptionError(f"column {name} must be {allowed}, not {kind.simpleString()}")
    return tuple(name for name in WRITE_COLUMNS if name in fields)


@dataclass
class Published(WriterCommitMessage):
    """One task's commit message: what it published."""

    task: int
    report: PublishReport = field(default_factory=PublishReport)


def _total(messages: list[WriterCommitMessage | None]) -> PublishReport:
    total = PublishReport()
    for message in messages:
        if isinstance(message, Published):
            total.merge(message.report)
    return total


def _publish(
    opts: WriteOptions,
    columns: tuple[str, ...],
    batches: Iterator[pa.RecordBatch],
    write: str | None,
) -> Published:
    """Executor: publish one task's rows (the partition map is looked up per task, so a
    long-running stream follows leader changes; a topic deleted meanwhile is created again),
    as the producer :func:`~pnsq.spark.writing.producer_name` of ``write`` and the task
    (exactly once), or unnumbered when ``write`` is None."""
    context = TaskContext.get()
    task = context.partitionId() if context is not None else 0
    route = plan_route(opts)
    producer = None
    if write is not None and context is not None:
        batch = context.getLocalProperty(BATCH_ID)  # a stream's micro-batch (None: batch)
        producer = producer_name(write if batch is None else f"{write}:{batch}", task)
    traced = "trace_id" in columns
    with Publisher(route, opts, traced=traced, start=task, producer=producer) as publisher:
        for batch in batches:
            publisher.add_columns({c: batch.column(c).to_pylist() for c in columns})
    return Published(task, publisher.report)


class PnsqWriter(DataSourceArrowWriter):
    """A batch write (``mode("append")``; a topic cannot be overwritten)."""

    def __init__(self, opts: WriteOptions, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise OptionError("pnsq topics are append-only: use mode('append')")
        self.opts = opts
        self.columns = write_columns(schema)
        plan_route(opts)  # create a missing topic (or fail) before any task runs
        #: names the tasks' producers: the same for every task run of this write (this object
        #: is made once on the driver and shipped to the tasks), ``writeId`` across job runs
        self.write_id = (opts.write_id or uuid.uuid4().hex) if opts.exactly_once else None

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        return _publish(self.opts, self.columns, iterator, self.write_id)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = _total(messages)
        log.info(
            "published %d messages to %s in %d batches: %s",
            total.messages,
            self.opts.topic,
            total.batches,
            total.per_partition,
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        total = _total(messages)
        log.warning(
            "write to %s failed; %d messages already published stay (a re-run with the same "
            "writeId stores them once): %s",
            self.opts.topic,
            total.messages,
            total.per_partition,
        )


class PnsqStreamWriter(DataSourceStreamArrowWriter):
    """A streaming write: each micro-batch's tasks publish as a batch write does. Spark
    creates a new instance for each commit/abort, so nothing is kept between calls."""

    def __init__(self, opts: WriteOptions, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise OptionError("pnsq topics are append-only: use outputMode('append')")
        self.opts = opts
        self.columns = write_columns(schema)
        plan_route(opts)  # create a missing topic (or fail) on the driver, not in every task

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        # the query's id (kept in its checkpoint, so the same after a restart) and, in
        # _publish, the micro-batch: a batch run again after a crash is stored once
        write = None
        if self.opts.exactly_once:
            context = TaskContext.get()
            query = context.getLocalProperty(QUERY_ID) if context is not None else None
            write = f"query-{query}" if query else None
        return _publish(self.opts, self.columns, iterator, write)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = _total(messages)
        log.info("batch %d: published %d messages to %s", batchId, total.messages, self.opts.topic)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = _total(messages)
        log.warning(
            "batch %d to %s failed; %d messages already published stay (its re-run stores "
            "them once)",
            batchId,
            self.opts.topic,
            total.messages,
        )
