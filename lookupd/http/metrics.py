"""lookupd's ``/metrics`` (Prometheus text): the cluster as the failover supervisor sees it.

* ``pnsq_lookupd_partitions`` — placed partitions;
* ``pnsq_lookupd_offline_partitions`` — partitions with no live in-sync replica to lead them;
* ``pnsq_lookupd_under_replicated_partitions`` — in-sync set smaller than the copies placed;
* ``pnsq_lookupd_failovers_total`` — leader changes decided since this lookupd started;
* ``pnsq_lookupd_live_nodes`` — pnsq nodes connected and heartbeating;
* ``pnsq_lookupd_moves_in_progress`` — partition moves saved and not over yet (youzan's
  ``/topic/partition/move``, a drain's, a ``replicator`` change's);
* ``pnsq_lookupd_move_bytes_left`` — bytes the moves' targets still lack, summed over the moves
  whose leader reported them (``GET /topic/partition/moves`` lists them one by one);
* ``pnsq_lookupd_moves_bytes_unknown`` — moves whose bytes left are not known (the target has
  not reached its leader yet, or the leader does not count bytes);
* ``pnsq_lookupd_draining_nodes`` — nodes being drained (``/cluster/node/remove``), drained
  ones included until they are restored;
* ``pnsq_lookupd_balance_enabled`` — 1 while lookupd balances by itself (``--auto-balance``,
  ``/cluster/balance``), 0 when switched off;
* ``pnsq_lookupd_balanced`` — 1 when no balancing move is left to make (``/cluster/balance``);
* ``pnsq_lookupd_upgrading`` — 1 between ``/cluster/upgrade/begin`` and ``/done``.

The operations' gauges (moves, drains) come from :meth:`_ClusterCollector.operations`: the place
for any other operation's state.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..state.cluster import Cluster
from ..state.supervisor import Supervisor
from .cluster_admin import balance_state

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _ClusterCollector(Collector):
    def __init__(self, cluster: Cluster, supervisor: Supervisor) -> None:
        self.cluster = cluster
        self.supervisor = supervisor

    def collect(self) -> Iterator[Metric]:
        cluster = self.cluster
        parts = [p for placement in cluster.placements.values() for p in placement.partitions]
        under = sum(1 for p in parts if len(p.in_sync) < 1 + len(p.replicas))
        yield GaugeMetricFamily("pnsq_lookupd_partitions", "Placed partitions", value=len(parts))
        yield GaugeMetricFamily(
            "pnsq_lookupd_offline_partitions",
            "Partitions with no live in-sync replica to lead them",
            value=len(cluster.offline),
        )
        yield GaugeMetricFamily(
            "pnsq_lookupd_under_replicated_partitions",
            "Partitions whose in-sync set is smaller than their copies",
            value=under,
        )
        yield CounterMetricFamily(
            "pnsq_lookupd_failovers",
            "Leader changes decided since this lookupd started",
            value=self.supervisor.failovers,
        )
        yield GaugeMetricFamily(
            "pnsq_lookupd_live_nodes",
            "pnsq nodes connected and heartbeating",
            value=len(cluster.live_nodes()),
        )
        yield from self.operations()

    def operations(self) -> Iterator[Metric]:
        """The operator's operations in progress, as saved (what the nodes are told)."""
        moves = self.cluster.moves_in_progress()
        known = [left for _, _, left in moves if left is not None]
        yield GaugeMetricFamily(
            "pnsq_lookupd_moves_in_progress", "Partition moves not over yet", value=len(moves)
        )
        yield GaugeMetricFamily(
            "pnsq_lookupd_move_bytes_left",
            "Bytes the targets of the moves still lack (moves whose leader reported them)",
            value=sum(known),
        )
        yield GaugeMetricFamily(
            "pnsq_lookupd_moves_bytes_unknown",
            "Moves whose bytes left are not known",
            value=len(moves) - len(known),
        )
        yield GaugeMetricFamily(
            "pnsq_lookupd_draining_nodes",
            "Nodes being drained (/cluster/node/remove)",
            value=len(self.cluster.saved_removing),
        )
        state = balance_state(self.cluster, self.supervisor.settings.auto_balance)
        yield GaugeMetricFamily(
            "pnsq_lookupd_balance_enabled",
            "1 while lookupd balances copies and leaderships by itself",
            value=int(bool(state["enabled"])),
        )
        yield GaugeMetricFamily(
            "pnsq_lookupd_balanced",
            "1 when no balancing move is left to make",
            value=int(bool(state["balanced"])),
        )
        yield GaugeMetricFamily(
            "pnsq_lookupd_upgrading",
            "1 during a rolling upgrade (/cluster/upgrade/begin until /done)",
            value=int(bool(state["upgrading"])),
        )


class LookupdMetrics:
    """The exposition of one lookupd."""

    def __init__(self, cluster: Cluster, supervisor: Supervisor) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_ClusterCollector(cluster, supervisor))

    def render(self) -> bytes:
        return generate_latest(self.registry)
