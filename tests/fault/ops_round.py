"""One round of a cluster-operation fault scenario: the load of :mod:`tests.fault.ops_load`
started, then stopped and judged (:meth:`OpsRound.finish`): every acknowledged message delivered
(the go-nsq and pnsq ones of :data:`OPS` to the pynsq reader, the :data:`ORD` ones to the
ordered reader), none of pnsq's client's stored twice (go-nsq's extra copies are counted: it is
at-least-once), the ordered topic in order, redeliveries within :data:`DUPLICATE_SHARE`, no
partition unwritable past :data:`WRITE_GAP_BOUND` nor without a leader in lookupd's ``/lookup``
for longer than allowed, no node ended by itself; the figures go to
:func:`~tests.fault.harness.report` (``scripts/chaos`` sums them up)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import trio

from pnsq.client import open_producer
from tests.fault.harness import FaultCluster, read_partition, report
from tests.fault.numbered import copies_by_kind
from tests.fault.ops_load import (
    OPS,
    OPS_PARTITIONS,
    ORD,
    ORD_PARTITIONS,
    GoLoad,
    Lanes,
    OfflineWatch,
    OrderedReader,
    PynsqReader,
    live,
)

#: redeliveries allowed, as a share of what was acknowledged: a consumer sees again what was
#: in flight or not yet confirmed to the new leader when a leadership moves (at least once);
#: measured: at most 3 % (a rolling restart, every leadership moved twice)
DUPLICATE_SHARE = 0.1
DELIVERY_TIMEOUT = 120.0  # s after the publishers stopped for every message to arrive
#: s a partition may go without an acknowledged publish (generous: the figure is reported, and
#: scripts/chaos shows its spread; this catches a partition stuck for good)
WRITE_GAP_BOUND = 15.0
BACKLOG_BODY = 1024  # bytes of a backlog message


class OpsRound:
    """The readers, the offline watch and the publishers of one round (started in that order:
    the channels exist already, so nothing published is missed)."""

    def __init__(self, cluster: FaultCluster, tag: str) -> None:
        self.cluster, self.tag = cluster, tag
        #: messages acknowledged outside the continuous load (backlogs), per topic
        self.extra: dict[str, set[bytes]] = {OPS: set(), ORD: set()}
        self.pynsq = PynsqReader(cluster)
        self.ordered = OrderedReader(cluster).start()
        self.watch = OfflineWatch(cluster)
        self.lanes = Lanes(cluster, {OPS: OPS_PARTITIONS, ORD: ORD_PARTITIONS}, tag).start()
        self.go = GoLoad(cluster, f"go{tag}")
        self.started = time.monotonic()

    def abort(self) -> None:
        """Stop every part at once, judging nothing (a round that failed)."""
        self.go.abort()
        for thread in (self.lanes, self.ordered):
            thread._stop.set()
        self.watch.stop()
        if self.pynsq.proc.poll() is None:
            self.pynsq.proc.kill()
            self.pynsq.proc.wait(10)

    def backlog(self, topic: str, partition: int, count: int) -> None:
        """``count`` messages of :data:`BACKLOG_BODY` bytes to one partition (what a new copy
        has to catch up on), acknowledged one after another."""
        bodies = [(f"bl{self.tag}-{i}".encode()).rjust(BACKLOG_BODY, b".") for i in range(count)]

        async def publish() -> None:
            async with open_producer(
                live(self.cluster)[0].tcp_address,
                lookupd_http_address=self.cluster.lookupd.http_address,
                max_attempts=20,
            ) as producer:
                for body in bodies:
                    await producer.publish(topic, body, partition=partition)
                    self.extra[topic].add(body)

        trio.run(publish)

    def finish(
        self, scenario: str, op_s: float, offline_bound: float = 0.0, **figures: object
    ) -> None:
        """Stop the publishers, wait for every acknowledged message at its reader, report and
        judge (see the module doc). ``offline_bound``: the seconds a partition may go without a
        leader in ``/lookup`` (0: never seen so)."""
        self.go.stop()
        self.lanes.stop()
        stopped = time.monotonic()
        self.watch.stop()
        wants = {
            OPS: self.lanes.bodies[OPS] | self.go.acked | self.extra[OPS],
            ORD: self.lanes.bodies[ORD] | self.extra[ORD],
        }
        readers: dict[str, Callable[[], Counter[bytes]]] = {
            OPS: self.pynsq.deliveries,
            ORD: self.ordered.deliveries,
        }
        deadline = stopped + DELIVERY_TIMEOUT
        while any(wants[t] - set(readers[t]()) for t in wants) and time.monotonic() < deadline:
            time.sleep(0.2)
        delivered_s = time.monotonic() - stopped
        self.pynsq.stop()
        self.ordered.stop()
        got = {t: readers[t]() for t in wants}
        lost = {t: wants[t] - set(got[t]) for t in wants}
        duplicates = sum(got[t][b] - 1 for t in wants for b in wants[t] if got[t][b] > 1)
        acked = sum(len(w) for w in wants.values())
        out_of_order = self.ordered.out_of_order()
        pnsq_dups, stock_dups = self._stored_twice()
        report(
            scenario,
            acked=acked,
            lost=sum(len(x) for x in lost.values()),
            redelivered=duplicates,
            duplicates_pnsq=pnsq_dups,
            duplicates_stock=stock_dups,
            told_duplicate=self.lanes.told_duplicate,
            retried=self.lanes.retried,
            failed=self.lanes.failed,
            delivered=sum(len(set(g)) for g in got.values()),
            go_acked=len(self.go.acked),
            write_gap_s=round(self.lanes.longest_gap(stopped), 3),
            op_s=round(op_s, 3),
            offline_s=round(self.watch.longest, 3),
            refused=len(self.lanes.refused),
            out_of_order=len(out_of_order),
            delivered_after_s=round(delivered_s, 3),
            **figures,
        )
        kinds = Counter(text[:60] for _, text in self.lanes.refused)
        print(f"{scenario}: publishes refused, by kind: {kinds.most_common(4)}")
        crashed = [
            n.log_text()[-3000:]
            for n in self.cluster.nodes
            if id(n) not in self.cluster.unreachable and n.proc and n.proc.poll() is not None
        ]
        assert not crashed, crashed  # a node the scenario did not stop ended by itself
        if any(lost.values()):
            stored = self._stored(lost)
            raise AssertionError(f"lost {_sample(lost)}; of them stored: {_sample(stored)}")
        assert not self.go.errors, self.go.errors[:3]
        assert self.go.acked, "go-nsq published nothing"
        assert all(self.lanes.acks.get((OPS, p)) for p in range(OPS_PARTITIONS))
        assert all(self.lanes.acks.get((ORD, p)) for p in range(ORD_PARTITIONS))
        assert not out_of_order, out_of_order[:5]
        assert self.lanes.longest_gap(stopped) <= WRITE_GAP_BOUND
        assert duplicates <= DUPLICATE_SHARE * acked, (duplicates, acked)
        assert not pnsq_dups, "pnsq's client stored a message twice"
        assert self.watch.longest <= offline_bound, dict(self.watch.missed)

    def _stored_twice(self) -> tuple[int, int]:
        """The extra copies of this round's messages in the logs (read from each partition's
        leader): ``(of pnsq's client, of go-nsq)``. Not the redeliveries a consumer sees: a
        message stored twice is a second message."""
        copies: Counter[bytes] = Counter()
        for topic in (OPS, ORD):
            for partition, part in self.cluster.placement(topic).items():
                leader = self.cluster.by_id(part["leader"])
                bodies = read_partition(leader, partition, topic)
                copies.update(body.lstrip(b".") for body in bodies)  # a backlog's padding
        pnsq = [
            f"{self.tag}{topic}{partition}-"
            for topic, count in ((OPS, OPS_PARTITIONS), (ORD, ORD_PARTITIONS))
            for partition in range(count)
        ]
        return copies_by_kind(copies, [*pnsq, f"bl{self.tag}-"], [f"{self.go.name}r"])

    def _stored(self, lost: dict[str, set[bytes]]) -> dict[str, set[bytes]]:
        """Of the undelivered messages, those stored (read from each partition's leader)."""
        stored: dict[str, set[bytes]] = {}
        for topic, bodies in lost.items():
            placement = self.cluster.placement(topic)
            logs: set[bytes] = set()
            for partition, part in placement.items():
                logs.update(read_partition(self.cluster.by_id(part["leader"]), partition, topic))
            stored[topic] = bodies & logs
        return stored


@contextmanager
def ops_round(cluster: FaultCluster, tag: str) -> Iterator[OpsRound]:
    """An :class:`OpsRound`, stopped at once if the block fails (no process left behind)."""
    started = OpsRound(cluster, tag)
    try:
        yield started
    except BaseException:
        started.abort()
        raise


def _sample(found: dict[str, set[bytes]]) -> dict[str, object]:
    return {t: (len(b), sorted(b)[:5]) for t, b in found.items()}
