"""Registrations and placements are pushed, not polled: a topic a PUB creates is in lookupd's
``/lookup`` within milliseconds (an nsqd used to diff its registrations every 0.5 s), and a
topic created on lookupd reaches its nodes as soon as the decision is on disk (they used to
poll every second). Latencies are measured over many topics and compared with bounds far below
what the timers allowed; the numbers are printed for the record."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.daemons import Daemon, go_lookupd, pnsq_lookupd, pnsq_nsqd
from tests.integration.lookupd_helpers import get_json, lookup, post, request, wait_for

pytestmark = pytest.mark.integration

TOPICS = 20


@dataclass
class Cluster:
    lookupd: Daemon
    node: Daemon


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    work = tmp_path_factory.mktemp("push")
    lookupd = pnsq_lookupd(work / "lookupd").start()
    node = pnsq_nsqd(work / "n", f"--lookupd-tcp-address={lookupd.tcp_address}").start()
    try:
        wait_for(lambda: get_json(lookupd, "/nodes")["producers"], what="registration")
        yield Cluster(lookupd, node)
    finally:
        node.stop()
        assert lookupd.stop() == 0  # a held long-poll does not stall a clean exit


def _until(check: Callable[[], object], timeout: float = 5.0) -> float:
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout
        time.sleep(0.002)
    return time.monotonic() - started


def _report(what: str, latencies: list[float]) -> float:
    ordered = sorted(latencies)
    median = statistics.median(ordered)
    print(f"{what}: median {median * 1000:.1f} ms, max {ordered[-1] * 1000:.1f} ms")
    return median


def test_a_topic_created_by_a_publish_is_registered_at_once(cluster: Cluster) -> None:
    latencies = []
    for i in range(TOPICS):
        topic = f"pushed{i}"
        started = time.monotonic()
        assert post(cluster.node, f"/pub?topic={topic}", b"x") == (200, b"OK")
        _until(lambda t=topic: (lookup(cluster.lookupd, t) or {}).get("producers"))
        latencies.append(time.monotonic() - started)
    assert _report("PUB to /lookup", latencies) < 0.15  # the 0.5 s diff timer: ~0.25 s or more


def test_a_topic_created_on_lookupd_reaches_the_node_at_once(cluster: Cluster) -> None:
    latencies = []
    for i in range(TOPICS // 2):
        topic = f"placed{i}"
        started = time.monotonic()
        assert post(cluster.lookupd, f"/topic/create?topic={topic}") == (200, b"")
        url = f"http://{cluster.node.http_address}/partitions?topic={topic}"
        _until(lambda u=url: request(u, "GET", {})[0] == 200)
        latencies.append(time.monotonic() - started)
    assert _report("/topic/create to the node", latencies) < 0.25  # 1 s polling: ~0.5 s


def test_go_nsqlookupd_gets_registrations_as_they_change(tmp_path: Path) -> None:
    """Registration on change holds with a stock Go nsqlookupd 1.3.0 too: each topic or channel
    created or deleted on nsqd shows in Go's /debug at once (the old 0.5 s timer: ~500 ms)."""
    go = go_lookupd(tmp_path / "go-lookupd").start()
    node = pnsq_nsqd(tmp_path / "node", f"--lookupd-tcp-address={go.tcp_address}").start()

    def producers(key: str) -> int:
        return len(get_json(go, "/debug").get(key, []))

    try:
        wait_for(lambda: get_json(go, "/nodes")["producers"], what="the node")
        latencies: list[float] = []
        for i in range(10):
            topic, channel = f"go{i}", "c"
            topic_key, channel_key = f"topic:{topic}:", f"channel:{topic}:{channel}"
            steps = [  # (nsqd's HTTP call, Go's registration key, its producers after it)
                (f"/topic/create?topic={topic}", topic_key, 1),
                (f"/channel/create?topic={topic}&channel={channel}", channel_key, 1),
                (f"/channel/delete?topic={topic}&channel={channel}", channel_key, 0),
                (f"/topic/delete?topic={topic}", topic_key, 0),
            ]
            for path, key, count in steps:
                started = time.monotonic()
                assert post(node, path)[0] == 200, path
                _until(lambda k=key, n=count: producers(k) == n)
                latencies.append(time.monotonic() - started)
        assert _report("nsqd change to Go nsqlookupd", latencies) < 0.15
    finally:
        node.stop()
        go.stop()
