"""lookupd.state.supervisor: a decision is on disk before anyone can hear of it, and a store failure
puts the placements back (the decision is taken again on the next tick)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from lookupd.core.decide import Settings
from lookupd.core.health import Health
from lookupd.core.liveness import Liveness, Progress
from lookupd.core.placement import TopicMeta, TopicPlacement
from lookupd.core.quiet import narrow
from lookupd.core.view import Change, Counts
from lookupd.core.views import Timeouts
from lookupd.state.cluster import Cluster
from lookupd.state.store import MetadataStore, StoreError
from lookupd.state.supervisor import Supervisor, Views, view_of
from protocol.lookup import PartitionAssignment
from protocol.lookup_v1 import EXT_PARTITIONS, EXTENSIONS_KEY, decode_identify

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


class CountingDecide:
    """Wraps the supervisor's decide() and counts its calls."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import lookupd.state.supervisor as module

        self.calls = 0
        real = module.decide

        def counted(view: Any, now: float) -> Any:
            self.calls += 1
            return real(view, now)

        monkeypatch.setattr(module, "decide", counted)


async def test_a_quiet_cluster_is_not_decided_again_on_every_tick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """decide() costs time in every partition: while nothing it reads changes (heartbeats
    alone move nothing), the ticks do not run it again."""
    clock = Clock()
    cluster = cluster_with_one_partition(tmp_path, clock)
    supervisor = Supervisor(cluster, Settings())
    counted = CountingDecide(monkeypatch)
    for _ in range(20):  # 2 s of ticks, both nodes pinging every 0.5 s
        clock.now += 0.1
        if round(clock.now * 10) % 5 == 0:
            cluster.liveness.heartbeat(A, clock.now)
            cluster.liveness.heartbeat(B, clock.now)
        assert await supervisor.step() == []
    assert counted.calls == 1
    # the same report again changes nothing either
    cluster.report_progress(A, [{"topic": "t", "partition": 0, "epoch": 3, "caught_up": [B]}])
    cluster.report_progress(A, [{"topic": "t", "partition": 0, "epoch": 3, "caught_up": [B]}])
    assert await supervisor.step() == []
    assert await supervisor.step() == []
    assert counted.calls == 2


async def test_a_heartbeat_that_stops_is_still_seen_without_any_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Time alone changes what decide() reads (a node whose heartbeats stopped is down after
    the timeout): the tick after the timeout decides, and fails over."""
    clock = Clock()
    cluster = cluster_with_one_partition(tmp_path, clock)
    supervisor = Supervisor(cluster, Settings(heartbeat_timeout=2.0))
    counted = CountingDecide(monkeypatch)
    assert await supervisor.step() == []
    for _ in range(19):  # A hangs: its connection stays open, its pings stop
        clock.now += 0.1
        cluster.liveness.heartbeat(B, clock.now)
        assert await supervisor.step() == []
    assert counted.calls == 1
    clock.now += 0.2
    (change,) = await supervisor.step()
    assert (change.leader, change.epoch, change.isr) == (B, 4, (B,))
    assert counted.calls == 2


async def test_what_decide_reads_changing_makes_it_decide_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A changed report (the ISR shrinks), a new topic and a node going away each reach
    decide() at the next step."""
    clock = Clock()
    cluster = cluster_with_one_partition(tmp_path, clock)
    supervisor = Supervisor(cluster, Settings())
    counted = CountingDecide(monkeypatch)
    assert await supervisor.step() == []
    report = {"topic": "t", "partition": 0, "epoch": 3, "lagging": [B]}
    cluster.report_progress(A, [report])
    (change,) = await supervisor.step()
    assert change.isr == (A,)  # B lagged: out of the in-sync set
    assert counted.calls == 2
    await cluster.create_topic("u", TopicMeta(1, 1))
    assert await supervisor.step() == []
    assert counted.calls == 3
    cluster.liveness.disconnected(A, clock.now)
    (change,) = await supervisor.step()
    assert change.offline  # A, alone in sync, went away
    assert counted.calls == 4


