"""The fault suite's parts: a replicated cluster of real processes on fixed loopback ports,
publishers that retry until acknowledged and remember what was acknowledged, and the checker.

A cluster is pnsq's nsqlookupd plus three pnsq nsqd (a node keeps its id, ``127.0.0.1:port``,
across restarts). The topic under test has two partitions with two copies each. Publishers:

* :class:`PnsqPublisher` — pnsq's own client (``pnsq.client.open_producer`` routed through lookupd),
  one per partition, idempotent: one numbering for the whole run and the client's own retries
  (:mod:`tests.fault.numbered`), so no message is stored twice; it records every acknowledged
  body with the time of its acknowledgement, and every refusal;
* :class:`GoPublisher` — the stock go-nsq producer (``gonsq-interop pub -retry``) attached to
  one node, publishing without a partition (forwarded to a leader where needed);
* :class:`YouzanPublisher` — the youzan-go-nsq-style partitioned producer
  (``yzgonsq-interop pub``), finding leaders through lookupd's ``/lookup``.

:func:`check` drains every partition from its leader (HTTP range reads below the
high-watermark) and returns what was lost, the copies of each body and the order per partition.
Results of each scenario are appended as JSON lines to ``$FAULT_REPORT`` when it is set
(``scripts/chaos`` sums them up).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import trio

from pnsq.client import Producer, open_producer
from pnsq.client.errors import (
    ConnectionClosedError,
    NsqError,
    NsqHTTPError,
    PartitionsUnknownError,
    ReplyTimeoutError,
)
from pnsq.client.numbering import Numbering
from protocol.range_read import decode_binary
from tests.daemons import GONSQ_INTEROP, Daemon, pnsq_lookupd, pnsq_nsqd
from tests.fault.linkcut import Link
from tests.fault.numbered import PUBLISH_FAILED, REOPEN_AFTER, open_numbered
from tests.fault.secure import secure
from tests.integration.lookupd_helpers import (
    ACCEPT,
    free_port,
    get_json,
    post,
    request,
    wait_for,
)
from tests.interop.youzan_driver import YZGONSQ_INTEROP

TOPIC = "faults"
PARTITIONS = 2
STALL = 0.5  # seconds without a reply before pnsq's client gives a connection up (and retries)


class FaultCluster:
    """pnsq lookupd + ``count`` nsqd on fixed ports (see the module doc); every node registers
    with every lookupd of :meth:`_start_lookupds`."""

    def __init__(
        self,
        work: Path,
        count: int = 3,
        lookupd_flags: tuple[str, ...] = (),
        nsqd_flags: tuple[str, ...] = (),
        links: bool = False,
        racks: bool = False,
    ) -> None:
        self.work = work
        #: with ``racks``, node ``i`` runs on rack ``r<i>`` (every node a failure domain)
        self.racks = racks
        #: with ``links``, per node: the link everyone reaches it through (its node id names
        #: the link's port) and its link to lookupd; cutting both isolates the node
        self.links: dict[int, tuple[Link, Link]] = {}
        #: nodes paused or cut off right now (publishers do not pick them as their seed)
        self.unreachable: set[int] = set()
        #: the partitions' high-watermarks when the current round began
        self.round_start: dict[int, int] = {}
        #: topic -> partitions, for the topics :meth:`create_topic` made
        self.partition_counts: dict[str, int] = {}
        self.lookupds: list[Daemon] = []
        self.nodes: list[Daemon] = []
        #: ``scripts/chaos --secure``: the credential and TLS between nodes (tests/fault/secure.py)
        self.secure = secure(work)
        #: headers for lookupd's cluster-control endpoints (the credential, when secure)
        self.lookupd_headers = dict(ACCEPT)
        if self.secure is not None:
            lookupd_flags = (*self.secure.lookupd_flags, *lookupd_flags)
            nsqd_flags = (*self.secure.nsqd_flags, *nsqd_flags)
            self.lookupd_headers.update(self.secure.headers)
        try:
            self.nsqd_flags = nsqd_flags
            self._start(work, count, nsqd_flags, lookupd_flags, links)
        except BaseException:  # a cluster that failed to come up leaves no process behind
            FaultCluster.stop(self)
            raise

    def _start(
        self,
        work: Path,
        count: int,
        nsqd_flags: tuple[str, ...],
        lookupd_flags: tuple[str, ...],
        links: bool,
    ) -> None:
        self.lookupds = self._start_lookupds(work, lookupd_flags)
        for i in range(count):
            port = free_port()
            lookupd_addresses = [d.tcp_address for d in self.lookupds]
            node_flags = [f"--tcp-address=127.0.0.1:{port}"]
            if links:
                inbound = Link(("127.0.0.1", port))
                to_lookupd = Link(("127.0.0.1", self.lookupd.tcp_port))
                lookupd_addresses = [to_lookupd.address]
                node_flags.append(f"--broadcast-tcp-port={inbound.port}")
            node = self._node(i, lookupd_addresses, node_flags)
            if links:
                self.links[id(node)] = (inbound, to_lookupd)
            self.nodes.append(node)
        for node in self.nodes:
            node.start()
        for lookupd in self.lookupds:
            wait_for(
                lambda d=lookupd: len(get_json(d, "/nodes")["producers"]) == count,
                what=f"{count} nodes registered",
            )

    def _node(self, i: int, lookupd_addresses: list[str], flags: list[str]) -> Daemon:
        """Node ``i`` (not started): registered with ``lookupd_addresses``, on its rack."""
        rack = [f"--rack=r{i}"] if self.racks else []
        return pnsq_nsqd(
            self.work / f"n{i}",
            *(f"--lookupd-tcp-address={address}" for address in lookupd_addresses),
            *flags,
            *rack,
            "--replica-lag-max=5s",
            *self.nsqd_flags,
        )

    def add_node(self) -> Daemon:
        """Start one more node (registered with every lookupd, on a rack of its own with
        ``racks``) and wait until every lookupd lists it."""
        node = self._node(
            len(self.nodes),
            [d.tcp_address for d in self.lookupds],
            [f"--tcp-address=127.0.0.1:{free_port()}"],
        )
        self.nodes.append(node.start())
        for lookupd in self.lookupds:
            wait_for(
                lambda d=lookupd: len(get_json(d, "/nodes")["producers"]) == len(self.nodes),
                what="the new node registered",
            )
        return node

    def _start_lookupds(self, work: Path, flags: tuple[str, ...]) -> list[Daemon]:
        """The lookupds every node registers with (here one; the HA cluster starts two)."""
        lookupd_port, lookupd_http = free_port(), free_port()
        lookupd = pnsq_lookupd(
            work / "lookupd",
            f"--tcp-address=127.0.0.1:{lookupd_port}",
            f"--http-address=127.0.0.1:{lookupd_http}",
            "--heartbeat-timeout=2s",
            *flags,
        )
        return [lookupd.start()]

    @property
    def lookupd(self) -> Daemon:
        """The lookupd clients and checks ask: the first one running (else the first)."""
        running = [d for d in self.lookupds if d.proc is not None and d.proc.poll() is None]
        return (running or self.lookupds)[0]

    def node_id(self, node: Daemon) -> str:
        link = self.links.get(id(node))
        return f"127.0.0.1:{link[0].port if link else node.tcp_port}"

    def isolate(self, node: Daemon) -> None:
        """Cut ``node`` off from lookupd, its peers and its clients (a network partition)."""
        self.unreachable.add(id(node))
        for link in self.links[id(node)]:
            link.cut()

    def heal(self, node: Daemon) -> None:
        for link in self.links[id(node)]:
            link.restore()
        self.unreachable.discard(id(node))

    def pause(self, node: Daemon) -> None:
        """SIGSTOP ``node`` (it keeps its connections and answers nothing)."""
        assert node.proc is not None
        self.unreachable.add(id(node))
        os.kill(node.proc.pid, signal.SIGSTOP)

    def resume(self, node: Daemon) -> None:
        assert node.proc is not None
        os.kill(node.proc.pid, signal.SIGCONT)
        self.unreachable.discard(id(node))

    def by_id(self, node_id: str) -> Daemon:
        return next(n for n in self.nodes if self.node_id(n) == node_id)

    def create_topic(self, topic: str = TOPIC, partitions: int = PARTITIONS) -> None:
        query = f"/topic/create?topic={topic}&partition_num={partitions}&replicator=2"
        assert post(self.lookupd, query) == (200, b"")
        self.partition_counts[topic] = partitions
        self.wait_in_sync(topic)

    def partition_count(self, topic: str = TOPIC) -> int:
        return self.partition_counts.get(topic, PARTITIONS)

    def placement(self, topic: str = TOPIC) -> dict[int, dict[str, Any]]:
        """Partition -> ``{"leader", "replicas", "isr", "epoch"}`` as lookupd has it."""
        for node in self.nodes:  # a node's assignments list a topic it holds, whole
            url = f"http://{self.lookupd.http_address}/pnsq/assignments?node={self.node_id(node)}"
            status, body, _ = request(url, "GET", self.lookupd_headers)
            assert status == 200, (url, status, body)
            doc = json.loads(body)
            parts = doc["topics"].get(topic, {}).get("partitions", {})
            if parts:
                return {int(k): v for k, v in parts.items()}
        return {}

    def leader(self, partition: int, topic: str = TOPIC) -> Daemon:
        return self.by_id(self.placement(topic)[partition]["leader"])

    def replica(self, partition: int, topic: str = TOPIC) -> Daemon:
        return self.by_id(self.placement(topic)[partition]["replicas"][0])

    def wait_in_sync(self, topic: str = TOPIC, timeout: float = 60.0) -> None:
        """Every partition led by a live node with its full in-sync set."""

        def full() -> bool:
            parts = self.placement(topic)
            return len(parts) == self.partition_count(topic) and all(
                len(p["isr"]) == 1 + len(p["replicas"]) for p in parts.values()
            )

        wait_for(full, timeout=timeout, what="every partition fully in sync")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        for lookupd in self.lookupds:
            lookupd.stop()
        for pair in self.links.values():
            for link in pair:
                link.close()


# ---------------------------------------------------------------------------------- publishers


@dataclass(kw_only=True)
class _PublisherThread:
    """A publisher that runs its own Trio loop in a thread: :meth:`start`, then :meth:`stop`
    joins it and re-raises what ended it. It records every acknowledged body with the times of
    its publish and of its acknowledgement, and every refusal."""

    #: (body, when its publish was sent, when it was acknowledged)
    acked: list[tuple[bytes, float, float]] = field(default_factory=list)
    refused: list[tuple[float, str]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    error: BaseException | None = None

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._run, name=type(self).__name__, daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 30) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"{type(self).__name__} did not stop"
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread by stop()
            self.error = exc

    async def _main(self) -> None:
        raise NotImplementedError


@dataclass
class PnsqPublisher(_PublisherThread):
    """pnsq's client publishing ``<name>-<i>`` to one partition, ``i`` rising, one publish
    after another: idempotent, one numbering for the whole run, each publish retried by the
    client itself (:mod:`tests.fault.numbered`); a publish that failed for good is not sent
    again (the next one carries the next ``i``)."""

    cluster: FaultCluster
    partition: int
    name: str
    #: publishes that failed for good (the client's retries spent): not acknowledged
    failed: int = 0
    #: messages the leaders answered ``DUPLICATE`` (a retry of a publish stored already)
    told_duplicate: int = 0
    #: tries after a failure, by the client itself
    retried: int = 0

    async def _main(self) -> None:
        numbering: Numbering | None = None
        sequence = itertools.count()
        attempt = 0
        while not self._stop.is_set():
            seeds = [
                n
                for n in self.cluster.nodes
                if n.proc and n.proc.poll() is None and id(n) not in self.cluster.unreachable
            ]
            lookupd = self.cluster.lookupd.http_address
            try:
                async with open_numbered(
                    seeds[attempt % len(seeds)], lookupd, numbering, STALL
                ) as producer:
                    numbering = producer.numbering
                    try:
                        await self._publish(producer, lookupd, sequence)
                    finally:
                        self.told_duplicate += producer.stats["duplicates"]
                        self.retried += producer.stats["retries"]
            except (OSError, ConnectionClosedError, NsqError) as exc:
                self.refused.append((time.monotonic(), f"reconnect: {exc!s:.70}"))
                await trio.sleep(0.1)
            attempt += 1  # another seed next time

    async def _publish(self, producer: Producer, lookupd: str, sequence: Iterator[int]) -> None:
        """Publish until stopped, or until publishes keep failing for good or the cluster
        answers on another lookupd (the caller opens a producer again)."""
        failures = 0
        while not self._stop.is_set() and failures < REOPEN_AFTER:
            body = f"{self.name}-{next(sequence)}".encode()
            sent = time.monotonic()
            try:
                await producer.publish(TOPIC, body, partition=self.partition)
            except PUBLISH_FAILED as exc:
                self.failed += 1
                self.refused.append((time.monotonic(), str(exc)[:80]))
                failures += 1
                if self.cluster.lookupd.http_address != lookupd:
                    return
                await trio.sleep(0.05)
                continue
            failures = 0
            self.acked.append((body, sent, time.monotonic()))

    def writable_after(self, since: float) -> float | None:
        """Seconds from ``since`` to the first acknowledgement of a publish sent after it
        (an acknowledgement already on its way at ``since`` does not count); None: none."""
        later = [acked for _, sent, acked in self.acked if sent > since]
        return min(later) - since if later else None


@dataclass
class PipelinedPublisher(_PublisherThread):
    """pnsq's client keeping ``depth`` publishes in flight on each of ``connections`` producers
    per partition of ``topic`` (every partition, routed to its leader through lookupd). A
    publish that fails is recorded and a new one sent; every call must end (OK, an error, or
    the client's reply timeout): one still waiting after :data:`CALL_BOUND` is a hang."""

    cluster: FaultCluster
    topic: str
    name: str
    connections: int = 2
    depth: int = 8
    hung: int = 0  # publish calls that did not end within CALL_BOUND
    #: replies overdue past :data:`PUBLISH_REPLY_TIMEOUT` (the client closed the connection)
    timeouts: list[tuple[float, str]] = field(default_factory=list)

    def stop(self, timeout: float = 60) -> None:
        super().stop(timeout)

    async def _main(self) -> None:
        count = self.cluster.partition_count(self.topic)
        async with trio.open_nursery() as nursery:
            for partition in range(count):
                for connection in range(self.connections):
                    nursery.start_soon(self._producer, partition, f"{partition}.{connection}")

    async def _producer(self, partition: int, tag: str) -> None:
        sequence = iter(range(1 << 62))
        while not self._stop.is_set():
            seeds = [n for n in self.cluster.nodes if n.proc and n.proc.poll() is None]
            try:
                async with (
                    open_producer(
                        seeds[0].tcp_address,
                        lookupd_http_address=self.cluster.lookupd.http_address,
                        max_attempts=1,
                        route_ttl=0.2,
                        reply_timeout=PUBLISH_REPLY_TIMEOUT,
                    ) as producer,
                    trio.open_nursery() as nursery,
                ):
                    for lane in range(self.depth):
                        nursery.start_soon(
                            self._lane,
                            producer,
                            partition,
                            f"{self.name}-{tag}.{lane}",
                            sequence,
                        )
            except (OSError, ConnectionClosedError, NsqError) as exc:
                self.refused.append((time.monotonic(), f"connect: {exc!s:.70}"))
                await trio.sleep(0.1)

    async def _lane(self, producer: Any, partition: int, prefix: str, sequence: Any) -> None:
        while not self._stop.is_set():
            body = f"{prefix}-{next(sequence)}".encode()
            sent = time.monotonic()
            with trio.move_on_after(CALL_BOUND) as bound:
                try:
                    await producer.publish(self.topic, body, partition=partition)
                except ReplyTimeoutError as exc:
                    self.timeouts.append((time.monotonic(), str(exc)[:80]))
                    continue
                except (
                    NsqError,
                    NsqHTTPError,
                    PartitionsUnknownError,
                    ConnectionClosedError,
                    OSError,
                ) as exc:
                    self.refused.append((time.monotonic(), str(exc)[:80]))
                    await trio.sleep(0.05)
                    continue
                self.acked.append((body, sent, time.monotonic()))
            if bound.cancelled_caught:
                self.hung += 1

    def bodies(self) -> set[bytes]:
        return {body for body, _, _ in self.acked}


#: the pipelined publisher's client reply timeout, and how long a call may take at most
PUBLISH_REPLY_TIMEOUT = 10.0
CALL_BOUND = 30.0


class _DriverRun:
    """A Go driver publishing in the background; :meth:`_output` waits for its end."""

    def __init__(self, name: str, argv: list[str]) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def _output(self, timeout: float) -> list[dict[str, Any]]:
        """Its JSON lines, once it exited 0."""
        out, err = self.proc.communicate(timeout=timeout)
        lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert self.proc.returncode == 0, (lines[-1:], err[-2000:])
        return lines


class GoPublisher(_DriverRun):
    """go-nsq's stock producer on one node: ``count`` PUBs, each retried until acknowledged."""

    def __init__(self, node: Daemon, name: str, count: int, topic: str = TOPIC) -> None:
        argv = [
            str(GONSQ_INTEROP),
            "pub",
            f"-nsqd={node.tcp_address}",
            f"-topic={topic}",
            f"-count={count}",
            f"-prefix={name}-",
            "-retry",
            "-timeout=240s",
        ]
        super().__init__(name, argv)

    def finish(self, timeout: float = 240) -> set[bytes]:
        """Wait for the run; the bodies it had acknowledged."""
        result = self._output(timeout)[-1]
        return {f"{self.name}-{i}".encode() for i in range(int(result["published"]))}


class YouzanPublisher(_DriverRun):
    """A youzan-go-nsq-style partitioned producer (``yzgonsq-interop pub``): partition leaders
    from lookupd's ``/lookup``, one connection per leader, a refused or failed publish retried
    (after a new lookup) until acknowledged."""

    def __init__(self, cluster: FaultCluster, name: str, count: int) -> None:
        argv = [
            str(YZGONSQ_INTEROP),
            "pub",
            f"-lookupd={cluster.lookupd.http_address}",
            f"-topic={TOPIC}",
            f"-count={count}",
            f"-prefix={name}-",
            "-tries=100",
            "-retry-wait=50ms",
            "-timeout=240s",
        ]
        super().__init__(name, argv)

    def finish(self, timeout: float = 240) -> set[bytes]:
        """Wait for the run; the bodies it had acknowledged (one ``sent`` line each)."""
        return {str(line["sent"]).encode() for line in self._output(timeout) if "sent" in line}


# ---------------------------------------------------------------------------------- checking


@dataclass
class Outcome:
    """What the checker found."""

    stored: dict[int, list[bytes]]  # partition -> bodies in log order
    lost: set[bytes]
    duplicates: int  # extra copies, every client's
    copies: Counter[bytes]  # body -> how often it is stored


def read_partition(
    node: Daemon, partition: int, topic: str = TOPIC, offset: int = 0
) -> list[bytes]:
    """The records of ``partition`` from ``offset`` up to its high-watermark on ``node``."""
    bodies: list[bytes] = []
    while True:
        url = (
            f"http://{node.http_address}/partition/read?topic={topic}"
            f"&partition={partition}&offset={offset}&max=10000"
        )
        status, raw, _ = request(url, "GET", {})
        assert status == 200, (status, raw[:200])
        batch = decode_binary(raw)
        if not batch.records:
            return bodies
        bodies.extend(r.body for r in batch.records)
        offset = batch.next_offset


def high_watermarks(cluster: FaultCluster, topic: str = TOPIC) -> dict[int, int]:
    """Each partition's high-watermark on its leader (what a round starts from: offsets below
    it never change again)."""
    marks = {}
    for partition in range(cluster.partition_count(topic)):
        doc = get_json(cluster.leader(partition, topic), f"/partitions?topic={topic}")
        marks.update({p["partition"]: p["latest"] for p in doc["partitions"]})
    return marks


def check(
    cluster: FaultCluster,
    acked: set[bytes],
    since: dict[int, int] | None = None,
    topic: str = TOPIC,
) -> Outcome:
    """Drain every partition from its leader (from ``since``, the high-watermarks when the
    round began); every acknowledged body must be there."""
    cluster.wait_in_sync(topic)
    since = since or {}
    placement = cluster.placement(topic)
    stored = {
        p: read_partition(cluster.by_id(placement[p]["leader"]), p, topic, since.get(p, 0))
        for p in range(cluster.partition_count(topic))
    }
    counts = Counter(body for bodies in stored.values() for body in bodies)
    lost = acked - set(counts)
    duplicates = sum(n - 1 for n in counts.values() if n > 1)
    return Outcome(stored, lost, duplicates, counts)


def in_order(bodies: list[bytes], name: str) -> bool:
    """The ``<name>-<i>`` bodies of one publisher appear in increasing ``i`` (first copies)."""
    seen: list[int] = []
    for body in bodies:
        text = body.decode()
        if text.startswith(f"{name}-"):
            n = int(text.rsplit("-", 1)[1])
            if not seen or n > seen[-1]:
                seen.append(n)
            elif n not in seen:
                return False
    return True


def report(scenario: str, **figures: Any) -> None:
    """Print the scenario's figures and append them to ``$FAULT_REPORT``."""
    line = json.dumps({"scenario": scenario, **figures}, sort_keys=True)
    print(line)
    path = os.environ.get("FAULT_REPORT")
    if path:
        with Path(path).open("a") as handle:
            handle.write(line + "\n")


def rounds() -> int:
    """Rounds per scenario: ``$FAULT_ROUNDS`` (``scripts/chaos --rounds N``), 1 by default."""
    return max(1, int(os.environ.get("FAULT_ROUNDS", "1")))


def during(load: Callable[[], None], seconds: float) -> None:
    """Let the publishers run for ``seconds`` around ``load``."""
    time.sleep(seconds / 2)
    load()
    time.sleep(seconds / 2)
