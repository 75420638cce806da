"""Which partition a publish goes to, and where that partition lives. Pure: no I/O, no Trio.

Partition choice is youzan go-nsq's (``TopicProducerMgr``):

* keyed: ``murmur3_32(key, seed 0) % partition_num`` (:func:`partition_for_key`), so one key
  always lands on one partition and an ordered consumer sees it in publish order;
* unkeyed: round-robin over the partitions (:class:`RoundRobin`);
* an explicit partition wins over both.

Where a partition lives comes from nsqd's ``GET /partitions?topic=`` (:func:`parse_partitions`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

import mmh3

from .errors import PartitionsUnknownError

#: Error codes after which a publish is retried on a fresh route and connection (youzan's
#: client guidance: drop the connection for that partition and look up again).
RETRYABLE_CODES: Final = frozenset(
    {"E_FAILED_ON_NOT_LEADER", "E_FAILED_ON_NOT_WRITABLE", "E_TOPIC_NOT_EXIST"}
)
T = TypeVar("T")

#: MPUB framing per message: the 4-byte size prefix.
_MPUB_OVERHEAD: Final = 4
#: MPUB_TRACE framing per message: the 4-byte size prefix and the 8-byte trace id.
_MPUB_TRACE_OVERHEAD: Final = 12


def partition_for_key(key: str | bytes, partition_num: int) -> int:
    """The partition of ``key``: unsigned murmur3 32-bit (seed 0) modulo ``partition_num``,
    as youzan go-nsq's ``PublishOrdered`` with its documented ``murmur3.New32()`` hasher.
    A ``str`` key is hashed as its UTF-8 bytes."""
    if partition_num < 1:
        raise ValueError(f"partition_num must be >= 1, not {partition_num}")
    return mmh3.hash(key, 0, signed=False) % partition_num


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition of a topic: its offsets when it was looked up, and its leader."""

    partition: int
    earliest: int  # the first offset still stored
    latest: int  # the offset the next message gets
    tcp_address: str  # the leader's ``host:port`` for protocol V2
    http_address: str  # the leader's ``host:port`` for HTTP (range reads)


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    """A topic's partitions, as ``GET /partitions`` described them."""

    topic: str
    partition_num: int
    ordered: bool
    ext: bool
    partitions: tuple[PartitionInfo, ...]

    def get(self, partition: int) -> PartitionInfo | None:
        """The partition numbered ``partition``, if listed."""
        for info in self.partitions:
            if info.partition == partition:
                return info
        return None


class RoutingError(ValueError):
    """A ``/partitions`` document of the wrong shape."""


def _int(doc: Mapping[str, object], key: str) -> int:
    value = doc.get(key)
    if type(value) is not int:
        raise RoutingError(f"{key!r}: integer expected, got {value!r}")
    return value


def _addresses(node: object) -> tuple[str, str]:
    if not isinstance(node, dict):
        raise RoutingError(f"node: object expected, got {node!r}")
    host = node.get("broadcast_address")
    if not isinstance(host, str):
        raise RoutingError(f"broadcast_address: string expected, got {host!r}")
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{_int(node, 'tcp_port')}", f"{host}:{_int(node, 'http_port')}"


def parse_partitions(
    doc: object, *, http_address: str, tcp_address: str | None = None
) -> TopicPartitions:
    """Build :class:`TopicPartitions` from the JSON that ``http_address`` answered.

    A partition led by the answering node itself is reached at the addresses the caller used
    (``http_address``, and ``tcp_address`` when given) rather than the advertised ones, which
    may be a hostname the caller cannot resolve.
    """
    if not isinstance(doc, dict):
        raise RoutingError("object expected")
    topic = doc.get("topic")
    if not isinstance(topic, str):
        raise RoutingError("topic: string expected")
    answering = _addresses(doc.get("node"))
    entries = doc.get("partitions")
    if not isinstance(entries, list):
        raise RoutingError("partitions: list expected")
    infos = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise RoutingError("partition: object expected")
        tcp, http = _addresses(entry.get("leader"))
        if (tcp, http) == answering:
            tcp, http = tcp_address or tcp, http_address
        infos.append(
            PartitionInfo(
                _int(entry, "partition"), _int(entry, "earliest"), _int(entry, "latest"), tcp, http
            )
        )
    return TopicPartitions(
        topic=topic,
        partition_num=_int(doc, "partition_num"),
        ordered=doc.get("ordered") is True,
        ext=doc.get("ext") is True,
        partitions=tuple(sorted(infos, key=lambda i: i.partition)),
    )