def test_a_stall_of_lookupd_is_not_counted_as_the_nodes_silence() -> None:
    """Both nodes pinged at 1000; lookupd then did not run for 3 s: at 1003 their heartbeats
    are 3 s old, but lookupd read nothing in that time. Excused, they are up; a node silent
    before the stall as well stays down."""
    liveness = Liveness(heartbeat_timeout=2.0, start_grace=6.0)
    liveness.connected(A, 1000.0)
    liveness.connected(B, 997.5)
    assert not liveness.is_alive(A, 1003.0)
    liveness.excuse(2.9, 1003.0)
    assert liveness.is_alive(A, 1003.0)
    assert not liveness.is_alive(B, 1003.0)  # 5.5 s silent, 2.9 s of it excused
    liveness.excuse(100.0, 1003.0)
    assert liveness.views(1003.0)[A].last_heartbeat == 1003.0  # never later than now


async def test_a_blocked_event_loop_is_excused_by_the_watch(tmp_path: Path) -> None:
    """The event loop blocks for 1.2 s (wall clock): the watch sees its timer that late and
    moves every heartbeat on by it, so the next decision fails nobody over."""
    cluster = Cluster(MetadataStore(tmp_path), Timeouts())
    supervisor = Supervisor(cluster, Settings(heartbeat_timeout=1.0))
    cluster.liveness.connected(A, cluster.clock())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(supervisor.watch_stalls)
        await trio.sleep(0.15)
        beat = cluster.liveness.views(cluster.clock())[A].last_heartbeat
        time.sleep(1.2)  # the stall under test
        await trio.sleep(0.2)
        nursery.cancel_scope.cancel()
    assert supervisor.stalls == 1
    now = cluster.clock()
    assert cluster.liveness.views(now)[A].last_heartbeat >= beat + 1.0
    assert cluster.liveness.is_alive(A, now)


def test_a_pnsq_nodes_registrations_are_heartbeats(tmp_path: Path) -> None:
    """A node registering hundreds of partitions sends its next PING after them; lookupd
    busy answering them must not take it for silent meanwhile."""
    clock = Clock()
    cluster = Cluster(MetadataStore(tmp_path), Timeouts(), clock=clock)
    body = {"broadcast_address": "a", "tcp_port": 1, "http_port": 2, "version": "1.3.0"}
    body[EXTENSIONS_KEY] = [EXT_PARTITIONS]
    cluster.identify("peer", decode_identify(json.dumps(body).encode()))
    clock.now += 1.5
    cluster.register("peer", "t", None, 0)
    assert cluster.liveness.views(clock.now)[A].last_heartbeat == clock.now
    clock.now += 1.5
    cluster.unregister("peer", "t", None, 0)
    assert cluster.liveness.views(clock.now)[A].last_heartbeat == clock.now
    assert cluster.liveness.is_alive(A, clock.now + 1.9)


def two_partitions_led_apart(path: Path, clock: Clock) -> Cluster:
    """Topic t: partition 0 led by A, partition 1 by B, each with the other as in-sync
    replica; both nodes connected at ``clock.now``."""
    store = MetadataStore(path)
    parts = (
        PartitionAssignment(A, (B,), 3, (A, B)),
        PartitionAssignment(B, (A,), 3, (B, A)),
    )
    store.save([TopicPlacement("t", TopicMeta(2, 2), parts)])
    cluster = Cluster(store, Timeouts(), clock=clock)
    cluster.load()
    cluster.liveness.connected(A, clock.now)
    cluster.liveness.connected(B, clock.now)
    return cluster


def caught_up(cluster: Cluster, leader: str, follower: str, epochs: dict[int, int]) -> None:
    """``leader``'s progress report on the partitions it leads (number -> epoch):
    ``follower`` caught up and confirmed on each."""
    entries: list[dict[str, object]] = [
        {
            "topic": "t",
            "partition": number,
            "epoch": epoch,
            "caught_up": [follower],
            "lagging": [],
            "confirmed": [follower],
        }
        for number, epoch in epochs.items()
    ]
    cluster.report_progress(leader, entries)


