"""``df.write.format("pnsq")`` and ``df.writeStream.format("pnsq")``: each Spark task publishes
its rows with MPUB / MPUB_TRACE batches (:class:`pnsq.spark.writing.Publisher`). Imports pyspark;
:class:`pnsq.spark.source.PnsqDataSource` creates these writers.

Columns: ``body`` (binary or string, required), optional ``key`` (string or binary: the
partition is ``murmur3(key) % partition_num``), ``partition`` (int, wins over ``key``) and
``trace_id`` (long: the rows go out with MPUB_TRACE); other columns are ignored.

What commit and abort mean here: a task's messages are published while the task runs, and a
batch that nsqd acknowledged cannot be taken back. ``commit`` (all tasks succeeded) only logs
what was published; ``abort`` (a task failed) logs it as a warning: messages of the tasks that
did finish, and of the failed task's batches sent before it failed, stay in the topic. Spark
re-running a task or a micro-batch publishes its rows again. The sink is at-least-once, like
Spark's Kafka sink; deduplicate downstream (e.g. by a key or id in the body) if that matters.
"""

from __future__ import annotations

import logging
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
from .writing import WRITE_COLUMNS, Publisher, PublishReport, plan_route

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
    opts: WriteOptions, columns: tuple[str, ...], batches: Iterator[pa.RecordBatch]
) -> Published:
    """Executor: publish one task's rows (the partition map is looked up per task, so a
    long-running stream follows leader changes; a topic deleted meanwhile is created again)."""
    context = TaskContext.get()
    task = context.partitionId() if context is not None else 0
    route = plan_route(opts)
    with Publisher(route, opts, traced="trace_id" in columns, start=task) as publisher:
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

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        return _publish(self.opts, self.columns, iterator)

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
            "write to %s failed; %d messages already published stay (at-least-once): %s",
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
        return _publish(self.opts, self.columns, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = _total(messages)
        log.info("batch %d: published %d messages to %s", batchId, total.messages, self.opts.topic)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = _total(messages)
        log.warning(
            "batch %d to %s failed; %d messages already published stay (at-least-once)",
            batchId,
            self.opts.topic,
            total.messages,
        )
