"""lookupd's cost per decision at a number of partitions: scripts/bench's decide_N rows.

lookupd's own supervisor (lookupd.state.supervisor) over a cluster of ``--partitions``
partitions in topics of 200, two in-sync copies each on three nodes, its placements saved to
a metadata file in a scratch directory (fsync included), driven in process, with no nsqd:
what is timed is lookupd's work for a decision, from the event to the saved placements.

* one partition: a leader reports its replica lagging; the decision shrinks that partition's
  in-sync set (the median of ``--rounds`` decisions, each on another partition);
* a node's death: one of the three disconnects; the decision fails over the partitions it led
  and shrinks the in-sync sets it was in (two thirds of the partitions; the median of three,
  each on a cluster built afresh).

Prints one JSON line: {"partitions", "one_ms", "node_ms", "node_touched"}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import trio

from lookupd.core.decide import Settings
from lookupd.core.liveness import Progress
from lookupd.core.placement import TopicMeta, TopicPlacement
from lookupd.core.views import Timeouts
from lookupd.state.cluster import Cluster
from lookupd.state.store import MetadataStore
from lookupd.state.supervisor import Supervisor
from protocol.lookup import PartitionAssignment

NODES = ("n0:4150", "n1:4150", "n2:4150")
TOPIC_PARTITIONS = 200


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


async def cluster_of(partitions: int, directory: Path) -> tuple[Supervisor, Cluster]:
    """A settled cluster of ``partitions`` (its placements saved), and its supervisor."""
    clock = Clock()
    store = MetadataStore(directory)
    cluster = Cluster(store, Timeouts(), clock=clock)
    for t in range(max(1, partitions // TOPIC_PARTITIONS)):
        parts = []
        for p in range(min(partitions, TOPIC_PARTITIONS)):
            leader, replica = NODES[(t + p) % 3], NODES[(t + p + 1) % 3]
            parts.append(PartitionAssignment(leader, (replica,), 1, (leader, replica)))
        name = f"t{t:03d}"
        cluster.placements[name] = TopicPlacement(name, TopicMeta(len(parts), 2), tuple(parts))
    for node in NODES:
        cluster.liveness.connected(node, clock.now)
    cluster.note_changed()
    await cluster.flush()
    supervisor = Supervisor(cluster, Settings())
    if await supervisor.step():
        raise SystemExit("the cluster was not settled")
    return supervisor, cluster


async def one_partition(partitions: int, rounds: int) -> float:
    """Median seconds of a decision shrinking one partition's in-sync set."""
    with tempfile.TemporaryDirectory() as scratch:
        supervisor, cluster = await cluster_of(partitions, Path(scratch))
        names = sorted(cluster.placements)
        took = []
        for r in range(rounds):
            topic = names[r % len(names)]
            number = r // len(names)
            part = cluster.placements[topic].partitions[number]
            lagging = Progress(part.leader, part.epoch, frozenset(), frozenset(part.replicas))
            start = time.perf_counter()
            cluster.liveness.report(topic, number, lagging)
            changes = await supervisor.step()
            took.append(time.perf_counter() - start)
            if len(changes) != 1:
                raise SystemExit(f"expected one change, got {len(changes)}")
            if await supervisor.step():  # settles: nothing more to do
                raise SystemExit("a second decision changed something")
    return statistics.median(took)


async def node_down(partitions: int, rounds: int) -> tuple[float, int]:
    """Median seconds of the decision after a node's death, and the partitions it changed."""
    took, touched = [], 0
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as scratch:
            supervisor, cluster = await cluster_of(partitions, Path(scratch))
            start = time.perf_counter()
            cluster.liveness.disconnected(NODES[0], cluster.clock())
            changes = await supervisor.step()
            took.append(time.perf_counter() - start)
            touched = len(changes)
    return statistics.median(took), touched


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    one = await one_partition(args.partitions, args.rounds)
    node, touched = await node_down(args.partitions, 3)
    result = {
        "partitions": args.partitions,
        "one_ms": round(one * 1e3, 3),
        "node_ms": round(node * 1e3, 2),
        "node_touched": touched,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    trio.run(main)