def led_by_a_b_out_of_sync(tmp_path: Path) -> tuple[Clock, Cluster, Supervisor]:
    """One partition led by A at epoch 3, B its replica outside the ISR, both connected."""
    clock = Clock()
    store = MetadataStore(tmp_path)
    placed = TopicPlacement("t", TopicMeta(1, 2), (PartitionAssignment(A, (B,), 3, (A,)),))
    store.save([placed])
    cluster = Cluster(store, Timeouts(), clock=clock)
    cluster.load()
    cluster.liveness.connected(A, clock.now)
    cluster.liveness.connected(B, clock.now)
    return clock, cluster, Supervisor(cluster, Settings())


async def test_a_leader_cut_off_from_lookupd_stays_down_while_it_reports_over_http(
    tmp_path: Path,
) -> None:
    """The fault test's cut: A's registration link to lookupd goes silent (the connection
    stays open, nothing passes), while A still reaches lookupd's HTTP port: it learns it now
    follows B, catches up through a link the cut left open, and keeps sending its progress
    reports. Its partition fails over to B; B reports A caught up. A must not count as up:
    taken for up by its reports, it was put back in the ISR and handed its leadership back
    by balancing (0.2 s after the failover), which it could not serve, and once its reports
    stopped the partition went offline with no in-sync replica."""
    clock = Clock()
    cluster = two_partitions_led_apart(tmp_path, clock)
    supervisor = Supervisor(cluster, Settings())
    assert await supervisor.step() == []
    for _ in range(5):  # A silent since the cut; B pings
        clock.now += 0.5
        cluster.liveness.heartbeat(B, clock.now)
    failover, shrink = await supervisor.step()
    assert (failover.leader, failover.epoch, failover.isr) == (B, 4, (B,))
    assert (shrink.leader, shrink.epoch, shrink.isr) == (B, 3, (B,))
    clock.now += 0.2
    cluster.liveness.heartbeat(B, clock.now)
    cluster.report_progress(A, [])  # A leads nothing now; its report still comes
    caught_up(cluster, B, A, {0: 4, 1: 3})
    assert await supervisor.step() == []
    assert not cluster.liveness.is_alive(A, clock.now)
    for part in cluster.placements["t"].partitions:
        assert (part.leader, part.isr) == (B, (B,))


async def test_a_node_back_after_a_failover_rejoins_the_isr_at_once_and_leads_after_the_grace(
    tmp_path: Path,
) -> None:
    """A, failed over, comes back (its registration link heals: PINGs again) and B reports it
    caught up: it rejoins the ISR at once, but balancing gives it a leadership back only once
    it has stayed up for ``balance_grace``."""
    clock = Clock()
    cluster = two_partitions_led_apart(tmp_path, clock)
    settings = Settings(balance_grace=5.0)
    supervisor = Supervisor(cluster, settings)
    for _ in range(5):  # A silent, B pings
        clock.now += 0.5
        cluster.liveness.heartbeat(B, clock.now)
    failover, _ = await supervisor.step()
    assert failover.leader == B
    clock.now += 1.0
    for node in (A, B):  # A's PINGs pass again
        cluster.liveness.heartbeat(node, clock.now)
    back = clock.now
    caught_up(cluster, B, A, {0: 4, 1: 3})
    changes = await supervisor.step()
    assert [c.isr for c in changes] == [(B, A), (B, A)]
    assert all("balance" not in c.reason for c in changes)
    for _ in range(9):  # up to 4.5 s after it came back
        clock.now += 0.5
        for node in (A, B):
            cluster.liveness.heartbeat(node, clock.now)
        assert await supervisor.step() == []
    clock.now = back + 5.0
    for node in (A, B):
        cluster.liveness.heartbeat(node, clock.now)
    changes = await supervisor.step()
    assert any("balance: leader move" in c.reason for c in changes)


