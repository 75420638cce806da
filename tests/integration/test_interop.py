"""Interop with the real stock clients, pynsq (PyPI) and go-nsq (Go module proxy), unchanged."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator

import pytest

from tests.daemons import Daemon
from tests.interop.drivers import CLIENTS, Driver

pytestmark = [pytest.mark.integration, pytest.mark.interop]


@pytest.fixture(params=CLIENTS)
def driver(request: pytest.FixtureRequest) -> Iterator[Driver]:
    d = Driver(request.param)
    try:
        yield d
    finally:
        d.cleanup()


def test_publish_before_subscribe(nsqd: Daemon, driver: Driver) -> None:
    pub = driver.run(driver.pub_argv(nsqd.tcp_address, "early", 10))
    assert pub.returncode == 0, pub.stderr
    sub = driver.run(driver.sub_argv(nsqd.tcp_address, "early", "ch", 10, timeout=20))
    assert sub.returncode == 0, sub.stderr
    assert sorted(d["body"] for d in sub.deliveries) == sorted(f"msg-{i}" for i in range(10))


@pytest.mark.parametrize("mode", ["pub", "mpub"])
def test_thousand_messages_arrive(nsqd: Daemon, driver: Driver, mode: str) -> None:
    pub = driver.run(driver.pub_argv(nsqd.tcp_address, f"k-{mode}", 1000, mode))
    assert pub.returncode == 0, pub.stderr
    assert pub.summary["published"] == 1000
    sub = driver.run(driver.sub_argv(nsqd.tcp_address, f"k-{mode}", "ch", 1000, timeout=30))
    assert sub.returncode == 0, sub.stderr
    bodies = [d["body"] for d in sub.deliveries]
    assert set(bodies) == {f"msg-{i}" for i in range(1000)}
    assert len(bodies) == 1000  # nothing redelivered: every FIN was accepted


def test_req_zero_redelivers_with_rising_attempts(nsqd: Daemon, driver: Driver) -> None:
    consumer = driver.start(
        driver.sub_argv(nsqd.tcp_address, "req", "ch", 5, requeue_until=3, timeout=30)
    )
    time.sleep(1.0)
    pub = driver.run(driver.pub_argv(nsqd.tcp_address, "req", 5))
    assert pub.returncode == 0, pub.stderr
    sub = Driver.finish(consumer)
    assert sub.returncode == 0, sub.stderr
    attempts: dict[str, list[int]] = defaultdict(list)
    for d in sub.deliveries:
        attempts[str(d["body"])].append(int(str(d["attempts"])))
    assert attempts == {f"msg-{i}": [1, 2, 3] for i in range(5)}


def test_heartbeats_keep_an_idle_consumer_connected(nsqd: Daemon, driver: Driver) -> None:
    consumer = driver.start(
        driver.sub_argv(nsqd.tcp_address, "idle", "ch", 1, heartbeat=1, idle=5, timeout=20)
    )
    time.sleep(6.0)
    pub = driver.run(driver.pub_argv(nsqd.tcp_address, "idle", 1))
    assert pub.returncode == 0, pub.stderr
    sub = Driver.finish(consumer)
    assert sub.returncode == 0, sub.stderr
    assert sub.first("idle_ok")["idle_ok"] is True, sub.lines
    assert [d["body"] for d in sub.deliveries] == ["msg-0"]


def test_dpub_is_delivered_after_the_delay(nsqd: Daemon, driver: Driver) -> None:
    consumer = driver.start(driver.sub_argv(nsqd.tcp_address, "later", "ch", 3, timeout=20))
    time.sleep(1.0)
    pub = driver.run(driver.pub_argv(nsqd.tcp_address, "later", 3, "dpub", defer_ms=1000))
    assert pub.returncode == 0, pub.stderr
    sub = Driver.finish(consumer)
    assert sub.returncode == 0, sub.stderr
    for d in sub.deliveries:
        waited_ns = int(str(d["received_ns"])) - int(str(d["timestamp"]))
        assert waited_ns >= 1_000_000_000, d


def test_binary_ids_with_space_and_newline_can_be_fined(nsqd: Daemon, driver: Driver) -> None:
    # ids are [u64 (partition << 50) + offset + 1][u64 trace]; offsets 9 and 31 give
    # ids whose bytes contain b"\n" (0x0a) and b" " (0x20), 2591 gives both.
    count = 2600
    pub = driver.run(driver.pub_argv(nsqd.tcp_address, "bin", count, "mpub"))
    assert pub.returncode == 0, pub.stderr
    sub = driver.run(driver.sub_argv(nsqd.tcp_address, "bin", "ch", count, timeout=60))
    assert sub.returncode == 0, sub.stderr
    ids = [bytes.fromhex(str(d["id_hex"])) for d in sub.deliveries]
    assert any(b"\n" in i for i in ids)
    assert any(b" " in i for i in ids)
    assert any(b" " in i and b"\n" in i for i in ids)
    assert len(ids) == count  # each FIN was accepted: no message came back
    log = nsqd.log_text()
    assert "E_FIN_FAILED" not in log
    assert "invalid message ID" not in log
