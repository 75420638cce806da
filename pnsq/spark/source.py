"""pnsq as a PySpark data source (Python Data Source API, Spark >= 4.2): batch and streaming
reads here, writes in :mod:`pnsq.spark.sink`. Only these two modules import pyspark.

    from pnsq.spark.source import PnsqDataSource
    spark.dataSource.register(PnsqDataSource)
    df = spark.read.format("pnsq").option("nsqd", "127.0.0.1:4151").option("topic", "t").load()

Spark runs every method in a Python worker process, not in the driver's interpreter: readers
and input partitions are pickled, so they hold only options and plain dataclasses, and connect
inside :meth:`read`. Offsets are the JSON documents of :func:`pnsq.spark.planning.offsets_json`
(``{"0": 5, "1": 7}``: partition → next offset to read). ``docs/spark.md`` has the options.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from .nodes import TopicLayout, discover, offsets_for_timestamp
from .options import COLUMNS, SCHEMA, OptionError, ReadOptions, read_options, write_options
from .planning import (
    OffsetRange,
    Offsets,
    PlanningError,
    batch_start,
    check_data_loss,
    next_batch_end,
    offsets_from_json,
    offsets_json,
    plan_ranges,
    resolve_offsets,
)
from .reading import columns, read_range
from .retry import retrying

if TYPE_CHECKING:
    from .sink import PnsqStreamWriter, PnsqWriter


class PnsqDataSource(DataSource):
    """``format("pnsq")``: a topic's partitions as rows of :data:`pnsq.spark.options.SCHEMA`."""

    @classmethod
    def name(cls) -> str:
        return "pnsq"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return PnsqBatchReader(read_options(self.options), _checked(schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return PnsqStreamReader(read_options(self.options), _checked(schema))

    def writer(self, schema: StructType, overwrite: bool) -> PnsqWriter:
        from .sink import PnsqWriter

        return PnsqWriter(write_options(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> PnsqStreamWriter:
        from .sink import PnsqStreamWriter

        return PnsqStreamWriter(write_options(self.options), schema, overwrite)


def _checked(schema: StructType) -> StructType:
    if tuple(schema.fieldNames()) != COLUMNS:
        raise OptionError(f"the pnsq source's schema is fixed: {SCHEMA}")
    return schema


class RangePartition(InputPartition):
    """One Spark task: an :class:`~pnsq.spark.planning.OffsetRange` (topic, partition,
    ``[start, end)``, the leader's HTTP address)."""

    def __init__(self, r: OffsetRange) -> None:
        super().__init__(r)
        self.range = r


def _read(
    partition: InputPartition, opts: ReadOptions, schema: StructType
) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, RangePartition):  # Spark's stand-in for "no partitions"
        return
    arrow = to_arrow_schema(schema, timezone="UTC")
    r = partition.range
    for records in read_range(r, opts):
        cols = columns(r.topic, r.partition, records)
        arrays = [pa.array(col, type=f.type) for col, f in zip(cols, arrow, strict=True)]
        yield pa.RecordBatch.from_arrays(arrays, schema=arrow)


def _timestamps(layout: TopicLayout, timestamp: int, opts: ReadOptions) -> Offsets:
    return offsets_for_timestamp(layout, timestamp, opts.endpoints.timeout)


class PnsqBatchReader(DataSourceReader):
    """``spark.read``: ``[startingOffsets, endingOffsets)`` (default earliest → latest, looked
    up when the query is planned)."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        what = f"planning a read of {self.opts.topic!r}"
        return retrying(what, self._partitions, self.opts.endpoints.retry_timeout)

    def _partitions(self) -> list[InputPartition]:
        opts = self.opts
        layout = discover(opts.endpoints, opts.topic)
        infos = layout.infos()
        if opts.starting_timestamp is not None:
            start = _timestamps(layout, opts.starting_timestamp, opts)
        else:
            spec = opts.starting_offsets or "earliest"
            start = resolve_offsets(spec, infos, default="earliest", allow_latest=False)
        if opts.ending_timestamp is not None:
            end = _timestamps(layout, opts.ending_timestamp, opts)
        else:
            if opts.ending_offsets.strip() == "earliest":
                raise OptionError("endingOffsets=earliest is not allowed")
            end = resolve_offsets(opts.ending_offsets, infos, default="latest")
        start = check_data_loss(start, infos, fail=opts.fail_on_data_loss)
        behind = sorted(p for p in start if end[p] < start[p])
        if behind:
            raise PlanningError(f"ending offsets before starting offsets for partitions {behind}")
        ranges = plan_ranges(opts.topic, start, end, infos, opts.min_partitions)
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.opts, self.schema)


class PnsqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``. The driver-side methods run in one long-lived process per query
    (so the instance may cache); :meth:`read` runs on executors from another, pickled instance.

    Each micro-batch goes from the checkpointed offsets to the latest ones, capped by the read
    limit (``maxOffsetsPerTrigger`` → ``ReadMaxRows``, split over the partitions by backlog);
    ``Trigger.AvailableNow`` stops at the offsets that were latest when the query started.
    Partitions that appear later start at their earliest offset.
    """

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self._initial: dict[str, int] | None = None
        self._target: Offsets | None = None
        self._layout: TopicLayout | None = None

    def _discover(self) -> TopicLayout:
        """The topic's layout now, retrying a failing node for ``retryTimeoutMs``; once the
        query has seen the topic, "not found" (a restarted node not back yet) is retried too."""
        opts = self.opts
        self._layout = retrying(
            f"looking up {opts.topic!r}",
            lambda: discover(opts.endpoints, opts.topic),
            opts.endpoints.retry_timeout,
            missing_topic=self._layout is not None or self._initial is not None,
        )
        return self._layout

    def initialOffset(self) -> dict[str, int]:
        # Spark asks more than once for a new query: resolve "latest" once.
        if self._initial is None:
            what = f"planning the start of {self.opts.topic!r}"
            self._initial = retrying(what, self._start, self.opts.endpoints.retry_timeout)
        return self._initial

    def _start(self) -> dict[str, int]:
        opts = self.opts
        layout = self._layout = discover(opts.endpoints, opts.topic)
        if opts.starting_timestamp is not None:
            start = _timestamps(layout, opts.starting_timestamp, opts)
        else:
            spec = opts.starting_offsets or "latest"
            start = resolve_offsets(spec, layout.infos(), default="earliest")
        return offsets_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        cap = self.opts.max_offsets_per_trigger
        return ReadMaxRows(cap) if cap else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._discover().latest()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        # Honour the limit Spark passes: ReadAllAvailable means no cap, even with
        # maxOffsetsPerTrigger set (that only sets the default, getDefaultReadLimit).
        end = next_batch_end(
            offsets_from_json(start),
            self._discover().infos(),
            max_rows=limit.max_rows if isinstance(limit, ReadMaxRows) else None,
            target=self._target,
            fail_on_data_loss=self.opts.fail_on_data_loss,
        )
        return offsets_json(end)

    def reportLatestOffset(self) -> dict[str, int] | None:
        return offsets_json(self._layout.latest()) if self._layout is not None else None

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        stop = offsets_from_json(end)
        infos = (self._layout or self._discover()).infos()
        first = batch_start(
            offsets_from_json(start), stop, infos, fail_on_data_loss=self.opts.fail_on_data_loss
        )
        ranges = plan_ranges(self.opts.topic, first, stop, infos, self.opts.min_partitions)
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.opts, self.schema)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: Spark's checkpoint, not nsqd, records what was read."""

    def stop(self) -> None:
        """Nothing to release (and Spark 4.3 does not reliably call it)."""
