"""pnsq's Prometheus ``/metrics``: after a known workload (two partitions, a consumer that holds,
finishes and requeues), every metric has the exporters' name and labels, and its values agree
with ``/stats?format=json`` (per partition, and summed over partitions)."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from protocol import Fin, Pub, Rdy, Req, Sub
from tests.daemons import Daemon, pnsq_nsqd
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration

TOPIC, CHANNEL, N = "mt", "mc", 6

TOPIC_GAUGES = [
    "nsq_topic_depth",
    "nsq_topic_backend_depth",
    "nsq_topic_message_count",
    "nsq_topic_message_bytes",
]
CHANNEL_GAUGES = {
    "nsq_channel_depth": "depth",
    "nsq_channel_backend_depth": "backend_depth",
    "nsq_channel_in_flight_count": "in_flight_count",
    "nsq_channel_deferred_count": "deferred_count",
    "nsq_channel_message_count": "message_count",
    "nsq_channel_requeue_count": "requeue_count",
    "nsq_channel_timeout_count": "timeout_count",
    "pnsq_channel_confirmed_offset": "confirmed_offset",
    "pnsq_channel_next_offset": "next_offset",
    "pnsq_channel_lag": "lag",
}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, RawClient]]:
    path: Path = tmp_path_factory.mktemp("metrics")
    d = pnsq_nsqd(path / "data", "--default-partitions=2", "--sync-timeout=100ms").start()
    producer = consumer = None
    try:
        producer = RawClient(d.tcp_address)
        producer.identify()
        for i in range(N):  # one PUB per partition in turn: 3 and 3
            producer.send(Pub(TOPIC, b"m%d" % i))
            assert producer.read().data == b"OK"
        consumer = RawClient(d.tcp_address)
        consumer.identify()
        consumer.send(Sub(TOPIC, CHANNEL), Rdy(3))
        assert consumer.read().data == b"OK"
        first, second, _held = (consumer.read(skip_heartbeats=True) for _ in range(3))
        consumer.send(Rdy(0), Fin(first.message_id), Req(second.message_id, 600_000))
        time.sleep(0.3)  # steady: one FINed, one deferred, one in flight; an fsync has run
        yield d, consumer
    finally:
        for client in (producer, consumer):
            if client is not None:
                client.close()
        d.stop()


def scrape(d: Daemon, accept: str | None = None) -> tuple[str, str, Any]:
    headers = {"Accept": accept} if accept else {}
    req = urllib.request.Request(f"http://{d.http_address}/metrics", headers=headers)
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.read().decode(), r.headers.get("Content-Type", ""), r.headers


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name].append((dict(sample.labels), sample.value))
    return out


def stats(d: Daemon) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{d.http_address}/stats?format=json", timeout=5) as r:
        doc = json.loads(r.read())
    assert isinstance(doc, dict)
    return doc


def test_content_type_and_headers(loaded: tuple[Daemon, RawClient]) -> None:
    d, _ = loaded
    _, content_type, headers = scrape(d)
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert headers.get("X-Nsq-Content-Type") is None
    text, content_type, _ = scrape(d, "application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert text.rstrip().endswith("# EOF")


def test_names_and_labels(loaded: tuple[Daemon, RawClient]) -> None:
    d, _ = loaded
    got = samples(scrape(d)[0])
    for name in TOPIC_GAUGES:
        labels = [lbl for lbl, _ in got[name] if lbl["topic"] == TOPIC]
        assert sorted(lbl["partition"] for lbl in labels) == ["0", "1"], name
        assert all(set(lbl) == {"topic", "partition", "paused"} for lbl in labels), name
    for name in CHANNEL_GAUGES:
        labels = [lbl for lbl, _ in got[name] if lbl["topic"] == TOPIC]
        assert len(labels) == 2, name
        assert all(set(lbl) == {"topic", "partition", "channel", "paused"} for lbl in labels)
    for name in ("nsq_channel_client_count", "nsq_channel_clients"):
        [(labels, value)] = got[name]
        assert labels == {"topic": TOPIC, "channel": CHANNEL, "paused": "false"}
        assert value == 1
    assert got["nsq_topic_channel_count"] == [({"topic": TOPIC, "paused": "false"}, 1.0)]
    assert got["nsqd_info"] == [({"version": "1.3.0", "health": "OK"}, 1.0)]
    for name in ("pnsq_partition_start_offset", "pnsq_partition_end_offset"):
        assert sorted(lbl["partition"] for lbl, _ in got[name]) == ["0", "1"]
    connections = {lbl["type"]: v for lbl, v in got["pnsq_connections"]}
    assert connections == {"producer": 1, "consumer": 1, "idle": 0}
    assert got["pnsq_publish_latency_seconds_count"][0][1] >= N
    assert got["pnsq_fsync_latency_seconds_count"][0][1] >= 1
    assert "process_resident_memory_bytes" in got


def test_values_agree_with_stats(loaded: tuple[Daemon, RawClient]) -> None:
    d, _ = loaded
    got = samples(scrape(d)[0])
    [topic] = stats(d)["topics"]
    assert topic["message_count"] == N

    def value(name: str, **labels: str) -> float:
        [v] = [v for lbl, v in got[name] if all(lbl.get(k) == x for k, x in labels.items())]
        return v

    for part in topic["partitions"]:
        p = str(part["partition"])
        assert value("nsq_topic_depth", topic=TOPIC, partition=p) == part["depth"]
        assert value("nsq_topic_message_count", topic=TOPIC, partition=p) == part["message_count"]
        assert value("pnsq_partition_end_offset", topic=TOPIC, partition=p) == part["end_offset"]
    for key, name in (("message_count", "nsq_topic_message_count"), ("depth", "nsq_topic_depth")):
        assert sum(v for lbl, v in got[name] if lbl["topic"] == TOPIC) == topic[key]
    [channel] = topic["channels"]
    counts = [channel[k] for k in ("in_flight_count", "deferred_count", "requeue_count")]
    assert counts == [1, 1, 1]
    assert channel["depth"] == N - 3
    for part in channel["partitions"]:
        p = str(part["partition"])
        for name, key in CHANNEL_GAUGES.items():
            assert value(name, topic=TOPIC, channel=CHANNEL, partition=p) == part[key], name
    for name, key in CHANNEL_GAUGES.items():
        if name.startswith("nsq_"):
            total = sum(v for lbl, v in got[name] if lbl["channel"] == CHANNEL)
            assert total == channel[key], name


def test_pause_shows_in_the_paused_label(loaded: tuple[Daemon, RawClient]) -> None:
    d, _ = loaded
    req = urllib.request.Request(
        f"http://{d.http_address}/channel/pause?topic={TOPIC}&channel={CHANNEL}", method="POST"
    )
    urllib.request.urlopen(req, timeout=5).close()
    try:
        got = samples(scrape(d)[0])
        assert {lbl["paused"] for lbl, _ in got["nsq_channel_depth"]} == {"true"}
        assert {lbl["paused"] for lbl, _ in got["nsq_topic_depth"]} == {"false"}
    finally:
        unpause = urllib.request.Request(
            f"http://{d.http_address}/channel/unpause?topic={TOPIC}&channel={CHANNEL}",
            method="POST",
        )
        urllib.request.urlopen(unpause, timeout=5).close()


def test_dashboard_uses_exported_names(loaded: tuple[Daemon, RawClient]) -> None:
    d, _ = loaded
    exported = set(samples(scrape(d)[0]))
    dashboard = json.loads(
        (Path(__file__).parents[2] / "docs" / "grafana-dashboard.json").read_text()
    )
    used = {
        name
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        for name in re.findall(r"\b((?:nsq|pnsq|nsqd|process)_[a-z_]+)\b", target["expr"])
    }
    assert used
    assert used <= exported, used - exported
