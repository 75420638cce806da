"""A real statsd receiver parses every line pnsq's nsqd pushes: Prometheus's statsd_exporter
(built by scripts/setup from the Go module proxy) receives a node's pushes after a workload on a
two-partition topic, counts no sample or tag error and no type conflict, turns every sample
into an event, and exposes each expected series with statsd's type (``c`` as a counter, ``g``
as a gauge), the per-partition gauges included."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from protocol import Fin, Pub, Rdy, Sub
from tests.daemons import Daemon, Peer, pnsq_nsqd, statsd_exporter
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration

TOPIC, CHANNEL = "se", "ch"
COUNTERS = ["topic.se.message_count", "topic.se.message_bytes", "mem.gc_runs"]
COUNTERS += [f"topic.se.channel.ch.{k}" for k in ("message_count", "requeue_count")]
COUNTERS += ["topic.se.channel.ch.timeout_count"]
GAUGES = ["topic.se.depth", "topic.se.backend_depth", "mem.heap_objects", "mem.next_gc_bytes"]
GAUGES += [f"topic.se.channel.ch.{k}" for k in ("depth", "in_flight_count", "clients")]
GAUGES += ["topic.se.channel.ch.e2e_processing_latency_99", "topic.se.e2e_processing_latency_99"]
GAUGES += [f"topic.se.partition.{n}.depth" for n in (0, 1)]
GAUGES += [f"topic.se.channel.ch.partition.{n}.lag" for n in (0, 1)]


@pytest.fixture
def pushed(tmp_path: Path) -> Iterator[tuple[Peer, Daemon]]:
    exporter, udp_port = statsd_exporter(tmp_path / "exporter")
    exporter.start()
    d = pnsq_nsqd(
        tmp_path / "data",
        f"--statsd-address=127.0.0.1:{udp_port}",
        "--statsd-interval=1s",
        "--default-partitions=2",
        "--e2e-processing-latency-percentile=0.99",
    )
    clients: list[RawClient] = []
    try:
        d.start()
        producer = RawClient(d.tcp_address)
        clients.append(producer)
        producer.identify()
        for i in range(4):
            producer.send(Pub(TOPIC, b"m%d" % i))
            assert producer.read().data == b"OK"
        consumer = RawClient(d.tcp_address)
        clients.append(consumer)
        consumer.identify()
        consumer.send(Sub(TOPIC, CHANNEL), Rdy(2))
        assert consumer.read().data == b"OK"
        message = consumer.read(skip_heartbeats=True)
        consumer.send(Fin(message.message_id))
        time.sleep(2.5)  # at least one whole push after the workload
        yield exporter, d
    finally:
        for client in clients:
            client.close()
        d.stop()
        exporter.stop()


def _scrape(exporter: Peer) -> dict[str, tuple[str, dict[tuple[str, ...], float]]]:
    """Family name -> (type, {label values: value})."""
    with urllib.request.urlopen(f"{exporter.url}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        values = {tuple(sorted(s.labels.items())): s.value for s in family.samples}
        out[family.name] = (family.type, values)
    return out


def _total(families: dict[str, tuple[str, dict[tuple[str, ...], float]]], name: str) -> float:
    return sum(families.get(name, ("", {}))[1].values())


def test_statsd_exporter_parses_every_line(pushed: tuple[Peer, Daemon]) -> None:
    exporter, d = pushed
    deadline = time.monotonic() + 5
    while True:  # the exporter turns samples into events in batches: let them settle
        families = _scrape(exporter)
        samples = _total(families, "statsd_exporter_samples")
        if _total(families, "statsd_exporter_events") == samples or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert samples > 0
    assert _total(families, "statsd_exporter_events") == samples  # every sample an event
    # every line but the empty one after each packet's final newline is a sample
    packets = _total(families, "statsd_exporter_udp_packets")
    assert _total(families, "statsd_exporter_lines") == samples + packets
    for errors in (
        "statsd_exporter_sample_errors",
        "statsd_exporter_tag_errors",
        "statsd_exporter_events_conflict",
        "statsd_exporter_udp_packet_drops",
    ):
        assert _total(families, errors) == 0, errors
    prefix = f"nsq_127_0_0_1_{d.http_port}_"
    for names, kind in ((COUNTERS, "counter"), (GAUGES, "gauge")):
        for name in names:
            series = prefix + name.replace(".", "_")
            assert series in families, series
            assert families[series][0] == kind, series
    message_count = families[prefix + "topic_se_message_count"][1]
    assert sum(message_count.values()) == 4  # the deltas summed: every publish counted once
