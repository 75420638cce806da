"""youzan's cluster endpoints of lookupd's HTTP API: draining a node and the cluster's stats.

* ``POST /cluster/node/remove?remove_node=<node id>`` — drain the node (``restore=true``: stop
  draining it). youzan answers ``200`` with an empty body and carries the removal out in the
  background (its states ``marked``, ``pending``, ``data_transferred``, ``done``); pnsq answers
  ``200`` with how far the drain is, so the same request asked again tells when it is over::

      {"remove_node": "<id>", "state": "pending" | "done", "drained": false | true,
       "leaders": N, "replicas": N, "incoming": N}

  ``drained`` (state ``done``): the node leads and replicates nothing and no move brings it a
  copy, as saved (what the nodes are told): it can be stopped with nothing lost.
* ``GET /cluster/stats`` — youzan's ``{"stable", "node_stat_list"}``: every node lookupd knows,
  with youzan's fields (``leader_load_factor`` and ``node_load_factor`` are here the partitions
  it leads, and leads or replicates) plus pnsq's ``node_id``, ``leaders``, ``replicas`` and
  ``removing``. ``stable``: no move in progress, nothing offline, every partition with its
  topic's ``replicator`` copies all in sync, nothing left on a node being drained.

Both are cluster control (the credential, docs/security.md); the first is a write that a
follower lookupd forwards to the leader; the second answers from the saved metadata, which a
follower holds too.
"""

from __future__ import annotations

import logging

from ..core.stats import NodeCopies, copies, is_stable
from ..state.cluster import Cluster, PlacementError, StoreError
from .admin import store_error
from .base import HTTPError, Reply, Request

log = logging.getLogger("nsqlookupd.http")


class ClusterEndpoints:
    """The handlers (see the module doc), on ``cluster``."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    async def node_remove(self, request: Request) -> Reply:
        """``/cluster/node/remove?remove_node=`` (``restore=true`` to undo)."""
        node = request.arg("remove_node")
        if not node:
            raise HTTPError(400, "MISSING_ARG_REMOVE_NODE")
        try:
            await self.cluster.remove_node(node, restore=request.arg("restore") == "true")
        except PlacementError as exc:
            raise HTTPError(400, str(exc)) from None
        except StoreError as exc:
            raise store_error(node, exc) from None
        held = copies(self.cluster.saved_placements.values()).get(node, NodeCopies())
        return {
            "remove_node": node,
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
        return {"stable": stable, "node_stat_list": listed}