def parse_address(address: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[v6]:port"`` → ``(host, port)``."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"invalid address {address!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


class RoundRobin:
    """Per-topic round-robin counters (go-nsq's ``PubRR``)."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def next(self, topic: str, partition_num: int) -> int:
        """The next partition of ``topic`` among ``partition_num``."""
        index = self._next.get(topic, 0)
        self._next[topic] = index + 1
        return index % partition_num


def choose_partition(
    route: TopicPartitions | None,
    topic: str,
    rr: RoundRobin,
    *,
    key: str | bytes | None = None,
    partition: int | None = None,
) -> int | None:
    """The partition to publish to: explicit, else keyed, else round-robin; ``None`` (let nsqd
    pick) when the topic's partitions are unknown.

    Raises:
        PartitionsUnknownError: a key was given but the topic's partitions are unknown.
    """
    if partition is not None:
        return partition
    if route is None:
        if key is not None:
            raise PartitionsUnknownError(
                f"partitions of topic {topic!r} unknown: cannot route a key"
            )
        return None
    if key is not None:
        return partition_for_key(key, route.partition_num)
    if route.partition_num == 1:
        return 0
    return rr.next(topic, route.partition_num)


def group_by_partition(
    bodies: Sequence[bytes], keys: Sequence[str | bytes], partition_num: int
) -> dict[int, list[bytes]]:
    """``bodies`` split by the partition of their key, in publish order within each partition
    (so per-key order survives); partitions in ascending order."""
    if len(keys) != len(bodies):
        raise ValueError(f"{len(keys)} keys for {len(bodies)} bodies")
    groups: dict[int, list[bytes]] = {}
    for body, key in zip(bodies, keys, strict=True):
        groups.setdefault(partition_for_key(key, partition_num), []).append(body)
    return dict(sorted(groups.items()))


def chunk_sized(items: Sequence[T], max_bytes: int, size: Callable[[T], int]) -> list[list[T]]:
    """``items`` in order, cut into batches whose ``size`` (each item's bytes in the batch
    body) plus the 4-byte message count stay within ``max_bytes``; an item larger than that
    gets a batch of its own."""
    chunks: list[list[T]] = []
    current: list[T] = []
    total = 4  # the message count
    for item in items:
        n = size(item)
        if current and total + n > max_bytes:
            chunks.append(current)
            current, total = [], 4
        current.append(item)
        total += n
    if current:
        chunks.append(current)
    return chunks


def chunk_bodies(bodies: Sequence[bytes], max_bytes: int) -> list[list[bytes]]:
    """``bodies`` in order, cut into MPUB batches of at most ``max_bytes`` (sizes counted with
    their 4-byte prefix); a body larger than that gets a batch of its own."""
    return chunk_sized(bodies, max_bytes, lambda body: len(body) + _MPUB_OVERHEAD)


def chunk_traced(
    messages: Sequence[tuple[int, bytes]], max_bytes: int
) -> list[list[tuple[int, bytes]]]:
    """``messages`` in order, cut into MPUB_TRACE batches of at most ``max_bytes`` (each counted
    with its 4-byte size prefix and 8-byte trace id); an oversized one goes alone."""
    return chunk_sized(messages, max_bytes, lambda message: len(message[1]) + _MPUB_TRACE_OVERHEAD)
