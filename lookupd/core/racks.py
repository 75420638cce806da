"""Failure domains: nsqd's ``--rack`` (Kafka's ``broker.rack``) as placement uses it. Pure.

Two copies of a partition go to one rack only when no rack free of it has a node to take one.
A node that registered no rack is a rack of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping


def rack_of(node: str, racks: Mapping[str, str]) -> str:
    """``node``'s rack; a node that registered none is a rack of its own."""
    return racks.get(node) or f"node:{node}"


def pick_spread(
    candidates: Iterable[str],
    holders: Iterable[str],
    racks: Mapping[str, str],
    count: int,
    rank: Callable[[str], tuple[object, ...]],
) -> tuple[str, ...]:
    """Up to ``count`` of ``candidates`` (never a holder) for new copies of a partition held
    by ``holders``, one at a time: first a node on a rack holding no copy yet, then by
    ``rank`` (smallest first)."""
    used = {rack_of(n, racks) for n in holders}
    held = set(holders)
    free = [n for n in candidates if n not in held]
    chosen: list[str] = []
    for _ in range(count):
        if not free:
            break
        best = min(free, key=lambda n: (rack_of(n, racks) in used, *rank(n)))
        chosen.append(best)
        free.remove(best)
        used.add(rack_of(best, racks))
    return tuple(chosen)
