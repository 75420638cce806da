"""Delivery details as Go nsqd 1.3.0, checked side by side with the real binary over the raw
protocol: where a timed-out message goes back, and how deferred messages are counted."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol import Dpub, Fin, Pub, Rdy, Req, Sub
from tests.daemons import Daemon, go_nsqd, pnsq_nsqd
from tests.rawclient import Frame, RawClient

pytestmark = pytest.mark.integration

MSG_TIMEOUT_MS = 1000  # the smallest msg_timeout Go nsqd takes in IDENTIFY


@pytest.fixture(params=["go-nsqd", "pnsq"])
def nsqd(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Daemon]:
    make = go_nsqd if request.param == "go-nsqd" else pnsq_nsqd
    daemon = make(tmp_path / "nsqd").start()
    try:
        yield daemon
    finally:
        daemon.stop()


def publish(nsqd: Daemon, *commands: Pub | Dpub) -> None:
    client = RawClient(nsqd.tcp_address)
    try:
        for command in commands:
            client.send(command)
            assert client.read(skip_heartbeats=True).data == b"OK"
    finally:
        client.close()


def consumer(nsqd: Daemon, topic: str) -> RawClient:
    client = RawClient(nsqd.tcp_address, timeout=10)
    assert client.identify(msg_timeout=MSG_TIMEOUT_MS).type == 0
    client.send(Sub(topic, "c"))
    assert client.read().data == b"OK"
    return client


def next_message(client: RawClient) -> Frame:
    frame = client.read(skip_heartbeats=True)
    assert frame.is_message, frame
    return frame


def counts(nsqd: Daemon, topic: str) -> dict[str, int]:
    url = f"http://{nsqd.http_address}/stats?format=json&topic={topic}"
    with urllib.request.urlopen(url, timeout=5) as reply:
        stats = json.loads(reply.read())
    (channel,) = [c for t in stats["topics"] if t["topic_name"] == topic for c in t["channels"]]
    keys = ("depth", "in_flight_count", "deferred_count")
    return {key: channel[key] for key in keys}


def test_a_timed_out_message_goes_behind_the_waiting_ones(nsqd: Daemon) -> None:
    publish(nsqd, Pub("t", b"first"))
    client = consumer(nsqd, "t")
    try:
        client.send(Rdy(1))
        assert next_message(client).body == b"first"
        publish(nsqd, Pub("t", b"second"))  # waits: RDY 1 is used by "first"
        time.sleep(MSG_TIMEOUT_MS / 1000 / 2)
        assert counts(nsqd, "t") == {"depth": 1, "in_flight_count": 1, "deferred_count": 0}
        got = next_message(client)  # after "first" timed out
        assert (got.body, got.attempts) == (b"second", 1)
        client.send(Fin(got.message_id))
        got = next_message(client)
        assert (got.body, got.attempts) == (b"first", 2)
        client.send(Fin(got.message_id))
    finally:
        client.close()


def wait_counts(nsqd: Daemon, topic: str, expected: dict[str, int]) -> None:
    deadline = time.monotonic() + 5
    while (found := counts(nsqd, topic)) != expected:
        assert time.monotonic() < deadline, found
        time.sleep(0.02)


def test_dpub_is_deferred_at_once(nsqd: Daemon) -> None:
    """A channel and no consumer: the DPUB is deferred (not depth) from the start."""
    for path in ("/topic/create?topic=d", "/channel/create?topic=d&channel=c"):
        url = f"http://{nsqd.http_address}{path}"
        with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=5):
            pass
    publish(nsqd, Dpub("d", 60_000, b"later"), Pub("d", b"now"))
    # Go nsqd copies a topic's message to its channels in a goroutine: under load its channel
    # shows the PUB a moment after the OK
    wait_counts(nsqd, "d", {"depth": 1, "in_flight_count": 0, "deferred_count": 1})
    client = consumer(nsqd, "d")
    try:
        client.send(Rdy(5))
        got = next_message(client)
        assert got.body == b"now"
        wait_counts(nsqd, "d", {"depth": 0, "in_flight_count": 1, "deferred_count": 1})
        client.send(Fin(got.message_id))
        wait_counts(nsqd, "d", {"depth": 0, "in_flight_count": 0, "deferred_count": 1})
    finally:
        client.close()


def test_a_delayed_req_is_deferred(nsqd: Daemon) -> None:
    publish(nsqd, Pub("r", b"m"))
    client = consumer(nsqd, "r")
    try:
        client.send(Rdy(1))
        got = next_message(client)
        assert counts(nsqd, "r") == {"depth": 0, "in_flight_count": 1, "deferred_count": 0}
        client.send(Req(got.message_id, 60_000))
        wait_counts(nsqd, "r", {"depth": 0, "in_flight_count": 0, "deferred_count": 1})
    finally:
        client.close()
