"""What nsqd sends to statsd, as pure code: the metric lines of one push and their packets.

nsqd 1.3.0 (``nsqd/statsd.go``) pushes, every ``--statsd-interval``, one line per value:
``<prefix><name>:<value>|g`` for gauges and ``|c`` for counters, where a counter's value is the
change since the previous push (the statsd server sums them). The names, their order and which
are counters are Go's, so dashboards built on Go nsqd read pnsq unchanged:

* per topic: ``topic.<T>.message_count`` c, ``.message_bytes`` c, ``.depth`` g,
  ``.backend_depth`` g, ``.e2e_processing_latency_<P>`` g;
* per channel: ``topic.<T>.channel.<C>.message_count`` c, ``.depth`` g, ``.backend_depth`` g,
  ``.in_flight_count`` g, ``.deferred_count`` g, ``.requeue_count`` c, ``.timeout_count`` c,
  ``.clients`` g, ``.e2e_processing_latency_<P>`` g;
* with ``--statsd-mem-stats``: ``mem.heap_objects``, ``mem.heap_idle_bytes``,
  ``mem.heap_in_use_bytes``, ``mem.heap_released_bytes``, ``mem.gc_pause_usec_100``,
  ``mem.gc_pause_usec_99``, ``mem.gc_pause_usec_95``, ``mem.next_gc_bytes`` g and
  ``mem.gc_runs`` c (the process's figures of ``/stats``' ``memory`` block).

pnsq adds, only for a topic of several partitions (Go has none, so a stock topic's lines are
exactly Go's), gauges per partition held here: ``topic.<T>.partition.<N>.depth`` and
``.backend_depth``, and ``topic.<T>.channel.<C>.partition.<N>.depth``, ``.backend_depth``,
``.in_flight_count``, ``.deferred_count`` and ``.lag`` (messages not yet FINed).

Lines are packed into packets as Go's ``BoundaryBufferedWriter`` does: as many whole lines as fit
in ``--statsd-udp-packet-size`` bytes; a line is never split (one longer than the limit goes
alone in its own packet, as Go writes it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from ..broker import ChannelStatistics, TopicStatistics
from ..core.latency import LatencyResult

__all__ = [
    "EPHEMERAL_SUFFIX",
    "GO_DEFAULT_BUFFER",
    "MEM_GAUGES",
    "Metric",
    "Previous",
    "pack",
    "push_metrics",
]

EPHEMERAL_SUFFIX = "#ephemeral"
GO_DEFAULT_BUFFER = 4096  # bufio.NewWriterSize's size when given none

#: the ``memory`` block's keys Go sends as ``mem.<key>`` gauges, in Go's order
MEM_GAUGES = (
    "heap_objects",
    "heap_idle_bytes",
    "heap_in_use_bytes",
    "heap_released_bytes",
    "gc_pause_usec_100",
    "gc_pause_usec_99",
    "gc_pause_usec_95",
    "next_gc_bytes",
)


@dataclass(frozen=True, slots=True)
class Metric:
    """One statsd value: ``kind`` is ``g`` (gauge) or ``c`` (counter: a delta)."""

    name: str
    value: int
    kind: str

    def line(self, prefix: str) -> bytes:
        """The statsd line, newline-terminated as Go writes it."""
        return f"{prefix}{self.name}:{self.value}|{self.kind}\n".encode()


@dataclass(frozen=True, slots=True)
class _ChannelCounts:
    message_count: int = 0
    requeue_count: int = 0
    timeout_count: int = 0


@dataclass(frozen=True, slots=True)
class _TopicCounts:
    message_count: int = 0
    message_bytes: int = 0
    channels: Mapping[str, _ChannelCounts] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Previous:
    """The counters of the last push, that the next one's deltas are taken from (a topic or
    channel not seen then counts from 0, as Go's ``lastStats`` lookup)."""

    by_topic: Mapping[str, _TopicCounts] = field(default_factory=dict)
    gc_runs: int = 0


def _latency(base: str, result: LatencyResult | None) -> Iterator[Metric]:
    """Go's ``e2e_processing_latency_%.0f`` of each quantile times 100, in ns."""
    if result is None:
        return
    for quantile, value in result.percentiles:
        yield Metric(f"{base}.e2e_processing_latency_{quantile * 100.0:.0f}", int(value), "g")


