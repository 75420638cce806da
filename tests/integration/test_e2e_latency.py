"""``--e2e-processing-latency-percentile`` / ``--e2e-processing-latency-window-time``: the
``e2e_processing_latency`` of each topic and channel in ``/stats`` (JSON and text) has the real
Go nsqd 1.3.0's shape when both run with the same flags and see the same traffic, and pnsq's
``/metrics`` exports it; without the flags nothing is measured (nsqd's default)."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from protocol import Fin, Rdy, Sub
from tests.daemons import Daemon, go_nsqd, pnsq_nsqd
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration

FLAGS = (
    "--e2e-processing-latency-percentile=0.5,0.99",
    "--e2e-processing-latency-percentile=0.95",
    "--e2e-processing-latency-window-time=30s",
)
QUANTILES = [0.99, 0.95, 0.5]  # nsqd sorts them, largest first
N = 20


def fetch(daemon: Daemon, path: str) -> bytes:
    with urllib.request.urlopen(f"http://{daemon.http_address}{path}", timeout=10) as reply:
        return bytes(reply.read())


def traffic(daemon: Daemon) -> None:
    """N messages to ``lat`` read and FINed on ``done``; channel ``idle`` exists but reads
    nothing; topic ``lonely`` has no channel."""
    base = f"http://{daemon.http_address}"
    creates = ["/topic/create?topic=lat", "/topic/create?topic=lonely"]
    # the channels before the messages, so both get every one
    creates += [f"/channel/create?topic=lat&channel={c}" for c in ("done", "idle")]
    for path in creates:
        urllib.request.urlopen(urllib.request.Request(base + path, method="POST"), timeout=10)
    for topic in ("lat", "lonely"):
        request = urllib.request.Request(
            f"http://{daemon.http_address}/mpub?topic={topic}",
            b"\n".join(b"m%d" % i for i in range(N)),
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            assert reply.read() == b"OK"
    consumer = RawClient(daemon.tcp_address)
    try:
        consumer.send(Sub("lat", "done"), Rdy(N))
        assert consumer.read().data == b"OK"
        for _ in range(N):
            frame = consumer.read(skip_heartbeats=True)
            assert frame.is_message
            consumer.send(Fin(frame.message_id))
        consumer.send(b"NOP\n")
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Daemon]]:
    work: Path = tmp_path_factory.mktemp("e2e")
    daemons = {"go": go_nsqd(work / "go", *FLAGS), "pnsq": pnsq_nsqd(work / "pnsq", *FLAGS)}
    try:
        for daemon in daemons.values():
            daemon.start()
            traffic(daemon)
        yield daemons
    finally:
        for daemon in daemons.values():
            daemon.stop()


def latencies(daemon: Daemon) -> dict[str, Any]:
    """``{"lat": ..., "lat/done": ..., ...}``: every e2e_processing_latency in ``/stats``."""
    stats = json.loads(fetch(daemon, "/stats?format=json"))
    found = {}
    for topic in stats["topics"]:
        found[topic["topic_name"]] = topic["e2e_processing_latency"]
        for channel in topic["channels"]:
            key = f"{topic['topic_name']}/{channel['channel_name']}"
            found[key] = channel["e2e_processing_latency"]
    return found


def shape(latency: dict[str, Any]) -> Any:
    """The JSON shape: keys, the count, the quantiles, and each value's type and sign."""
    percentiles = latency["percentiles"]
    if percentiles is not None:
        percentiles = [
            (sorted(p), p["quantile"], type(p["value"]).__name__, p["value"] > 0)
            for p in percentiles
        ]
    return sorted(latency), latency["count"], percentiles


def test_stats_json_has_go_nsqds_shape(pair: dict[str, Daemon]) -> None:
    go, ours = latencies(pair["go"]), latencies(pair["pnsq"])
    assert set(go) == set(ours) == {"lat", "lat/done", "lat/idle", "lonely"}
    for key in go:
        assert shape(ours[key]) == shape(go[key]), key
    # the concrete expectations behind the comparison
    assert ours["lonely"] == {"count": 0, "percentiles": None}
    assert ours["lat/idle"]["count"] == 0
    assert [p["value"] for p in ours["lat/idle"]["percentiles"]] == [0, 0, 0]
    done = ours["lat/done"]
    assert done["count"] == N
    assert [p["quantile"] for p in done["percentiles"]] == QUANTILES
    values = [p["value"] for p in done["percentiles"]]
    assert values == sorted(values, reverse=True)
    assert ours["lat"]["count"] == N  # the topic: its channels together


def test_stats_text_prints_the_percentiles_as_nsqd(pair: dict[str, Daemon]) -> None:
    human = r"[0-9]+\.[0-9](?:ns|us|ms|s)"
    columns = re.compile(rf"e2e%: ({human}(?:, {human})*)?$")
    for daemon in pair.values():
        lines = fetch(daemon, "/stats").decode().splitlines()
        found = {}
        for line in lines:
            name = re.search(r"\[(\S+)\s*\]", line)
            if name and "e2e%:" in line:
                match = columns.search(line)
                assert match, line
                found[name[1]] = (match[1] or "").split(", ") if match[1] else []
        assert len(found["lat"]) == len(found["done"]) == len(found["idle"]) == 3, found
        assert found["lonely"] == []
        assert found["idle"] == ["0.0ns"] * 3


def test_metrics_export_the_percentiles(pair: dict[str, Daemon]) -> None:
    text = fetch(pair["pnsq"], "/metrics").decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    stats = latencies(pair["pnsq"])
    channel = families["nsq_channel_e2e_processing_latency_seconds"]
    assert channel.type == "summary"
    samples = {
        (s.name, s.labels.get("channel"), s.labels.get("quantile")): s.value
        for s in channel.samples
    }
    for item in stats["lat/done"]["percentiles"]:
        key = ("nsq_channel_e2e_processing_latency_seconds", "done", format(item["quantile"], "g"))
        assert samples[key] == pytest.approx(item["value"] / 1e9)
    assert samples[("nsq_channel_e2e_processing_latency_seconds_count", "done", None)] == N
    topic = families["nsq_topic_e2e_processing_latency_seconds"]
    topics = {s.labels["topic"] for s in topic.samples}
    assert topics == {"lat"}  # "lonely" has no channel, so no latency


def test_not_measured_without_the_flag(nsqd: Daemon) -> None:
    traffic(nsqd)
    assert set(map(json.dumps, latencies(nsqd).values())) == {
        json.dumps({"count": 0, "percentiles": None})
    }
    assert "e2e_processing_latency_seconds{" not in fetch(nsqd, "/metrics").decode()
