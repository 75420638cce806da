"""youzan's cluster endpoints of lookupd's HTTP API: draining a node and the cluster's stats.

* ``POST /cluster/node/remove?remove_node=<node id>`` — drain the node (``restore=true``: stop
  draining it). youzan answers ``200`` with an empty body and carries the removal out in the
  background (its states ``marked``, ``pending``, ``data_transferred``, ``done``); pnsq answers
  ``200`` with how far the drain is, so the same request asked again tells when it is over::

      {"remove_node": "<id>", "removing": true | false, "state": "pending" | "done",
       "drained": false | true, "leaders": N, "replicas": N, "incoming": N}

  ``removing``: the node is being drained (false after ``restore=true``); ``drained`` (state
  ``done``): the node leads and replicates nothing and no move brings it a copy, as saved
  (what the nodes are told): it can be stopped with nothing lost. ``restore`` other than
  ``true`` or ``false`` is ``400 INVALID_ARG_RESTORE``; a node lookupd does not know, drained
  or restored, ``400 REMOVE_NODE_NOT_FOUND``.
* ``GET /cluster/stats`` — youzan's ``{"stable", "node_stat_list"}``: every node lookupd knows,
  with youzan's fields (``leader_load_factor`` and ``node_load_factor`` are here the partitions
  it leads, and leads or replicates) plus pnsq's ``node_id``, ``leaders``, ``replicas`` and
  ``removing``. ``stable``: no move in progress, nothing offline, every partition with its
  topic's ``replicator`` copies all in sync, nothing left on a node being drained.

* ``GET /cluster/balance`` — whether lookupd balances by itself (:mod:`lookupd.core.balance`);
  ``POST /cluster/balance?enable=true|false`` switches it (saved: it outlives a restart and a
  change of leader lookupd)::

      {"enabled": bool, "auto_balance": bool, "upgrading": bool, "balanced": bool,
       "moves": N}

  ``enabled``: the switch as it stands (``auto_balance``: the flag it defaults to); balancing
  runs while ``enabled`` and not ``upgrading``; ``balanced``: no balancing move is left to
  make; ``moves``: moves in progress (balancing's and the operator's).
* ``POST /cluster/upgrade/begin`` and ``/done`` (youzan's) — a rolling upgrade: between them a
  node that goes down is not replaced (it is restarting) and nothing is balanced; a node that
  leaves by SIGTERM hands its leaderships over first, as always. Answers
  ``{"upgrading": bool, "since": <wall time of the begin> | null}``.

All are cluster control (the credential, docs/security.md). The writes, and
``/cluster/balance`` (the balance is judged from the live registry, which the leader holds),
are forwarded by a follower lookupd to the leader; ``/cluster/stats`` answers from the saved
metadata, which a follower holds too.
"""

from __future__ import annotations

import logging

from ..core.balance import Spread, plan_balance
from ..core.decide import Settings
from ..core.stats import NodeCopies, copies, is_stable
from ..state.cluster import Cluster, PlacementError, StoreError
from ..state.supervisor import view_of
from .admin import store_error
from .base import HTTPError, Reply, Request

log = logging.getLogger("nsqlookupd.http")


