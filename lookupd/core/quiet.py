"""Which partitions a decision (:func:`lookupd.core.decide.decide`) may skip. Pure: no I/O, no
clock, no Trio.

A partition is *quiet* when nothing about it can change in steps 1 to 5 of a decision: it is
not offline, has no move, its in-sync set is its leader and every replica, it holds the copies
its topic asks for and its leader reports no replica lagging (:func:`settled_alone`), and every
node holding a copy is *spare* (alive, not being drained). Most partitions of a cluster are
quiet most of the time; a decision looks only at the others
(:attr:`lookupd.core.view.View.candidates`), so its cost grows with what it may touch, not
with the cluster.

The first half depends on the partition alone and the second on the nodes, so a caller keeps
an :class:`Index` per run of partitions (lookupd: per topic, while its placement and reports
stay the same) and asks :func:`candidates` at each decision: time in the runs and the nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from .view import Counts, PartitionView, View

__all__ = ["Index", "candidates", "narrow", "settled_alone"]


def settled_alone(part: PartitionView) -> bool:
    """The half of quiet that depends on ``part`` alone (see the module doc)."""
    holders = {part.leader, *part.replicas}
    return (
        not part.offline
        and part.move is None
        and set(part.isr) == holders
        and (part.wanted is None or len(holders) == part.wanted == 1 + len(part.replicas))
        and part.lagging.isdisjoint(part.replicas)
    )


@dataclass(frozen=True, slots=True)
class Index:
    """A run of partitions told apart for :func:`candidates`."""

    unsettled: tuple[int, ...]  # positions (in the run) not :func:`settled_alone`
    on_node: Mapping[str, tuple[int, ...]]  # node -> positions of those holding a copy on it
    counts: Counts  # the run's copies and leaderships per node

    @classmethod
    def of(cls, partitions: Sequence[PartitionView]) -> Index:
        on_node: dict[str, list[int]] = {}
        for position, part in enumerate(partitions):
            for node in {part.leader, *part.replicas}:
                on_node.setdefault(node, []).append(position)
        unsettled = tuple(i for i, part in enumerate(partitions) if not settled_alone(part))
        return cls(
            unsettled,
            {node: tuple(positions) for node, positions in on_node.items()},
            Counts.of(partitions),
        )


def candidates(runs: Iterable[tuple[int, Index]], spare: Callable[[str], bool]) -> list[int]:
    """The positions of the partitions that are not quiet, in order, over ``runs`` (each
    run's start in the view and its index); ``spare``: alive and not being drained."""
    found: set[int] = set()
    for start, index in runs:
        found.update(start + i for i in index.unsettled)
        for node, positions in index.on_node.items():
            if not spare(node):
                found.update(start + i for i in positions)
    return sorted(found)


def narrow(view: View, spare: Callable[[str], bool]) -> View:
    """``view`` with its candidates and counts (one run of every partition): what a caller
    without its own indexes gives :func:`~lookupd.core.decide.decide`."""
    index = Index.of(view.partitions)
    return replace(view, candidates=candidates([(0, index)], spare), counts=index.counts)
