"""What lookupd shows while an operation runs: a move's bytes left (from its leader's progress
reports, current leader and epoch only, an older nsqd's reports without bytes taken as
unknown), the operations' gauges on /metrics, and a pnsq node's rack on /nodes."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from lookupd.core import views
from lookupd.core.decide import Settings
from lookupd.core.moves import Move
from lookupd.core.placement import TopicMeta, TopicPlacement
from lookupd.core.registry import Registry
from lookupd.core.views import Timeouts
from lookupd.http.metrics import LookupdMetrics
from lookupd.state.cluster import Cluster
from lookupd.state.store import MetadataStore
from lookupd.state.supervisor import Supervisor
from protocol.lookup import PartitionAssignment
from protocol.lookup_v1 import PeerIdentity

A, B, C = "a:1", "b:1", "c:1"
NOW = 1000.0


def _cluster(path: Path, move: Move, *, removing: dict[str, float] | None = None) -> Cluster:
    """Topic ``t``: partition 0 led by A (epoch 3) with replica B, and ``move`` under way
    (C assigned, outside the in-sync set); saved to ``path`` and loaded."""
    store = MetadataStore(path)
    part = PartitionAssignment(A, (B, C), 3, (A, B))
    store.save([TopicPlacement("t", TopicMeta(1, 2), (part,), moves=(move,))], {}, removing)
    cluster = Cluster(store, Timeouts(), clock=lambda: NOW)
    cluster.load()
    return cluster


def _report(epoch: int = 3, **extra: object) -> list[dict[str, object]]:
    entry = {"topic": "t", "partition": 0, "epoch": epoch, "caught_up": [B], "lagging": []}
    return [{**entry, "confirmed": [B], **extra}]


def _gauges(cluster: Cluster) -> dict[str, float]:
    text = LookupdMetrics(cluster, Supervisor(cluster, Settings())).render().decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("pnsq_lookupd_")
    }


def test_a_moves_bytes_left_come_from_its_leaders_report(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, Move(0, B, C, leader=False))
    [(_, _, left)] = cluster.moves_in_progress()
    assert left is None  # no report yet
    gauges = _gauges(cluster)
    assert gauges["pnsq_lookupd_moves_in_progress"] == 1
    assert gauges["pnsq_lookupd_moves_bytes_unknown"] == 1
    assert gauges["pnsq_lookupd_move_bytes_left"] == 0

    cluster.report_progress(A, _report(behind={B: 0, C: 5000}))
    [(_, _, left)] = cluster.moves_in_progress()
    assert left == 5000
    gauges = _gauges(cluster)
    assert gauges["pnsq_lookupd_move_bytes_left"] == 5000
    assert gauges["pnsq_lookupd_moves_bytes_unknown"] == 0

    cluster.report_progress(A, _report(behind={B: 0, C: 1200}))  # the bytes alone changed
    assert cluster.moves_in_progress()[0][2] == 1200
    assert cluster.liveness.progress[("t", 0)].behind == {B: 0, C: 1200}


def test_stale_or_older_reports_leave_the_bytes_unknown(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, Move(0, B, C, leader=False))
    cluster.report_progress(B, _report(behind={C: 10}))  # not the leader: ignored
    assert cluster.moves_in_progress()[0][2] is None
    cluster.report_progress(A, _report(epoch=2, behind={C: 10}))  # an old epoch: ignored
    assert cluster.moves_in_progress()[0][2] is None
    cluster.report_progress(A, _report())  # an nsqd that counts no bytes: still taken
    assert cluster.liveness.progress[("t", 0)].caught_up == {B}
    assert cluster.moves_in_progress()[0][2] is None
    cluster.report_progress(A, _report(behind={C: -1, B: "x"}))  # malformed: dropped
    assert cluster.liveness.progress[("t", 0)].behind == {}


def test_a_target_that_leads_has_nothing_left(tmp_path: Path) -> None:
    store = MetadataStore(tmp_path)
    part = PartitionAssignment(C, (A,), 4, (C, A))  # handed over, A not dropped yet
    placed = TopicPlacement("t", TopicMeta(1, 2), (part,), moves=(Move(0, A, C, leader=True),))
    store.save([placed])
    cluster = Cluster(store, Timeouts(), clock=lambda: NOW)
    cluster.load()
    assert cluster.moves_in_progress()[0][2] == 0


def test_draining_nodes_are_counted(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, Move(0, B, C, leader=False), removing={B: NOW})
    gauges = _gauges(cluster)
    assert gauges["pnsq_lookupd_draining_nodes"] == 1
    assert gauges["pnsq_lookupd_partitions"] == 1


async def test_balance_and_upgrade_gauges_follow_the_switches(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, Move(0, B, C, leader=False))
    gauges = _gauges(cluster)
    assert (gauges["pnsq_lookupd_balance_enabled"], gauges["pnsq_lookupd_upgrading"]) == (1, 0)
    await cluster.set_switches(balance=False, upgrading=True)
    gauges = _gauges(cluster)
    assert (gauges["pnsq_lookupd_balance_enabled"], gauges["pnsq_lookupd_upgrading"]) == (0, 1)
    assert gauges["pnsq_lookupd_balanced"] == 1  # no live node: nothing to move anywhere


def test_nodes_show_the_rack_of_a_pnsq_node_only() -> None:
    registry = Registry()
    racked = PeerIdentity("127.0.0.1", 4150, 4151, "1.3.0", "h", rack="r-a")
    plain = PeerIdentity("127.0.0.1", 4250, 4251, "1.3.0", "h")
    stock = PeerIdentity("127.0.0.1", 4350, 4351, "1.3.0", "h", rack="r-c")  # not partitioned
    registry.identify("p1", racked, NOW, partitioned=True)
    registry.identify("p2", plain, NOW, partitioned=True)
    registry.identify("p3", stock, NOW)
    listed = views.nodes(registry, NOW, Timeouts())["producers"]
    assert isinstance(listed, list)
    by_port = {entry["tcp_port"]: entry for entry in listed}
    assert by_port[4150]["rack"] == "r-a"
    assert "rack" not in by_port[4250]  # registered none
    assert "rack" not in by_port[4350]  # a stock nsqd's entry keeps nsqlookupd's keys