async def test_a_stall_seen_first_by_a_decision_is_excused_before_it(tmp_path: Path) -> None:
    """After the event loop blocked, the watch and the supervisor wake together in either
    order: the decision taken first must not fail over the nodes the watch is about to
    excuse (and excusing them afterwards would bring them back: a second failover)."""
    store = MetadataStore(tmp_path)
    placed = TopicPlacement("t", TopicMeta(1, 2), (PartitionAssignment(A, (B,), 3, (A, B)),))
    store.save([placed])
    cluster = Cluster(store, Timeouts(), heartbeat_timeout=1.0)
    cluster.load()
    supervisor = Supervisor(cluster, Settings(heartbeat_timeout=1.0))
    cluster.liveness.connected(A, cluster.clock())
    cluster.liveness.connected(B, cluster.clock())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(supervisor.watch_stalls)
        await trio.sleep(0.15)
        time.sleep(1.3)  # the stall under test
        changes = await supervisor.step()  # before the watch's task runs again
        await trio.sleep(0.25)  # the watch wakes, late: the stall is excused already
        nursery.cancel_scope.cancel()
    assert changes == []
    assert supervisor.stalls == 1
    assert cluster.placements["t"].partitions[0].leader == A


async def test_a_copy_removed_and_added_again_is_not_in_sync_by_the_report_before(
    tmp_path: Path,
) -> None:
    """A's report said B caught up and confirmed. B's copy is removed (a replicator change, a
    move) and added again, empty, under the same epoch: that report no longer speaks for B,
    so B does not rejoin the ISR until A says it caught up again (in the ISR, B could have been
    promoted without the messages A acknowledged). A deleted topic's reports go with it."""
    clock, cluster, supervisor = led_by_a_b_out_of_sync(tmp_path)
    caught_up(cluster, A, B, {0: 3})
    removed = Change("t", 0, A, (), (A,), 3, False, "replica removed")
    added = Change("t", 0, A, (B,), (A,), 3, False, "replica added")
    supervisor._apply(removed)
    supervisor._apply(added)
    part = view_of(cluster, Settings(), clock.now).partitions[0]
    assert (part.caught_up, part.confirmed) == (frozenset(), frozenset())
    assert await supervisor.step() == []  # not put back in the ISR
    assert cluster.placements["t"].partitions[0].isr == (A,)
    caught_up(cluster, A, B, {0: 3})  # the leader's word on the new copy
    (expand,) = await supervisor.step()
    assert expand.isr == (A, B)
    await cluster.delete_topic("t")
    assert cluster.liveness.progress == {}


async def test_a_leaving_leader_hands_over_only_after_it_confirms_a_rejoined_follower(
    tmp_path: Path,
) -> None:
    """B restarted and caught up: A's report puts it back in the ISR. A then shuts down
    cleanly (the next node of a rolling restart). Until A applied the grown ISR it
    acknowledged publishes without waiting for B, so B may lack the last of them: A keeps
    leading until a report made after the ISR grew confirms B (the report that put B back
    cannot: seen in a rolling restart under load, one acknowledged message lost)."""
    _, cluster, supervisor = led_by_a_b_out_of_sync(tmp_path)
    caught_up(cluster, A, B, {0: 3})  # caught up, and (by an older ISR) confirmed
    (expand,) = await supervisor.step()
    assert (expand.leader, expand.isr) == (A, (A, B))
    assert cluster.leaving(A)
    assert await supervisor.step() == []  # A leads on
    assert cluster.placements["t"].partitions[0].leader == A
    caught_up(cluster, A, B, {0: 3})  # A's word under the grown ISR
    (handover,) = await supervisor.step()
    assert (handover.leader, handover.epoch, handover.isr) == (B, 4, (B,))


