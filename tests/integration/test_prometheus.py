"""A real Prometheus server (Debian's) scrapes pnsq's /metrics every second; what its query API
returns must equal what pnsq's /stats?format=json reports.

The same harness also runs against Go nsqd 1.3.0 behind a stand-in exporter (a few lines below
that render its /stats in the lovoo/timonwong nsq_exporter names, the names pnsq's /metrics
uses): that proves the Prometheus plumbing on its own, so a failure of the pnsq case is pnsq's.

pnsq exports one series per partition (label ``partition``; the test topic has two); the
values of every series a selector returns are summed and compared with /stats' topic and
channel totals.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from protocol import Rdy, Sub
from tests.daemons import Daemon, Peer, go_nsqd, pnsq_nsqd, prometheus
from tests.rawclient import RawClient

pytestmark = [pytest.mark.integration]

TOPIC = "prom_topic"
CHANNEL = "prom_chan"
N = 7  # messages published
HELD = 2  # delivered to the consumer and never FINed: in flight
WAIT = 20.0  # bound on waiting for Prometheus to have scraped the target


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


class StandInExporter:
    """Serves /metrics for a Go nsqd by rendering its /stats?format=json (Go nsqd 1.3.0 has no
    /metrics of its own). Only the gauges this test queries."""

    def __init__(self, nsqd_http: str) -> None:
        nsqd = nsqd_http

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                stats = get_json(f"http://{nsqd}/stats?format=json&include_clients=false")
                lines = []
                for t in stats["topics"] or []:
                    tl = f'topic="{t["topic_name"]}",partition="0"'
                    lines.append(f"nsq_topic_message_count{{{tl}}} {t['message_count']}")
                    lines.append(f"nsq_topic_depth{{{tl}}} {t['depth']}")
                    for c in t["channels"]:
                        cl = f'{tl},channel="{c["channel_name"]}"'
                        lines.append(f"nsq_channel_depth{{{cl}}} {c['depth']}")
                        lines.append(f"nsq_channel_in_flight_count{{{cl}}} {c['in_flight_count']}")
                body = ("\n".join(lines) + "\n").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Setup:
    daemon: Daemon
    prom: Peer
    partitions: int


@pytest.fixture(scope="module", params=["go-nsqd+stand-in", "pnsq"])
def setup(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    path: Path = tmp_path_factory.mktemp("prom")
    if request.param == "pnsq":  # two partitions: Prometheus sees one series per partition
        daemon = pnsq_nsqd(path / "data", "--default-partitions=2").start()
    else:
        daemon = go_nsqd(path / "data").start()
    consumer: RawClient | None = None
    exporter: StandInExporter | None = None
    prom: Peer | None = None
    try:
        for i in range(N):  # one PUB each, so pnsq spreads them over its partitions
            pub = urllib.request.Request(
                f"http://{daemon.http_address}/pub?topic={TOPIC}", b"m%d" % i, method="POST"
            )
            with urllib.request.urlopen(pub, timeout=5) as r:
                assert r.read() == b"OK"
        consumer = RawClient(daemon.tcp_address)
        consumer.identify()
        consumer.send(Sub(TOPIC, CHANNEL), Rdy(HELD))
        assert consumer.read().data == b"OK"
        for _ in range(HELD):
            assert consumer.read(skip_heartbeats=True).is_message
        target = daemon.http_address
        if request.param != "pnsq":
            exporter = StandInExporter(daemon.http_address)
            target = exporter.address
        prom = prometheus(path / "prometheus", [target]).start()
        wait_until_scraped(prom)
        yield Setup(daemon, prom, 2 if request.param == "pnsq" else 1)
    finally:
        if prom is not None:
            prom.stop()
        if exporter is not None:
            exporter.close()
        if consumer is not None:
            consumer.close()
        daemon.stop()


def query(prom: Peer, promql: str) -> list[dict[str, Any]]:
    """An instant query; the result vector (one entry per series)."""
    q = urllib.parse.urlencode({"query": promql})
    reply = get_json(f"{prom.url}/api/v1/query?{q}")
    assert reply["status"] == "success", reply
    assert reply["data"]["resultType"] == "vector", reply
    return list(reply["data"]["result"])


def total(prom: Peer, promql: str, expected: float) -> float | None:
    """The sum of the values of every series ``promql`` selects (None: no series), polled for
    a few scrapes until it equals ``expected``, so one slow scrape cannot fail the test."""
    deadline = time.monotonic() + 5.0
    while True:
        series = query(prom, promql)
        got = sum(float(s["value"][1]) for s in series) if series else None
        if got == expected or time.monotonic() > deadline:
            return got
        time.sleep(0.25)


def wait_until_scraped(prom: Peer) -> None:
    """Until the target is up and its channel series are stored, at most WAIT seconds."""
    deadline = time.monotonic() + WAIT
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = get_json(f"{prom.url}/api/v1/targets?state=active")
            targets = last["data"]["activeTargets"]
            errors = [t["lastError"] for t in targets if t["health"] == "down"]
            if any("HTTP status" in e for e in errors):  # no /metrics there: no use waiting
                raise AssertionError(f"scrape failed: {errors}")
            if (
                targets
                and all(t["health"] == "up" for t in targets)
                and query(prom, f'nsq_channel_depth{{topic="{TOPIC}",channel="{CHANNEL}"}}')
            ):
                return
        except (OSError, KeyError):  # URLError is an OSError
            pass
        time.sleep(0.2)
    raise AssertionError(f"target not scraped within {WAIT}s: {last}\n{prom.log_text()[-3000:]}")


def test_one_series_per_partition(setup: Setup) -> None:
    series = query(setup.prom, f'nsq_topic_message_count{{topic="{TOPIC}"}}')
    partitions = sorted(s["metric"]["partition"] for s in series)
    assert partitions == [str(p) for p in range(setup.partitions)]
    assert all(float(s["value"][1]) > 0 for s in series)  # the PUBs were spread


def nsqd_stats(daemon: Daemon) -> dict[str, Any]:
    stats = get_json(f"http://{daemon.http_address}/stats?format=json&topic={TOPIC}")
    [topic] = stats["topics"]
    return dict(topic)


def test_scrape_target_is_up(setup: Setup) -> None:
    assert total(setup.prom, 'up{job="pnsq"}', 1) == 1
    [up] = query(setup.prom, "up")
    assert up["metric"]["job"] == "pnsq"


def test_topic_message_count_matches_stats(setup: Setup) -> None:
    stats = nsqd_stats(setup.daemon)
    assert stats["message_count"] == N
    promql = f'nsq_topic_message_count{{topic="{TOPIC}"}}'
    assert total(setup.prom, promql, stats["message_count"]) == stats["message_count"]


def test_topic_depth_matches_stats(setup: Setup) -> None:
    stats = nsqd_stats(setup.daemon)
    promql = f'nsq_topic_depth{{topic="{TOPIC}"}}'
    assert total(setup.prom, promql, stats["depth"]) == stats["depth"]


def test_channel_depth_and_in_flight_match_stats(setup: Setup) -> None:
    [channel] = nsqd_stats(setup.daemon)["channels"]
    assert (channel["depth"], channel["in_flight_count"]) == (N - HELD, HELD)
    sel = f'{{topic="{TOPIC}",channel="{CHANNEL}"}}'
    depth, in_flight = channel["depth"], channel["in_flight_count"]
    assert total(setup.prom, f"nsq_channel_depth{sel}", depth) == depth
    assert total(setup.prom, f"nsq_channel_in_flight_count{sel}", in_flight) == in_flight
