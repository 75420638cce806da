"""Registration is immediate, as Go nsqd's: a topic or channel created on nsqd (HTTP create, PUB,
SUB) is in lookupd's ``/lookup``, ``/topics`` and ``/channels`` right after nsqd's reply, and
its registration is gone right after its deletion on nsqd (through pnsq's lookupd, which placed
it, when it is the lookupd). Run for Go nsqd + Go nsqlookupd
(the reference), pnsq's nsqd + Go nsqlookupd and pnsq's nsqd + pnsq's lookupd.

"Gone" is what nsqlookupd 1.3.0 shows: the node is no longer a producer of the key (``/lookup``
producers, ``/debug``). Like Go's, the topic and channel *names* stay in ``/topics`` and
``/channels`` after the last producer unregisters them (only ``#ephemeral`` names go).

pnsq already did all of this when this test was written (nsqd's lookup client sends
REGISTER/UNREGISTER as soon as the broker's topics or channels change); it guards that.

Timing on a loaded 2-core machine: every operation is measured several times; the median must be
≤ 100 ms and every single one ≤ 450 ms (a registration on a timer or a heartbeat would be ≥ 500
ms; each takes a few ms on a quiet machine, but the suite's other workers can stall a daemon
for a few hundred).
"""

from __future__ import annotations

import http.client
import json
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from protocol import Pub, Sub
from tests.daemons import Daemon, go_lookupd, go_nsqd, pnsq_lookupd, pnsq_nsqd
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration

ROUNDS = 5
MEDIAN_MS = 100.0
WORST_MS = 450.0
SYSTEMS = {
    "go-nsqd+go-nsqlookupd": (go_nsqd, go_lookupd),
    "pnsq-nsqd+go-nsqlookupd": (pnsq_nsqd, go_lookupd),
    "pnsq-nsqd+pnsq-lookupd": (pnsq_nsqd, pnsq_lookupd),
}


class Lookupd:
    """lookupd's HTTP API over one kept-alive connection (polling costs ~1 ms)."""

    def __init__(self, daemon: Daemon, *, pnsq: bool) -> None:
        self.conn = http.client.HTTPConnection(daemon.http_address, timeout=5)
        self.pnsq = pnsq  # pnsq's lookupd: it places the node's topics

    def post(self, path: str) -> None:
        self.conn.request("POST", path)
        reply = self.conn.getresponse()
        body = reply.read()
        assert reply.status == 200, (path, reply.status, body)

    def get(self, path: str) -> tuple[int, dict[str, object]]:
        self.conn.request("GET", path, headers={"Accept": "application/vnd.nsq; version=1.0"})
        reply = self.conn.getresponse()
        body = reply.read()
        return reply.status, json.loads(body) if body else {}

    def producers(self, topic: str) -> list[object]:
        status, document = self.get(f"/lookup?topic={topic}")
        found = document.get("producers") if status == 200 else None
        return found if isinstance(found, list) else []

    def listed(self, topic: str, channel: str | None = None) -> bool:
        """The topic (channel) is in /topics, /lookup and /channels with this node producing."""
        if not self.producers(topic):
            return False
        topics = self.get("/topics")[1]["topics"]
        if channel is None:
            return topic in topics  # type: ignore[operator]
        channels = self.get(f"/channels?topic={topic}")[1]["channels"]
        looked_up = self.get(f"/lookup?topic={topic}")[1]["channels"]
        return channel in channels and channel in looked_up  # type: ignore[operator]

    def channel_produced(self, topic: str, channel: str) -> bool:
        """Some node registers ``channel`` (its key in /debug has a producer)."""
        return bool(self.get("/debug")[1].get(f"channel:{topic}:{channel}"))

    def close(self) -> None:
        self.conn.close()


@pytest.fixture(params=list(SYSTEMS))
def system(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Daemon, Lookupd]]:
    make_nsqd, make_lookupd = SYSTEMS[request.param]
    lookupd = make_lookupd(tmp_path / "lookupd").start()
    try:
        nsqd = make_nsqd(tmp_path / "nsqd", f"--lookupd-tcp-address={lookupd.tcp_address}")
        nsqd.start()
        client = Lookupd(lookupd, pnsq=make_lookupd is pnsq_lookupd)
        try:
            deadline = time.monotonic() + 15
            while not client.get("/nodes")[1]["producers"]:
                assert time.monotonic() < deadline, "nsqd never registered"
                time.sleep(0.05)
            yield nsqd, client
        finally:
            client.close()
            nsqd.stop()
    finally:
        lookupd.stop()


def post(nsqd: Daemon, path: str) -> None:
    conn = http.client.HTTPConnection(nsqd.http_address, timeout=5)
    try:
        conn.request("POST", path)
        reply = conn.getresponse()
        assert reply.status == 200, (path, reply.status, reply.read())
    finally:
        conn.close()


def channel_listed(lookupd: Lookupd, topic: str, channel: str) -> bool:
    return channel in lookupd.get(f"/channels?topic={topic}")[1]["channels"]  # type: ignore[operator]


def ms_until(check: Callable[[], bool], limit: float = 2.0) -> float:
    """Milliseconds from now until ``check()`` holds (polled back to back)."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < limit, "not within 2 s"
    return (time.monotonic() - start) * 1000


def one_round(
    nsqd: Daemon, lookupd: Lookupd, n: int, measure: Callable[[str, Callable[[], bool]], None]
) -> None:
    made, pub, sub = f"made{n}", f"pub{n}", f"sub{n}"
    post(nsqd, f"/topic/create?topic={made}")
    measure("topic create", lambda: lookupd.listed(made))
    post(nsqd, f"/channel/create?topic={made}&channel=c")
    measure("channel create", lambda: lookupd.listed(made, "c"))
    post(nsqd, f"/channel/delete?topic={made}&channel=c")
    measure("channel delete", lambda: not lookupd.channel_produced(made, "c"))
    if lookupd.pnsq:  # a topic pnsq's lookupd placed is deleted there (docs/cluster.md); the
        lookupd.post(f"/topic/delete?topic={made}")  # node refuses to delete its copy alone
    else:
        post(nsqd, f"/topic/delete?topic={made}")
    measure("topic delete", lambda: not lookupd.producers(made))

    client = RawClient(nsqd.tcp_address)
    try:
        client.send(Pub(pub, b"x"))
        assert client.read().data == b"OK"
        measure("PUB", lambda: lookupd.listed(pub))
        client.send(Sub(sub, "c#ephemeral"))
        assert client.read().data == b"OK"
        measure("SUB", lambda: lookupd.listed(sub, "c#ephemeral"))
    finally:
        client.close()
    # the last consumer of an ephemeral channel left: nsqd deletes it, lookupd drops the name
    measure("ephemeral channel gone", lambda: not channel_listed(lookupd, sub, "c#ephemeral"))


def test_registration_is_immediate(system: tuple[Daemon, Lookupd]) -> None:
    nsqd, lookupd = system
    timings: dict[str, list[float]] = {}

    def measure(what: str, check: Callable[[], bool]) -> None:
        timings.setdefault(what, []).append(ms_until(check))

    for n in range(ROUNDS):
        one_round(nsqd, lookupd, n, measure)
    for what, ms in timings.items():
        assert statistics.median(ms) <= MEDIAN_MS, (what, ms)
        assert max(ms) <= WORST_MS, (what, ms)