async def test_a_killed_leader_is_not_succeeded_by_a_follower_it_never_confirmed(
    tmp_path: Path,
) -> None:
    """A reports B caught up: lookupd puts B in the ISR. A is killed before a report of its
    confirms B (A acknowledged publishes without waiting for B until it applied the grown
    ISR): the partition goes offline until A is back, as with A alone in sync, rather than
    B leading without the last of them. Once confirmed, B would have been promoted."""
    clock, cluster, supervisor = led_by_a_b_out_of_sync(tmp_path)
    entry = {"topic": "t", "partition": 0, "epoch": 3, "caught_up": [B], "lagging": []}
    cluster.report_progress(A, [{**entry, "confirmed": []}])
    (expand,) = await supervisor.step()
    assert expand.isr == (A, B)
    assert cluster.liveness.joined == {("t", 0): frozenset({B})}
    cluster.liveness.disconnected(A, clock.now)
    (offline,) = await supervisor.step()
    assert (offline.leader, offline.epoch, offline.offline) == (A, 3, True)
    cluster.liveness.connected(A, clock.now)
    (back,) = await supervisor.step()
    assert (back.leader, back.epoch, back.offline) == (A, 4, False)
    assert cluster.liveness.joined == {("t", 0): frozenset({B})}  # (kept in the ISR)
    cluster.report_progress(A, [{**entry, "epoch": 4, "confirmed": [B]}])
    assert cluster.liveness.joined == {}
    cluster.liveness.disconnected(A, clock.now)
    (failover,) = await supervisor.step()
    assert (failover.leader, failover.epoch) == (B, 5)


# ------------------------------------------------- the views kept from one decision to the next


def cluster_of_topics(clock: Clock, topics: int, partitions: int) -> Cluster:
    """``topics`` topics of ``partitions`` partitions over A, B and C, two in-sync copies each."""
    nodes = (A, B, "c:1")
    cluster = Cluster(MetadataStore(None), Timeouts(), clock=clock)
    for t in range(topics):
        parts = []
        for p in range(partitions):
            leader, replica = nodes[p % 3], nodes[(p + 1) % 3]
            parts.append(PartitionAssignment(leader, (replica,), 1, (leader, replica)))
        cluster.placements[f"t{t}"] = TopicPlacement(
            f"t{t}", TopicMeta(partitions, 2), tuple(parts)
        )
    for node in nodes:
        cluster.liveness.connected(node, clock.now)
    return cluster


def test_a_kept_view_is_the_fresh_one_after_each_kind_of_change() -> None:
    """Views keeps each topic's partitions while its placement, offline partitions and reports
    stay the same; after every kind of change it gives what a fresh build gives, and looks at
    the partitions that are not quiet (lookupd.core.quiet)."""
    clock = Clock()
    cluster = cluster_of_topics(clock, topics=3, partitions=6)
    views, settings = Views(), Settings()

    def check() -> list[int]:
        kept = views.view(cluster, settings, clock.now)
        fresh = view_of(cluster, settings, clock.now)
        assert kept.partitions == fresh.partitions
        assert kept.counts == Counts.of(fresh.partitions)
        health = Health(fresh.nodes, settings, clock.now, fresh.removing, fresh.upgrading)
        assert kept.candidates == narrow(fresh, health.spare).candidates
        assert kept.candidates is not None
        return list(kept.candidates)

    assert check() == []  # all in sync, every node alive
    lagging = Progress(A, 1, frozenset(), frozenset({B}))
    cluster.liveness.report("t1", 0, lagging)  # t1/0: A leads, B lags
    assert check() == [6]
    cluster.offline.add(("t2", 1))
    assert check() == [6, 13]
    placed = cluster.placements["t0"]
    cluster.placements["t0"] = placed.with_partition(
        2, PartitionAssignment("c:1", (A,), 2, ("c:1",))
    )
    assert check() == [2, 6, 13]
    cluster.liveness.isr_changed("t0", 2, ("c:1",), ("c:1", A), False)  # A joins: joined
    assert views.view(cluster, settings, clock.now).partitions[2].joined == {A}
    assert check() == [2, 6, 13]
    cluster.liveness.disconnected(B, clock.now)  # B holds copies of 4 in 6 partitions a topic
    on_b = [t * 6 + p for t in range(3) for p in range(6) if p % 3 in (0, 1)]
    assert check() == sorted({*on_b, 2, 6, 13})