def _channel(
    base: str, channel: ChannelStatistics, last: _ChannelCounts, partitioned: bool
) -> Iterator[Metric]:
    base = f"{base}.channel.{channel.name}"
    yield Metric(f"{base}.message_count", channel.message_count - last.message_count, "c")
    yield Metric(f"{base}.depth", channel.depth, "g")
    yield Metric(f"{base}.backend_depth", channel.backend_depth, "g")
    yield Metric(f"{base}.in_flight_count", channel.in_flight_count, "g")
    yield Metric(f"{base}.deferred_count", channel.deferred_count, "g")
    yield Metric(f"{base}.requeue_count", channel.requeue_count - last.requeue_count, "c")
    yield Metric(f"{base}.timeout_count", channel.timeout_count - last.timeout_count, "c")
    yield Metric(f"{base}.clients", channel.client_count, "g")
    yield from _latency(base, channel.e2e_latency)
    if partitioned:
        for part in channel.partitions:
            at = f"{base}.partition.{part.number}"
            yield Metric(f"{at}.depth", part.depth, "g")
            yield Metric(f"{at}.backend_depth", part.backend_depth, "g")
            yield Metric(f"{at}.in_flight_count", part.in_flight_count, "g")
            yield Metric(f"{at}.deferred_count", part.deferred_count, "g")
            yield Metric(f"{at}.lag", part.lag, "g")


def _topic(topic: TopicStatistics, last: _TopicCounts, exclude_ephemeral: bool) -> Iterator[Metric]:
    base = f"topic.{topic.name}"
    partitioned = topic.partition_num > 1
    yield Metric(f"{base}.message_count", topic.message_count - last.message_count, "c")
    yield Metric(f"{base}.message_bytes", topic.message_bytes - last.message_bytes, "c")
    yield Metric(f"{base}.depth", topic.depth, "g")
    yield Metric(f"{base}.backend_depth", topic.backend_depth, "g")
    yield from _latency(base, topic.e2e_latency)
    if partitioned:
        for part in topic.partitions:
            at = f"{base}.partition.{part.number}"
            yield Metric(f"{at}.depth", part.depth, "g")
            yield Metric(f"{at}.backend_depth", part.backend_depth, "g")
    for channel in topic.channels:
        if exclude_ephemeral and channel.name.endswith(EPHEMERAL_SUFFIX):
            continue
        seen = last.channels.get(channel.name, _ChannelCounts())
        yield from _channel(base, channel, seen, partitioned)


def _counts(topic: TopicStatistics) -> _TopicCounts:
    return _TopicCounts(
        topic.message_count,
        topic.message_bytes,
        {
            c.name: _ChannelCounts(c.message_count, c.requeue_count, c.timeout_count)
            for c in topic.channels
        },
    )


def push_metrics(
    topics: Sequence[TopicStatistics],
    previous: Previous,
    *,
    exclude_ephemeral: bool = False,
    memory: Mapping[str, int] | None = None,
) -> tuple[list[Metric], Previous]:
    """The metrics of one push, in Go's order, and the counters the next push starts from.

    ``memory`` is ``/stats``' memory block when ``--statsd-mem-stats`` is on (None: no ``mem.``
    lines, and the previous GC count is kept, as Go's ``lastMemStats``). With
    ``exclude_ephemeral``, ``#ephemeral`` topics and channels send nothing (but are still
    remembered, as Go's ``lastStats`` keeps them).
    """
    metrics: list[Metric] = []
    for topic in topics:
        if exclude_ephemeral and topic.name.endswith(EPHEMERAL_SUFFIX):
            continue
        last = previous.by_topic.get(topic.name, _TopicCounts())
        metrics.extend(_topic(topic, last, exclude_ephemeral))
    gc_runs = previous.gc_runs
    if memory is not None:
        metrics.extend(Metric(f"mem.{key}", int(memory[key]), "g") for key in MEM_GAUGES)
        gc_runs = int(memory["gc_total_runs"])
        metrics.append(Metric("mem.gc_runs", gc_runs - previous.gc_runs, "c"))
    return metrics, Previous({t.name: _counts(t) for t in topics}, gc_runs)


def pack(lines: Iterable[bytes], size: int) -> list[bytes]:
    """The packets Go's ``BoundaryBufferedWriter`` of ``size`` bytes makes of ``lines``: whole
    lines, in order, as many as fit; a line longer than ``size`` alone in its packet (a size
    of 0 or less is Go's default buffer, 4096 bytes)."""
    if size <= 0:
        size = GO_DEFAULT_BUFFER
    packets: list[bytes] = []
    buffered: list[bytes] = []
    used = 0
    for line in lines:
        if len(line) > size - used and buffered:
            packets.append(b"".join(buffered))
            buffered, used = [], 0
        if len(line) > size:  # bufio writes it straight through, unbuffered
            packets.append(line)
            continue
        buffered.append(line)
        used += len(line)
    if buffered:
        packets.append(b"".join(buffered))
    return packets
