"""Idempotent publishing, the producer's side: its name and the numbers of its messages to
each partition. Pure: no I/O.

A producer that names itself in IDENTIFY (``pnsq_producer``) numbers its messages to each
partition 0, 1, 2, ... and sends each publish with the number of its first message; the
partition's leader stores a number once, and answers a retry of stored numbers ``DUPLICATE``.
A number is taken when its publish is first sent and kept, with its partition, for every retry:
so a publish retried after a lost reply, a reconnect or a failover is stored once.
"""

from __future__ import annotations

import uuid


class Numbering:
    """The numbers ``name`` gave its messages, per (topic, partition)."""

    def __init__(self, name: str | None = None) -> None:
        #: the producer's name (a fresh unique one unless given: a writer that must be known
        #: again after a restart, such as a Spark task, names itself)
        self.name = name or f"pnsq-{uuid.uuid4().hex}"
        self._next: dict[tuple[str, int], int] = {}
        self.duplicates = 0  # messages the leader told duplicates (stored by an earlier try)

    def take(self, topic: str, partition: int, count: int) -> int:
        """The number of the first of ``count`` messages to ``partition`` of ``topic``."""
        key = (topic, partition)
        first = self._next.get(key, 0)
        self._next[key] = first + count
        return first