async def test_a_decision_on_one_partition_takes_the_same_time_in_a_larger_cluster() -> None:
    """What the supervisor builds and decides for one partition's report is that topic's and
    that partition's, whatever the other topics hold (counted, not timed: the partitions
    built afresh and the partitions decide looks at)."""
    built: list[int] = []
    for topics in (2, 20):
        clock = Clock()
        cluster = cluster_of_topics(clock, topics=topics, partitions=30)
        supervisor = Supervisor(cluster, Settings())
        assert await supervisor.step() == []
        before = {name: t.partitions for name, t in supervisor.views._topics.items()}
        cluster.liveness.report("t0", 3, Progress(A, 1, frozenset(), frozenset({B})))
        view = supervisor.views.view(cluster, supervisor.settings, clock.now)
        assert view.candidates == [3]
        (change,) = await supervisor.step()
        assert (change.topic, change.partition, change.isr) == ("t0", 3, (A,))
        after = supervisor.views._topics
        built.append(sum(t.partitions is not before.get(n) for n, t in after.items()))
    assert built == [1, 1]  # only t0 was built again, with 2 topics as with 20


async def test_a_follower_never_confirmed_stays_unpromotable_across_a_lookupd_restart(
    tmp_path: Path,
) -> None:
    """As above, with lookupd restarted (or another lookupd taking over) between B joining the
    ISR and A's confirmation: that B is not confirmed is saved with the ISR that holds it, so
    the next lookupd does not take B, in the ISR it reads, for a member A waited for. A never
    comes back after the restart: the partition goes offline rather than B leading without
    what A acknowledged. A's confirmation, once it comes, is saved too: after another restart
    B is promoted when A dies."""
    clock, cluster, supervisor = led_by_a_b_out_of_sync(tmp_path)
    entry = {"topic": "t", "partition": 0, "epoch": 3, "caught_up": [B], "lagging": []}
    cluster.report_progress(A, [{**entry, "confirmed": []}])
    (expand,) = await supervisor.step()
    assert expand.isr == (A, B)

    def restarted() -> tuple[Cluster, Supervisor]:
        again = Cluster(MetadataStore(tmp_path), Timeouts(), clock=clock)
        again.load()
        return again, Supervisor(again, Settings())

    cluster, supervisor = restarted()
    assert cluster.liveness.joined == {("t", 0): frozenset({B})}
    cluster.liveness.connected(B, clock.now)
    clock.now += 60.0  # A never reconnects: dead once the start grace is over
    cluster.liveness.heartbeat(B, clock.now)
    (offline,) = await supervisor.step()
    assert (offline.leader, offline.epoch, offline.offline) == (A, 3, True)

    cluster, supervisor = restarted()  # A back, confirms B; then lookupd restarts again
    for node in (A, B):
        cluster.liveness.connected(node, clock.now)
    assert await supervisor.step() == []  # A leads as saved
    cluster.report_progress(A, [{**entry, "confirmed": [B]}])
    assert cluster.liveness.joined == {}
    assert await supervisor.step() == []  # (the confirmation saved)
    cluster, supervisor = restarted()
    assert cluster.liveness.joined == {}
    cluster.liveness.connected(B, clock.now)
    clock.now += 60.0
    cluster.liveness.heartbeat(B, clock.now)
    (failover,) = await supervisor.step()
    assert (failover.leader, failover.epoch, failover.isr) == (B, 4, (B,))


async def test_a_lookupd_taking_over_knows_the_members_not_confirmed_yet(tmp_path: Path) -> None:
    """HA: a follower lookupd takes the leader's saved metadata (:meth:`Cluster.follow`), and
    with it which ISR members joined unconfirmed: elected next, it promotes them no sooner
    than the leader lookupd would have; the leader's confirmation, saved, reaches it too."""
    clock, cluster, supervisor = led_by_a_b_out_of_sync(tmp_path)
    entry = {"topic": "t", "partition": 0, "epoch": 3, "caught_up": [B], "lagging": []}
    cluster.report_progress(A, [{**entry, "confirmed": []}])
    await supervisor.step()
    follower = Cluster(MetadataStore(None), Timeouts(), clock=clock)
    follower.follow(MetadataStore(tmp_path).load())
    assert follower.liveness.joined == {("t", 0): frozenset({B})}
    cluster.report_progress(A, [{**entry, "confirmed": [B]}])
    await supervisor.step()
    follower.follow(MetadataStore(tmp_path).load())
    assert follower.liveness.joined == {}
