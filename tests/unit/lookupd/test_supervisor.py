"""lookupd.state.supervisor: a decision is on disk before anyone can hear of it, and a store failure
puts the placements back (the decision is taken again on the next tick)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import trio

from lookupd.core.decide import Settings
from lookupd.core.placement import TopicMeta, TopicPlacement
from lookupd.core.views import Timeouts
from lookupd.state.cluster import Cluster
from lookupd.state.store import MetadataStore, StoreError
from lookupd.state.supervisor import Supervisor, view_of
from protocol.lookup import PartitionAssignment

A, B = "a:1", "b:1"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def cluster_with_one_partition(path: Path, clock: Clock) -> Cluster:
    store = MetadataStore(path)
    placed = TopicPlacement("t", TopicMeta(1, 2), (PartitionAssignment(A, (B,), 3, (A, B)),))
    store.save([placed])
    cluster = Cluster(store, Timeouts(), clock=clock)
    cluster.load()
    cluster.liveness.connected(A, clock.now)
    cluster.liveness.connected(B, clock.now)
    return cluster


async def test_a_dead_leader_is_replaced_and_the_decision_is_saved_first(tmp_path: Path) -> None:
    clock = Clock()
    cluster = cluster_with_one_partition(tmp_path, clock)
    supervisor = Supervisor(cluster, Settings())
    assert await supervisor.step() == []  # both alive: nothing to do
    cluster.liveness.disconnected(A, clock.now)  # kill -9: its connection dropped
    saved = cluster.saved_version
    (change,) = await supervisor.step()
    assert (change.leader, change.epoch, change.isr) == (B, 4, (B,))
    assert cluster.saved_version > saved  # the long-polls may now hand it out
    on_disk = MetadataStore(tmp_path).load().placements["t"].partitions[0]
    assert (on_disk.leader, on_disk.epoch, on_disk.isr) == (B, 4, (B,))
    assert supervisor.failovers == 1
    assert view_of(cluster, Settings(), clock.now).partitions[0].leader == B


async def test_the_nodes_are_told_a_decision_only_once_it_is_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the save of a failover is in progress, /pnsq/assignments still gives what is on
    disk: a save that fails is rolled back, and no node may have acted on it."""
    clock = Clock()
    cluster = cluster_with_one_partition(tmp_path, clock)
    supervisor = Supervisor(cluster, Settings())
    cluster.liveness.disconnected(A, clock.now)
    entered, release = threading.Event(), threading.Event()
    save = cluster.store.save

    def slow(*args: Any) -> None:
        entered.set()
        release.wait(10)
        save(*args)

    def told(node: str) -> tuple[str, int]:
        (topic,) = cluster.assignments(node)
        return topic.partitions[0].leader, topic.partitions[0].epoch

    monkeypatch.setattr(cluster.store, "save", slow)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(supervisor.step)
        while not entered.is_set():
            await trio.sleep(0.001)
        assert cluster.placements["t"].partitions[0].leader == B  # decided, being saved
        assert told(B) == (A, 3)  # not told yet
        release.set()
    assert told(B) == (B, 4)


async def test_a_store_failure_leaves_the_placements_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    cluster = cluster_with_one_partition(tmp_path, clock)
    supervisor = Supervisor(cluster, Settings())
    cluster.liveness.disconnected(A, clock.now)

    def broken(*args: object) -> None:
        raise StoreError("disk full")

    monkeypatch.setattr(cluster.store, "save", broken)
    assert await supervisor.step() == []
    part = cluster.placements["t"].partitions[0]
    assert (part.leader, part.epoch) == (A, 3)  # nobody was told anything
    monkeypatch.undo()
    (change,) = await supervisor.step()  # the next tick decides again
    assert change.leader == B


@pytest.mark.parametrize("unclean", [False, True])
async def test_with_no_in_sync_copy_left_only_an_unclean_topic_promotes(
    tmp_path: Path, unclean: bool
) -> None:
    clock = Clock()
    store = MetadataStore(tmp_path)
    meta = TopicMeta(1, 2, unclean=unclean)
    # B was taken out of the in-sync set earlier: A alone holds every acknowledged message
    store.save([TopicPlacement("t", meta, (PartitionAssignment(A, (B,), 3, (A,)),))])
    cluster = Cluster(store, Timeouts(), clock=clock)
    cluster.load()
    cluster.liveness.connected(A, clock.now)
    cluster.liveness.connected(B, clock.now)
    cluster.liveness.disconnected(A, clock.now)
    (change,) = await Supervisor(cluster, Settings()).step()
    if unclean:  # availability over the messages only A had
        assert (change.leader, change.epoch, change.isr, change.offline) == (B, 4, (B,), False)
    else:  # offline until A returns
        assert (change.leader, change.epoch, change.offline) == (A, 3, True)
        assert cluster.offline == {("t", 0)}
