"""nsqd.replication.progress: a leader's report says how many bytes each replica still lacks,
and reports go out when that is worth telling lookupd (not on every byte)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nsqd.broker import Broker, BrokerConfig, NewRecord, Topic, open_broker
from nsqd.broker.partition import Partition
from nsqd.core.partition_state import Placement, Role
from nsqd.replication import progress
from nsqd.replication.progress import COPY_REPORT_INTERVAL, Outbox, ProgressTracker, Report
from nsqd.storage.record import HEADER_SIZE

LEADER, IN_SYNC, COPYING, SILENT = "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4"
BODY = 100  # bytes of each message
RECORD = HEADER_SIZE + BODY


def _lead_and_append(broker: Broker, batches: int) -> None:
    """Lead ``t``/0 with three replicas (one in sync), ``batches`` appends of 10 messages."""
    topic = broker.get_or_create_topic("t", 1)
    partition = topic.partitions[0]
    replicas = (IN_SYNC, COPYING, SILENT)
    partition.state.apply(Placement(Role.LEADER, 2, LEADER, replicas, (LEADER, IN_SYNC)))
    for b in range(batches):
        partition.log.append([NewRecord(b * 10 + i, b"m" * BODY) for i in range(10)])
        partition.state.appended(partition.log.end_offset)


async def test_the_report_counts_the_bytes_each_replica_lacks(tmp_path: Path) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        _lead_and_append(broker, 5)
        state = broker.get_topic("t").partitions[0].state
        state.follower_acked(IN_SYNC, 50, now=10.0)  # everything
        state.follower_acked(COPYING, 20, now=10.0)  # two appends of five
        (report,) = ProgressTracker(lag_max=5.0).reports(broker, now=10.0)
        # SILENT has acknowledged nothing under this epoch: unknown, so left out
        assert report["behind"] == {IN_SYNC: 0, COPYING: 30 * RECORD}
        assert report["caught_up"] == [IN_SYNC]
        # the same count on /stats and /metrics
        (stats,) = broker.get_topic("t").partition_statistics()
        assert dict(stats.replication.replica_lag_bytes) == report["behind"]
        state.follower_acked(COPYING, 50, now=11.0)
        (report,) = ProgressTracker(lag_max=5.0).reports(broker, now=11.0)
        assert report["behind"] == {IN_SYNC: 0, COPYING: 0}


async def test_a_replica_node_reports_nothing(tmp_path: Path) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        topic = broker.get_or_create_topic("t", 1)
        placement = Placement(Role.REPLICA, 2, IN_SYNC, (LEADER,), (IN_SYNC, LEADER))
        topic.partitions[0].state.apply(placement)
        assert ProgressTracker(lag_max=5.0).reports(broker, now=1.0) == []
        (stats,) = topic.partition_statistics()
        assert stats.replication.replica_lag_bytes == ()


def _report(caught_up: list[str], behind: dict[str, int], partition: int = 0) -> Report:
    return {
        "topic": "t",
        "partition": partition,
        "epoch": 2,
        "caught_up": caught_up,
        "lagging": [],
        "confirmed": caught_up,
        "behind": behind,
    }


def _posted(outbox: Outbox, reports: list[Report], now: float) -> list[Report]:
    """What ``outbox`` posts at ``now`` (and takes as posted)."""
    out, every = outbox.take(reports, now)
    outbox.posted(out, every, now)
    return out


def test_a_report_goes_when_it_decides_something_or_a_copy_moves_on() -> None:
    other = _report([IN_SYNC], {IN_SYNC: 0}, partition=1)
    start = _report([IN_SYNC], {IN_SYNC: 0, COPYING: 9000})
    outbox = Outbox(repeat=5.0)
    assert _posted(outbox, [start, other], 0.0) == [start, other]  # the first: all of them
    assert _posted(outbox, [start, other], 0.1) == []  # nothing changed
    copied = _report([IN_SYNC], {IN_SYNC: 0, COPYING: 4000})
    assert _posted(outbox, [copied, other], 0.3) == []  # bytes alone: not 4 times a second
    assert _posted(outbox, [copied, other], COPY_REPORT_INTERVAL) == [copied]  # every second
    caught_up = _report([COPYING, IN_SYNC], {IN_SYNC: 0, COPYING: 0})
    assert _posted(outbox, [caught_up, other], 1.1) == [caught_up]  # caught up: at once
    jitter = _report([IN_SYNC], {IN_SYNC: 300}, partition=1)
    assert _posted(outbox, [caught_up, jitter], 3.0) == []  # an in-sync follower's jitter
    assert _posted(outbox, [caught_up, jitter], 5.0) == [caught_up, jitter]  # the repeat


def test_after_a_failed_post_every_report_goes_again() -> None:
    """A post that failed may have met a lookupd that restarted (and holds no report): the
    next carries them all, unchanged ones too."""
    one, two = _report([IN_SYNC], {IN_SYNC: 0}), _report([IN_SYNC], {IN_SYNC: 0}, partition=1)
    outbox = Outbox(repeat=5.0)
    _posted(outbox, [one, two], 0.0)
    lagging = {**two, "caught_up": [], "lagging": [IN_SYNC]}
    assert outbox.take([one, lagging], 0.5) == ([lagging], False)
    outbox.failed()
    assert outbox.take([one, lagging], 0.75) == ([one, lagging], True)


async def test_a_follower_of_an_idle_log_is_not_late_the_moment_a_publish_arrives(
    tmp_path: Path,
) -> None:
    """IN_SYNC acknowledged the whole log at t=10; nothing was published for 30 s, so it had
    nothing to acknowledge. A publish at t=40 finds it short of the end until its
    acknowledgement comes: that is not lagging (lookupd would take it out of the in-sync set
    for nothing). Short of the end for ``lag_max`` from then on, it lags."""
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        _lead_and_append(broker, 1)
        partition = broker.get_topic("t").partitions[0]
        partition.state.follower_acked(IN_SYNC, 10, now=10.0)
        tracker = ProgressTracker(lag_max=5.0)
        (report,) = tracker.reports(broker, now=10.0)
        assert report["caught_up"] == [IN_SYNC]
        (report,) = tracker.reports(broker, now=40.0)  # idle: still holds everything
        assert report["caught_up"] == [IN_SYNC]
        assert report["lagging"] == [COPYING, SILENT]  # never acknowledged anything
        partition.log.append([NewRecord(10, b"m" * BODY)])  # the publish
        partition.state.appended(partition.log.end_offset)
        (report,) = tracker.reports(broker, now=40.1)
        assert IN_SYNC not in report["caught_up"]
        assert IN_SYNC not in report["lagging"]
        (report,) = tracker.reports(broker, now=44.0)
        assert IN_SYNC not in report["lagging"]
        (report,) = tracker.reports(broker, now=45.2)  # short of the end for 5.1 s
        assert IN_SYNC in report["lagging"]
        partition.state.follower_acked(IN_SYNC, 11, now=45.3)
        (report,) = tracker.reports(broker, now=45.3)
        assert report["caught_up"] == [IN_SYNC]


async def test_a_settled_partitions_report_is_kept_until_what_it_says_changes(
    tmp_path: Path,
) -> None:
    """Every replica holds the whole log: the report is the last one, the same object (a
    node leading thousands of idle partitions builds none four times a second), and what a
    tracker that kept nothing builds; an append, or a change of the in-sync set, and it is
    built again."""
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        _lead_and_append(broker, 2)
        partition = broker.get_topic("t").partitions[0]
        state = partition.state
        for node in (IN_SYNC, COPYING, SILENT):
            state.follower_acked(node, 20, now=10.0)
        tracker = ProgressTracker(lag_max=5.0)
        (first,) = tracker.reports(broker, now=10.0)
        (again,) = tracker.reports(broker, now=100.0)
        assert again is first
        assert [again] == ProgressTracker(lag_max=5.0).reports(broker, now=100.0)
        assert first["caught_up"] == [IN_SYNC, COPYING, SILENT]
        assert first["confirmed"] == [IN_SYNC]
        outbox = Outbox(repeat=5.0)
        _posted(outbox, [first], 99.9)
        assert _posted(outbox, [again], 100.0) == []  # the same object: not even compared

        partition.log.append([NewRecord(20, b"m" * BODY)])  # a publish: IN_SYNC is short
        state.appended(partition.log.end_offset)
        (after,) = tracker.reports(broker, now=100.1)
        assert after is not first
        assert after["caught_up"] == []
        assert after["behind"] == {IN_SYNC: RECORD, COPYING: RECORD, SILENT: RECORD}
        assert [after] == ProgressTracker(lag_max=5.0).reports(broker, now=100.1)

        for node in (IN_SYNC, COPYING, SILENT):
            state.follower_acked(node, 21, now=100.2)
        (settled,) = tracker.reports(broker, now=100.2)
        replicas = (IN_SYNC, COPYING, SILENT)
        state.apply(Placement(Role.LEADER, 2, LEADER, replicas, (LEADER, IN_SYNC, COPYING)))
        (wider,) = tracker.reports(broker, now=100.3)  # COPYING joined the in-sync set
        assert wider is not settled
        assert wider["confirmed"] == [IN_SYNC, COPYING]
        _posted(outbox, [settled], 100.2)
        assert _posted(outbox, [wider], 100.3) == [wider]
        assert [wider] == ProgressTracker(lag_max=5.0).reports(broker, now=100.3)


async def test_a_kept_report_is_given_again_without_looking_at_the_replicas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the partition's state stands still (its revision), its settled report is given
    again without a look at any replica; any change (here a follower's acknowledgement, which
    moves nothing the report says) makes the tracker look again."""
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        _lead_and_append(broker, 2)
        state = broker.get_topic("t").partitions[0].state
        for node in (IN_SYNC, COPYING, SILENT):
            state.follower_acked(node, 20, now=10.0)
        looks = 0
        real = progress._settled

        def counted(*args: Any) -> bool:
            nonlocal looks
            looks += 1
            return real(*args)

        monkeypatch.setattr(progress, "_settled", counted)
        tracker = ProgressTracker(lag_max=5.0)
        (first,) = tracker.reports(broker, now=10.0)
        for tick in range(100):
            assert tracker.reports(broker, now=10.25 + tick / 4) == [first]
        assert looks == 1
        state.follower_acked(IN_SYNC, 20, now=50.0)  # the same end again: a new revision
        (again,) = tracker.reports(broker, now=50.0)
        assert again == first
        assert looks == 2


