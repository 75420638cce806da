"""Continuous load for the cluster-operation fault scenarios (``test_cluster_ops_faults.py``).

Two topics, each partition with two copies:

* :data:`OPS` (:data:`OPS_PARTITIONS` partitions): stock go-nsq producers
  (:class:`GoLoad`, ``gonsq-interop pub -retry`` runs one after another, each on a live node,
  which forwards a publish to a partition's leader) and pnsq's client (:class:`Lanes`, one
  publisher per partition) publish; the real pynsq ``Reader`` (:class:`PynsqReader`, through
  lookupd's ``/lookup``) consumes channel ``py``;
* :data:`ORD` (:data:`ORD_PARTITIONS` partitions, ``orderedmulti``): pnsq's client publishes
  (one publisher per partition) and consumes channel ``ord`` with ``SUB_ORDERED``
  (:class:`OrderedReader`).

Each pnsq publisher sends ``<name>-<i>`` with ``i`` rising and waits for each acknowledgement
(its client retries a publish with the same numbers: stored once),
so the gap between two acknowledgements of one partition is the time it could not be written
to. :class:`OfflineWatch` polls lookupd's ``/lookup`` for a partition no leader serves.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from pnsq.client import Producer, open_consumer
from pnsq.client.errors import ConnectionClosedError, NsqError
from pnsq.client.numbering import Numbering
from tests.daemons import Daemon
from tests.fault.harness import FaultCluster, GoPublisher, _PublisherThread
from tests.fault.numbered import PUBLISH_FAILED, REOPEN_AFTER, open_numbered
from tests.integration.lookupd_helpers import post, request, wait_for

OPS, OPS_PARTITIONS = "ops", 12
ORD, ORD_PARTITIONS = "ord", 4
PY_CHANNEL, ORD_CHANNEL = "py", "ord"
LANE_PAUSE = 0.1  # s between a pnsq publisher's acknowledgement and its next publish
GO_RUN, GO_PAUSE = 50, 0.5  # PUBs per go-nsq run, s between runs
LANE_REPLY_TIMEOUT = 10.0  # s without a reply before a pnsq publisher's client retries
PYNSQ_DRIVER = Path(__file__).parent.parent / "interop" / "pynsq_driver.py"


def control(cluster: FaultCluster, method: str, path: str) -> tuple[int, Any]:
    """A cluster-control call on lookupd (with the credential when secure): status, JSON."""
    url = f"http://{cluster.lookupd.http_address}{path}"
    status, body, _ = request(url, method, cluster.lookupd_headers)
    return status, json.loads(body) if body else None


def create_topics(cluster: FaultCluster) -> None:
    """:data:`OPS` and :data:`ORD` with two copies of every partition in sync, and their
    channels (created before any publish, so each gets every message)."""
    for topic, count, extra in (
        (OPS, OPS_PARTITIONS, ""),
        (ORD, ORD_PARTITIONS, "&orderedmulti=true"),
    ):
        query = f"/topic/create?topic={topic}&partition_num={count}&replicator=2{extra}"
        assert post(cluster.lookupd, query) == (200, b"")
        cluster.partition_counts[topic] = count
        cluster.wait_in_sync(topic)
    node = cluster.nodes[0]
    for topic, channel in ((OPS, PY_CHANNEL), (ORD, ORD_CHANNEL)):
        assert post(node, f"/channel/create?topic={topic}&channel={channel}") == (200, b"")


def live(cluster: FaultCluster) -> list[Daemon]:
    """The nodes running and not marked unreachable."""
    return [
        n
        for n in cluster.nodes
        if n.proc is not None and n.proc.poll() is None and id(n) not in cluster.unreachable
    ]


@dataclass
class Lanes(_PublisherThread):
    """pnsq's client publishing to every partition of ``topics`` (one publisher each, routed
    through lookupd): idempotent, one numbering per partition for the whole run, each publish
    retried by the client itself (:mod:`tests.fault.numbered`); a publish that failed for good
    is not sent again (the next one carries a new body)."""

    cluster: FaultCluster
    topics: dict[str, int]  # topic -> partitions
    name: str
    #: (topic, partition) -> the acknowledgement times
    acks: dict[tuple[str, int], list[float]] = field(default_factory=lambda: defaultdict(list))
    bodies: dict[str, set[bytes]] = field(default_factory=lambda: defaultdict(set))
    #: publishes that failed for good (the client's retries spent): not acknowledged
    failed: int = 0
    #: messages the leaders answered ``DUPLICATE`` (a retry of a publish stored already)
    told_duplicate: int = 0
    #: tries after a failure, by the client itself
    retried: int = 0

    async def _main(self) -> None:
        async with trio.open_nursery() as nursery:
            for topic, count in self.topics.items():
                for partition in range(count):
                    nursery.start_soon(self._lane, topic, partition)

    async def _lane(self, topic: str, partition: int) -> None:
        prefix = f"{self.name}{topic}{partition}"
        sequence = itertools.count()
        numbering: Numbering | None = None
        while not self._stop.is_set():
            lookupd = self.cluster.lookupd.http_address
            try:
                async with open_numbered(
                    live(self.cluster)[0], lookupd, numbering, LANE_REPLY_TIMEOUT
                ) as producer:
                    numbering = producer.numbering
                    try:
                        await self._publish(producer, lookupd, topic, partition, prefix, sequence)
                    finally:
                        self.told_duplicate += producer.stats["duplicates"]
                        self.retried += producer.stats["retries"]
            except (OSError, ConnectionClosedError, NsqError) as exc:
                self.refused.append((time.monotonic(), f"reconnect: {exc!s:.70}"))
                await trio.sleep(0.1)

    async def _publish(
        self,
        producer: Producer,
        lookupd: str,
        topic: str,
        partition: int,
        prefix: str,
        sequence: Iterator[int],
    ) -> None:
        """Publish ``<prefix>-<i>`` until stopped, or until publishes keep failing for good
        or the cluster answers on another lookupd (the caller opens a producer again)."""
        failures = 0
        while not self._stop.is_set() and failures < REOPEN_AFTER:
            body = f"{prefix}-{next(sequence)}".encode()
            sent = time.monotonic()
            try:
                await producer.publish(topic, body, partition=partition)
            except PUBLISH_FAILED as exc:
                self.failed += 1
                self.refused.append((time.monotonic(), str(exc)[:80]))
                failures += 1
                if self.cluster.lookupd.http_address != lookupd:
                    return
                await trio.sleep(0.05)
                continue
            failures = 0
            now = time.monotonic()
            self.acked.append((body, sent, now))
            self.acks[topic, partition].append(now)
            self.bodies[topic].add(body)
            await trio.sleep(LANE_PAUSE)

    def longest_gap(self, until: float) -> float:
        """The longest time one partition went without an acknowledgement: between two of
        them, or from its last one to ``until`` (when the publishers stopped)."""
        longest = 0.0
        for topic, count in self.topics.items():
            for partition in range(count):
                marks = [*self.acks.get((topic, partition), []), until]
                gaps = (b - a for a, b in itertools.pairwise(marks))
                longest = max(longest, *gaps, 0.0)
        return longest


class GoLoad:
    """go-nsq's stock producer: runs of :data:`GO_RUN` PUBs (``-retry``) to :data:`OPS`, one
    after another, each on the next live node, until :meth:`stop`."""

    def __init__(self, cluster: FaultCluster, name: str) -> None:
        self.cluster, self.name = cluster, name
        self.acked: set[bytes] = set()
        self.errors: list[str] = []
        self.runs = 0
        self.current: GoPublisher | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="GoLoad", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            nodes = live(self.cluster)
            node = nodes[self.runs % len(nodes)]
            run = self.current = GoPublisher(node, f"{self.name}r{self.runs}", GO_RUN, OPS)
            self.runs += 1
            out, err = run.proc.communicate(timeout=300)
            lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
            done = int(lines[-1]["published"]) if lines else 0
            self.acked |= {f"{run.name}-{i}".encode() for i in range(done)}
            if run.proc.returncode != 0:
                self.errors.append(f"{node.tcp_address}: {lines[-1:]} {err[-300:]}")
            self._stop.wait(GO_PAUSE)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(320)
        assert not self._thread.is_alive(), "a go-nsq run did not end"

    def abort(self) -> None:
        """Stop at once (a failed round): the current run killed."""
        self._stop.set()
        if self.current is not None and self.current.proc.poll() is None:
            self.current.proc.kill()
        self._thread.join(10)


class PynsqReader:
    """The real pynsq ``Reader`` on :data:`OPS`/:data:`PY_CHANNEL` through every lookupd (a
    subprocess, ``tests/interop/pynsq_driver.py sub --lookupd``); counts every delivery."""

    def __init__(self, cluster: FaultCluster) -> None:
        argv = [
            sys.executable,
            str(PYNSQ_DRIVER),
            "sub",
            f"--lookupd={','.join(d.http_address for d in cluster.lookupds)}",
            f"--topic={OPS}",
            f"--channel={PY_CHANNEL}",
            f"--count={1 << 40}",
            "--timeout=3600",
        ]
        self._deliveries: Counter[bytes] = Counter()
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        self._thread = threading.Thread(target=self._read, name="PynsqReader", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            doc = json.loads(line)
            if "body" in doc:
                with self._lock:
                    self._deliveries[doc["body"].encode()] += 1

    def deliveries(self) -> Counter[bytes]:
        with self._lock:
            return self._deliveries.copy()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(15)
        self._thread.join(15)


@dataclass
class OrderedReader(_PublisherThread):
    """pnsq's client on :data:`ORD`/:data:`ORD_CHANNEL` with ``SUB_ORDERED`` through lookupd:
    every delivery, per partition, in the order they came."""

    cluster: FaultCluster
    received: dict[int, list[bytes]] = field(default_factory=lambda: defaultdict(list))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    async def _main(self) -> None:
        async with open_consumer(
            live(self.cluster)[0].tcp_address,
            ORD,
            ORD_CHANNEL,
            lookupd_http_address=self.cluster.lookupd.http_address,
            ordered=True,
            max_in_flight=ORD_PARTITIONS,
        ) as consumer:
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:

                    async def watch() -> None:
                        while not self._stop.is_set():
                            await trio.sleep(0.1)
                        scope.cancel()

                    nursery.start_soon(watch)
                    async for message in consumer:
                        with self._lock:
                            self.received[message.partition].append(message.body)
                        await message.finish()

    def deliveries(self) -> Counter[bytes]:
        with self._lock:
            return Counter(body for bodies in self.received.values() for body in bodies)

    def out_of_order(self) -> list[tuple[int, bytes, bytes]]:
        """Per partition, a message delivered for the first time after a later one of the same
        publisher (redeliveries of earlier ones aside): ``(partition, later, earlier)``."""
        found = []
        for partition, bodies in self.received.items():
            last: dict[str, tuple[int, bytes]] = {}
            seen: set[bytes] = set()
            for body in bodies:
                if body in seen:
                    continue
                seen.add(body)
                name, number = body.decode().rsplit("-", 1)
                before = last.get(name)
                if before is not None and int(number) < before[0]:
                    found.append((partition, before[1], body))
                last[name] = (int(number), body)
        return found


class OfflineWatch:
    """Polls lookupd's ``/lookup`` of both topics every 0.2 s: a partition it names no node
    for has no leader a client can find (an unanswered poll, lookupd down, counts as nothing;
    so does the time :attr:`paused` is set)."""

    def __init__(self, cluster: FaultCluster) -> None:
        self.cluster = cluster
        self.since: dict[tuple[str, int], float] = {}
        self.longest = 0.0
        self.missed: Counter[tuple[str, int]] = Counter()
        #: set while lookupd restarts: until every node registered again it names only some
        #: partitions, as nsqlookupd does; the nodes serve them all the while
        self.paused = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="OfflineWatch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            if self.paused.is_set():
                self.since.clear()
                continue
            for topic, count in ((OPS, OPS_PARTITIONS), (ORD, ORD_PARTITIONS)):
                url = f"http://{self.cluster.lookupd.http_address}/lookup?topic={topic}"
                try:
                    status, body, _ = request(url)
                except OSError:
                    continue
                if status != 200:
                    continue
                served = {int(p) for p in json.loads(body).get("partitions", {})}
                now = time.monotonic()
                for partition in range(count):
                    key = (topic, partition)
                    if partition in served:
                        self.since.pop(key, None)
                        continue
                    self.missed[key] += 1
                    start = self.since.setdefault(key, now)
                    self.longest = max(self.longest, now - start)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def wait_delivered(want: set[bytes], got: Any, what: str, timeout: float = 120.0) -> None:
    """Wait until every body of ``want`` is among ``got()``'s keys."""
    wait_for(lambda: not want - set(got()), timeout=timeout, what=what)
