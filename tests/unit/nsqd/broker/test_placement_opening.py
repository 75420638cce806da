"""lookupd's placement applied with the partition logs opened by a worker thread
(:meth:`Broker.apply_placement`): roles change before anything is opened, the event loop runs
while the logs are opened, a topic being opened is neither created by a client nor deleted
under the thread, and a log opened for a placement that went away is closed."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import trio

from nsqd.broker import Broker, BrokerConfig, StorageError, open_broker
from nsqd.broker.assignments import apply_assignments, wanted_topics
from nsqd.broker.logs import LogOpener, Opened
from nsqd.broker.persistence import topic_directory
from nsqd.core.errors import NotLeaderError
from nsqd.core.ownership import Placement, Role
from nsqd.storage import checkpoint
from protocol.lookup import PartitionAssignment, TopicAssignment

NODE, OTHER = "127.0.0.1:4150", "127.0.0.1:4250"


def _topic(name: str, count: int, leader: str = NODE, epoch: int = 1) -> TopicAssignment:
    """``count`` partitions led by ``leader``, with this node as replica when it does not."""
    replicas = () if leader == NODE else (NODE,)
    parts = tuple(PartitionAssignment(leader, replicas, epoch) for _ in range(count))
    return TopicAssignment(name, count, 1, parts, {})


class _Gate:
    """Holds :meth:`LogOpener.open_all` in its worker thread until released."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls: list[list[tuple[str, int]]] = []
        real = LogOpener.open_all

        def held(opener: LogOpener, wanted: list[tuple[str, int, Placement]]) -> Opened:
            self.calls.append([(name, number) for name, number, _ in wanted])
            self.entered.set()
            assert self.release.wait(10)
            return real(opener, wanted)

        monkeypatch.setattr(LogOpener, "open_all", held)

    async def wait_entered(self) -> None:
        while not self.entered.is_set():
            await trio.sleep(0.001)


async def _apply(broker: Broker, document: list[TopicAssignment], per_step: int = 64) -> None:
    await broker.apply_placement(NODE, document, wanted_topics(NODE, document), per_step)


async def test_roles_change_first_and_new_logs_open_while_the_loop_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        await _apply(broker, [_topic("old", 1)])
        gate = _Gate(monkeypatch)
        # the old topic's partition goes to OTHER (a failover) and a new topic comes
        document = [_topic("old", 1, leader=OTHER, epoch=2), _topic("new", 3)]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_apply, broker, document)
            await gate.wait_entered()
            # the loop runs while the thread opens; the failover is applied already
            old = broker.get_topic("old").partitions[0]
            assert old.state.role is Role.REPLICA
            assert old.state.epoch == 2
            assert broker.find_topic("new") is None  # joins the table once opened
            with pytest.raises(NotLeaderError):
                broker.get_or_create_topic("new")  # not opened twice by a client meanwhile
            gate.release.set()
        assert gate.calls == [[("new", 0), ("new", 1), ("new", 2)]]
        new = broker.get_topic("new")
        assert [p.number for p in new.partitions] == [0, 1, 2]
        assert all(p.state.leads and p.state.epoch == 1 for p in new.partitions)
        assert broker.get_or_create_topic("new") is new


async def test_a_big_topic_opens_step_by_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = _Gate(monkeypatch)
    gate.release.set()
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        await _apply(broker, [_topic("big", 10)], per_step=4)
        assert [len(call) for call in gate.calls] == [4, 4, 2]
        assert [p.number for p in broker.get_topic("big").partitions] == list(range(10))


async def test_a_topic_is_not_deleted_under_the_thread_opening_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        await _apply(broker, [_topic("t", 1)])
        gate = _Gate(monkeypatch)
        two = TopicAssignment("t", 2, 1, (PartitionAssignment(NODE, (), 1),) * 2, {})
        deleted = trio.Event()

        async def delete() -> None:
            await broker.delete_topic("t")
            deleted.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(_apply, broker, [two])  # partition 1 added
            await gate.wait_entered()
            nursery.start_soon(delete)
            await trio.sleep(0.05)
            assert not deleted.is_set()  # waits for the opening to end
            gate.release.set()
        assert deleted.is_set()
        assert broker.find_topic("t") is None
        assert not (tmp_path / "t").exists()  # nothing left behind by the thread


async def test_a_log_opened_for_a_placement_gone_is_closed(tmp_path: Path) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        registry = broker.registry
        placement = Placement(Role.LEADER, 1, NODE)
        opened = registry.logs.open_all([("gone", 0, placement)])
        (partition,) = opened.values()
        document = [_topic("t", 1)]
        apply_assignments(registry, NODE, document, None, None, opened)
        assert opened == {}
        with pytest.raises(StorageError):  # closed
            partition.log.read(0, 1)
        assert broker.find_topic("gone") is None


async def test_a_new_topics_partitions_are_opened_with_one_fsync_of_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening a new topic's partitions makes their directories first, the topic's directory
    fsynced once for all of them; each is known as created (the syncer's first pass reads
    that), one opened again is not."""
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        logs = broker.registry.logs
        synced: list[Path] = []
        real = checkpoint.fsync_directory

        def fsync_directory(directory: Path) -> None:
            synced.append(directory)
            real(directory)

        monkeypatch.setattr(checkpoint, "fsync_directory", fsync_directory)
        placement = Placement(Role.LEADER, 1, NODE)
        opened = logs.open_all([("t", n, placement) for n in range(4)])
        topic = topic_directory(tmp_path, "t")
        assert synced.count(topic) == 1
        assert all(p.created for p in opened.values())
        for partition in opened.values():
            partition.log.close()
        again = logs.open_all([("t", 0, placement)])
        assert not again["t", 0].created
        again["t", 0].log.close()
