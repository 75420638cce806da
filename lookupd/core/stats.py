"""What ``/cluster/stats`` and ``/cluster/node/remove`` report of the placements: the copies each
node holds, how far a drain is, and whether the cluster is *stable*. Pure: no I/O, no clock,
no Trio.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from .placement import TopicPlacement


@dataclass(frozen=True, slots=True)
class NodeCopies:
    """The partitions one node leads and replicates, and the moves bringing it a copy."""

    leaders: int = 0
    replicas: int = 0
    incoming: int = 0  # moves whose target it is, not holding the copy yet

    @property
    def empty(self) -> bool:
        """Holds no copy and is about to receive none: a drained node may stop."""
        return not (self.leaders or self.replicas or self.incoming)


def copies(placements: Iterable[TopicPlacement]) -> dict[str, NodeCopies]:
    """Every node named by ``placements``, with what it holds."""
    counts: dict[str, list[int]] = {}
    for placement in placements:
        for part in placement.partitions:
            counts.setdefault(part.leader, [0, 0, 0])[0] += 1
            for node in part.replicas:
                counts.setdefault(node, [0, 0, 0])[1] += 1
        for move in placement.moves:
            part = placement.partitions[move.partition]
            if move.target not in (part.leader, *part.replicas):
                counts.setdefault(move.target, [0, 0, 0])[2] += 1
    return {node: NodeCopies(*c) for node, c in sorted(counts.items())}


def is_stable(
    placements: Iterable[TopicPlacement],
    offline: Collection[tuple[str, int]],
    removing: Collection[str],
) -> bool:
    """No move in progress, no partition offline, every partition with the copies its topic
    asks for, all in sync, and no copy on a node being drained."""
    for placement in placements:
        if placement.moves:
            return False
        for number, part in enumerate(placement.partitions):
            holders = (part.leader, *part.replicas)
            if (placement.name, number) in offline or set(holders) & set(removing):
                return False
            if len(holders) != placement.meta.replica or set(part.in_sync) != set(holders):
                return False
    return True
