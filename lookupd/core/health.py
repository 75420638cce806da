"""The nodes' health as lookupd's decisions read it at one moment: which nodes are up, alive,
spare, steady and replaceable (:class:`Health`), and the same as a key that compares
(:func:`liveness_key`: equal keys, equal decisions). Pure: no I/O, no clock, no Trio (the
moment is a parameter)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .view import NodeView, Settings

__all__ = ["Health", "liveness_key"]


@dataclass(frozen=True, slots=True)
class Health:
    """Liveness of the nodes at ``now``. Which nodes are up, alive, spare and steady is worked
    out once, at construction: a decision asks it of every partition's nodes, a few times
    each (at 3,000 partitions, 68,000 questions a failover)."""

    nodes: Mapping[str, NodeView]
    settings: Settings
    now: float
    removing: frozenset[str] = frozenset()
    upgrading: bool = False
    _up: frozenset[str] = field(init=False)
    _alive: frozenset[str] = field(init=False)
    _spare: frozenset[str] = field(init=False)
    _steady: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        timeout, grace, now = self.settings.heartbeat_timeout, self.settings.balance_grace, self.now
        up = frozenset(
            node
            for node, view in self.nodes.items()
            if view.connected and now - view.last_heartbeat <= timeout
        )
        alive = frozenset(node for node in up if not self.nodes[node].leaving)
        spare = alive - self.removing
        steady = frozenset(node for node in spare if now - self.nodes[node].up_since >= grace)
        for name, nodes in (("_up", up), ("_alive", alive), ("_spare", spare), ("_steady", steady)):
            object.__setattr__(self, name, nodes)

    def up(self, node: str) -> bool:
        """Connected, and heard from within the heartbeat timeout."""
        return node in self._up

    def alive(self, node: str) -> bool:
        """Up and not leaving."""
        return node in self._alive

    def spare(self, node: str) -> bool:
        """May take a new copy: alive and not being drained."""
        return node in self._spare

    def steady(self, node: str) -> bool:
        """Spare, and up for ``balance_grace`` at least: balancing may count on it."""
        return node in self._steady

    def replaceable(self, node: str) -> bool:
        if self.upgrading:
            return False  # it is restarting
        view = self.nodes.get(node)
        if view is None:
            return True
        return (
            not self.up(node)
            and view.down_since is not None
            and self.now - view.down_since >= self.settings.replace_after
        )


def liveness_key(
    nodes: Mapping[str, NodeView], settings: Settings, now: float, upgrading: bool
) -> tuple[tuple[str, bool, bool, bool, bool, bool], ...]:
    """All that :func:`decide` reads of the nodes at ``now``: per node, whether it is up,
    alive, leaving, replaceable and steady (up for the balancing grace; a node's
    ``removing`` aside, which the view's key holds). Equal keys (with the same partitions
    and the rest of the view) give equal decisions, however the heartbeats moved
    meanwhile."""
    health = Health(nodes, settings, now, upgrading=upgrading)
    return tuple(
        (
            node,
            health.up(node),
            health.alive(node),
            view.leaving,
            health.replaceable(node),
            health.steady(node),
        )
        for node, view in sorted(nodes.items())
    )
