"""The statsd lines and packets: Go nsqd 1.3.0's names, types, order and counter deltas from the
statistics records, its prefix expansion, and its packet packing (never over the limit unless one
line is, never a split line, every line sent, in order)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, strategies as st

from nsqd.broker import BrokerConfig, NewRecord, open_broker
from nsqd.broker.clock import VirtualClock
from nsqd.config.runtime import expand_statsd_prefix
from nsqd.observe.statsd import GO_DEFAULT_BUFFER, Metric, Previous, pack, push_metrics

MEMORY = {
    "heap_objects": 10,
    "heap_idle_bytes": 0,
    "heap_in_use_bytes": 4096,
    "heap_released_bytes": 0,
    "gc_pause_usec_100": 7,
    "gc_pause_usec_99": 6,
    "gc_pause_usec_95": 5,
    "next_gc_bytes": 0,
    "gc_total_runs": 40,
}

STOCK_TOPIC = [
    ("topic.t.message_count", "c"),
    ("topic.t.message_bytes", "c"),
    ("topic.t.depth", "g"),
    ("topic.t.backend_depth", "g"),
]
STOCK_CHANNEL = [
    ("topic.t.channel.c.message_count", "c"),
    ("topic.t.channel.c.depth", "g"),
    ("topic.t.channel.c.backend_depth", "g"),
    ("topic.t.channel.c.in_flight_count", "g"),
    ("topic.t.channel.c.deferred_count", "g"),
    ("topic.t.channel.c.requeue_count", "c"),
    ("topic.t.channel.c.timeout_count", "c"),
    ("topic.t.channel.c.clients", "g"),
]


def _shape(metrics: list[Metric]) -> list[tuple[str, str]]:
    return [(m.name, m.kind) for m in metrics]


def _values(metrics: list[Metric]) -> dict[str, int]:
    return {m.name: m.value for m in metrics}


async def test_a_stock_topic_sends_gos_names_types_and_order(tmp_path: Path) -> None:
    clock = VirtualClock()
    async with open_broker(BrokerConfig(data_path=tmp_path), clock) as broker:
        topic = broker.get_or_create_topic("t", 1)
        broker.get_or_create_channel(topic, "c")
        broker.publish("t", [NewRecord(timestamp_ns=clock.now_ns(), body=b"abc")] * 2)
        metrics, _ = push_metrics([topic.statistics()], Previous(), memory=MEMORY)
    mem = [(f"mem.{k}", "g") for k in list(MEMORY)[:-1]] + [("mem.gc_runs", "c")]
    assert _shape(metrics) == STOCK_TOPIC + STOCK_CHANNEL + mem
    values = _values(metrics)
    assert values["topic.t.message_count"] == 2
    assert values["topic.t.message_bytes"] == 6
    assert values["topic.t.channel.c.depth"] == 2
    assert values["mem.heap_in_use_bytes"] == 4096
    assert values["mem.gc_runs"] == 40  # the first push counts from 0, as Go's


async def test_counters_are_deltas_since_the_last_push(tmp_path: Path) -> None:
    clock = VirtualClock()
    async with open_broker(BrokerConfig(data_path=tmp_path), clock) as broker:
        topic = broker.get_or_create_topic("t", 1)
        broker.get_or_create_channel(topic, "c")
        broker.publish("t", [NewRecord(timestamp_ns=clock.now_ns(), body=b"abc")])
        _, previous = push_metrics([topic.statistics()], Previous(), memory=MEMORY)
        broker.publish("t", [NewRecord(timestamp_ns=clock.now_ns(), body=b"defg")] * 3)
        broker.get_or_create_channel(topic, "new")
        later = dict(MEMORY, gc_total_runs=45)
        metrics, _ = push_metrics([topic.statistics()], previous, memory=later)
    values = _values(metrics)
    assert values["topic.t.message_count"] == 3
    assert values["topic.t.message_bytes"] == 12
    assert values["topic.t.channel.c.message_count"] == 3
    assert values["topic.t.channel.c.depth"] == 4  # a gauge: the value now
    assert values["topic.t.channel.new.message_count"] == 0  # new: counted from 0 (empty)
    assert values["mem.gc_runs"] == 5


async def test_without_mem_stats_no_mem_lines_and_the_gc_count_is_kept(tmp_path: Path) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path), VirtualClock()) as broker:
        topic = broker.get_or_create_topic("t", 1)
        _, previous = push_metrics([topic.statistics()], Previous(), memory=MEMORY)
        metrics, after = push_metrics([topic.statistics()], previous, memory=None)
    assert _shape(metrics) == STOCK_TOPIC
    assert after.gc_runs == 40


async def test_exclude_ephemeral_skips_ephemeral_topics_and_channels(tmp_path: Path) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path), VirtualClock()) as broker:
        topic = broker.get_or_create_topic("t", 1)
        broker.get_or_create_channel(topic, "c")
        broker.get_or_create_channel(topic, "e#ephemeral")
        other = broker.get_or_create_topic("x#ephemeral", 1)
        records = [topic.statistics(), other.statistics()]
        kept, previous = push_metrics(records, Previous(), exclude_ephemeral=True)
        every, _ = push_metrics(records, Previous())
    assert _shape(kept) == STOCK_TOPIC + STOCK_CHANNEL
    assert "x#ephemeral" in previous.by_topic  # remembered, as Go's lastStats
    assert {m.name for m in every} >= {
        "topic.t.channel.e#ephemeral.clients",
        "topic.x#ephemeral.depth",
    }


async def test_e2e_latency_gauges_are_named_by_percent(tmp_path: Path) -> None:
    clock = VirtualClock()
    async with open_broker(BrokerConfig(data_path=tmp_path), clock) as broker:
        topic = broker.get_or_create_topic("t", 1)
        broker.get_or_create_channel(topic, "c")
        record = topic.statistics((0.999, 0.99, 0.5), clock.now_ns())
        metrics, _ = push_metrics([record], Previous())
    names = [m.name for m in metrics if "e2e" in m.name]
    assert names == [  # Go's %.0f of quantile*100
        "topic.t.e2e_processing_latency_100",
        "topic.t.e2e_processing_latency_99",
        "topic.t.e2e_processing_latency_50",
        "topic.t.channel.c.e2e_processing_latency_100",
        "topic.t.channel.c.e2e_processing_latency_99",
        "topic.t.channel.c.e2e_processing_latency_50",
    ]
    assert {m.kind for m in metrics if "e2e" in m.name} == {"g"}


async def test_partitioned_topics_add_per_partition_gauges(tmp_path: Path) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path), VirtualClock()) as broker:
        topic = broker.get_or_create_topic("p", 2)
        broker.get_or_create_channel(topic, "c")
        metrics, _ = push_metrics([topic.statistics()], Previous())
    extra = [(n, k) for n, k in _shape(metrics) if ".partition." in n]
    assert extra == [
        ("topic.p.partition.0.depth", "g"),
        ("topic.p.partition.0.backend_depth", "g"),
        ("topic.p.partition.1.depth", "g"),
        ("topic.p.partition.1.backend_depth", "g"),
        *[
            (f"topic.p.channel.c.partition.{n}.{key}", "g")
            for n in (0, 1)
            for key in ("depth", "backend_depth", "in_flight_count", "deferred_count", "lag")
        ],
    ]
    stock = [(n.replace("topic.p.", "topic.t."), k) for n, k in _shape(metrics)]
    assert [s for s in stock if ".partition." not in s[0]] == STOCK_TOPIC + STOCK_CHANNEL


def test_lines_are_gos_statsd_format() -> None:
    assert Metric("topic.t.depth", 3, "g").line("nsq.h_4151.") == b"nsq.h_4151.topic.t.depth:3|g\n"
    assert Metric("mem.gc_runs", -2, "c").line("") == b"mem.gc_runs:-2|c\n"


def test_the_prefix_is_expanded_as_nsqd_does() -> None:
    assert expand_statsd_prefix("nsq.%s", "127.0.0.1", 4151) == "nsq.127_0_0_1_4151."
    assert expand_statsd_prefix("nsq.%s.", "host.example", 80) == "nsq.host_example_80."
    assert expand_statsd_prefix("app", "h", 1) == "app."
    assert expand_statsd_prefix("%s-%s", "::1", 2) == "[__1]_2-[__1]_2."
    assert expand_statsd_prefix("", "h", 1) == ""


_LINE = st.binary(max_size=80).map(lambda b: b.replace(b"\n", b"x") + b"\n")


@given(st.lists(_LINE, max_size=60), st.integers(min_value=1, max_value=300))
def test_packing_sends_every_line_whole_and_no_packet_over_the_limit(
    lines: list[bytes], size: int
) -> None:
    packets = pack(lines, size)
    assert b"".join(packets) == b"".join(lines)  # every line, in order
    split = [[part + b"\n" for part in packet.split(b"\n")[:-1]] for packet in packets]
    assert [line for group in split for line in group] == lines  # no line split
    for packet, group in zip(packets, split, strict=True):
        assert len(packet) <= size or len(group) == 1  # over only as one long line
    for packet, following in zip(packets, split[1:], strict=False):
        assert len(packet) + len(following[0]) > size  # Go fills a packet before the next


def test_packing_with_no_size_uses_gos_default_buffer() -> None:
    lines = [b"a" * 99 + b"\n"] * 100
    packets = pack(lines, 0)
    assert [len(p) for p in packets] == [GO_DEFAULT_BUFFER // 100 * 100] * 2 + [2000]