class ClusterEndpoints:
    """The handlers (see the module doc), on ``cluster``."""

    def __init__(self, cluster: Cluster, auto_balance: bool = True) -> None:
        self.cluster = cluster
        self.auto_balance = auto_balance  # lookupd's --auto-balance

    async def node_remove(self, request: Request) -> Reply:
        """``/cluster/node/remove?remove_node=`` (``restore=true`` to undo)."""
        node = request.arg("remove_node")
        if not node:
            raise HTTPError(400, "MISSING_ARG_REMOVE_NODE")
        restore = request.arg("restore")
        if restore not in (None, "", "true", "false"):
            raise HTTPError(400, "INVALID_ARG_RESTORE: true or false")
        try:
            await self.cluster.remove_node(node, restore=restore == "true")
        except PlacementError as exc:
            raise HTTPError(400, str(exc)) from None
        except StoreError as exc:
            raise store_error(node, exc) from None
        held = copies(self.cluster.saved_placements.values()).get(node, NodeCopies())
        return {
            "remove_node": node,
            "removing": node in self.cluster.saved_removing,
            "state": "done" if held.empty else "pending",
            "drained": held.empty,
            "leaders": held.leaders,
            "replicas": held.replicas,
            "incoming": held.incoming,
        }

    async def stats(self, request: Request) -> Reply:
        """``/cluster/stats``."""
        cluster = self.cluster
        placements = cluster.saved_placements.values()
        held = copies(placements)
        identities = {
            peer.node_id: peer.identity
            for peer in cluster.registry.peers.values()
            if peer.partitioned
        }
        nodes = sorted({*held, *identities, *cluster.saved_removing})
        listed = []
        for node in nodes:
            count = held.get(node, NodeCopies())
            identity = identities.get(node)
            host, _, port = node.rpartition(":")
            listed.append(
                {
                    "hostname": identity.hostname if identity else "",
                    "broadcast_address": identity.broadcast_address if identity else host,
                    "tcp_port": identity.tcp_port if identity else int(port or 0),
                    "http_port": identity.http_port if identity else 0,
                    "leader_load_factor": float(count.leaders),
                    "node_load_factor": float(count.leaders + count.replicas),
                    "node_id": node,
                    "leaders": count.leaders,
                    "replicas": count.replicas,
                    "removing": node in cluster.saved_removing,
                }
            )
        stable = is_stable(placements, cluster.offline, cluster.saved_removing)
        state = self.balance_state()
        return {
            "stable": stable,
            "node_stat_list": listed,
            "balanced": state["balanced"],
            "balance_enabled": state["enabled"],
            "upgrading": state["upgrading"],
            "moves": state["moves"],
        }

    async def balance(self, request: Request) -> Reply:
        """``/cluster/balance`` (``POST ?enable=true|false``: switch it)."""
        if request.method == "POST":
            enable = request.arg("enable")
            if enable not in ("true", "false"):
                raise HTTPError(400, "INVALID_ARG_ENABLE: true or false")
            try:
                await self.cluster.set_switches(balance=enable == "true")
            except StoreError as exc:
                raise store_error("-", exc) from None
        return self.balance_state()

    def balance_state(self) -> dict[str, object]:
        """``/cluster/balance``'s reply (see the module doc)."""
        return balance_state(self.cluster, self.auto_balance)

    async def upgrade_begin(self, request: Request) -> Reply:
        """``/cluster/upgrade/begin``."""
        return await self._upgrade(True)

    async def upgrade_done(self, request: Request) -> Reply:
        """``/cluster/upgrade/done``."""
        return await self._upgrade(False)

    async def _upgrade(self, upgrading: bool) -> Reply:
        try:
            switches = await self.cluster.set_switches(upgrading=upgrading)
        except StoreError as exc:
            raise store_error("-", exc) from None
        return {
            "upgrading": switches.upgrading_since is not None,
            "since": switches.upgrading_since,
        }


def balance_state(cluster: Cluster, auto_balance: bool) -> dict[str, object]:
    """Balancing as ``/cluster/balance`` and ``/metrics`` report it (see the module doc);
    ``auto_balance``: lookupd's ``--auto-balance``."""
    switches = cluster.saved_switches
    view = view_of(cluster, Settings(), cluster.clock())
    nodes = cluster.placeable_nodes()
    assert view.counts is not None  # (view_of counts every partition)
    load = Spread.of(view.counts, nodes)
    balanced = load.even or not plan_balance(view.partitions, nodes, cluster.racks(), load)
    return {
        "enabled": auto_balance if switches.balance is None else switches.balance,
        "auto_balance": auto_balance,
        "upgrading": switches.upgrading_since is not None,
        "balanced": balanced,
        "moves": sum(len(p.moves) for p in cluster.saved_placements.values()),
    }