async def test_only_the_partition_that_changed_is_reported_on_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two topics of settled partitions: ticks without a change build no report; an
    acknowledgement on one partition of one topic builds that partition's alone, and the
    reports stay what a tracker that kept nothing builds."""
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        replicas = (IN_SYNC, COPYING)
        for name in ("a", "b"):
            topic = broker.get_or_create_topic(name, 3)
            for partition in topic.partitions:
                partition.state.apply(Placement(Role.LEADER, 2, LEADER, replicas, (LEADER,)))
                partition.log.append([NewRecord(0, b"m" * BODY)])
                partition.state.appended(partition.log.end_offset)
                for node in replicas:
                    partition.state.follower_acked(node, 1, now=1.0)
        built: list[tuple[str, int]] = []
        real = ProgressTracker._report

        def counted(self: ProgressTracker, topic: Topic, partition: Partition, now: float) -> Any:
            built.append((topic.name, partition.number))
            return real(self, topic, partition, now)

        monkeypatch.setattr(ProgressTracker, "_report", counted)
        tracker = ProgressTracker(lag_max=5.0)
        first = tracker.reports(broker, now=1.0)
        assert len(first) == 6
        assert len(built) == 6
        built.clear()
        for tick in range(20):
            assert tracker.reports(broker, now=1.25 + tick / 4) == first
        assert built == []
        broker.get_topic("b").partitions[1].state.follower_acked(IN_SYNC, 1, now=7.0)
        assert tracker.reports(broker, now=7.0) == ProgressTracker(lag_max=5.0).reports(
            broker, now=7.0
        )
        assert built[0] == ("b", 1)
        assert len(built) == 7  # then the fresh tracker's six


async def test_a_topics_revision_moves_with_any_of_its_partitions_states(tmp_path: Path) -> None:
    """The tracker gives a topic's kept reports again while the topic's revision stands still
    (one look for the topic, none per partition): any partition's change must move it."""
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        topic = broker.get_or_create_topic("t", 2)
        first, second = topic.partitions
        before = topic.revision.value
        second.state.follower_acked(IN_SYNC, 0, now=1.0)
        assert topic.revision.value > before
        before = topic.revision.value
        first.state.appended(5)
        assert topic.revision.value > before
        assert first.state.shared is second.state.shared is topic.revision
