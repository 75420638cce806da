"""nsqlookupd's HTTP JSON shapes, shared by pnsq's lookupd (which writes them) and pnsq's nsqd
and clients (which read them). Plain dicts in, plain dicts out; no I/O.

* :func:`peer_info`: a producer as nsqlookupd 1.3 lists it, or with youzan's ``id`` and
  ``distributed_id`` (youzan nsqlookupd's ``PeerInfo``, key order as its struct);
* :func:`lookup_payload`: ``/lookup`` (``channels``, ``meta`` with ``metainfo``, ``producers``,
  ``partitions`` keyed by the partition id as a string);
* :func:`topic_meta`: youzan's six ``meta`` keys;
* :func:`unwrap`: a reader's tolerance of the pre-1.0 envelope ``{"status_code","status_txt",
  "data"}`` that older lookupds (youzan's, earlier pnsq) send to a request without
  ``Accept: application/vnd.nsq; version=1.0`` (pnsq's lookupd, like nsqlookupd 1.3.0, always
  answers bare JSON);
* the assignments document of pnsq's extension endpoint ``GET /pnsq/assignments?node=``:
  :func:`assignments_payload` (lookupd) and :func:`parse_assignments` (nsqd).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

ACCEPT_V1: Final = "application/vnd.nsq; version=1.0"
NSQ_CONTENT_TYPE: Final = "nsq; version=1.0"  # the X-NSQ-Content-Type of an unwrapped reply
ASSIGNMENTS_PATH: Final = "/pnsq/assignments"

META_KEYS: Final = (
    "partition_num",
    "replica",
    "extend_support",
    "ordered",
    "multi_part",
    "disable_channel_auto_create",
)


def unwrap(document: Any) -> Any:
    """``document`` without the pre-1.0 envelope, if it has one (bare JSON is returned as is)."""
    if isinstance(document, dict) and set(document) == {"status_code", "status_txt", "data"}:
        return document["data"]
    return document


def peer_info(
    *,
    peer_id: str,
    remote_address: str,
    hostname: str,
    broadcast_address: str,
    tcp_port: int,
    http_port: int,
    version: str,
    distributed_id: str = "",
    youzan: bool = False,
) -> dict[str, object]:
    """A producer: nsqlookupd 1.3.0's six keys, or youzan's eight (``id`` first,
    ``distributed_id`` last)."""
    info: dict[str, object] = {"id": peer_id} if youzan else {}
    info.update(
        remote_address=remote_address,
        hostname=hostname,
        broadcast_address=broadcast_address,
        tcp_port=tcp_port,
        http_port=http_port,
        version=version,
    )
    if youzan:
        info["distributed_id"] = distributed_id
    return info


def topic_meta(
    *,
    partition_num: int = 0,
    replica: int = 0,
    extend_support: bool = False,
    ordered: bool = False,
    multi_part: bool = False,
    disable_channel_auto_create: bool = False,
) -> dict[str, object]:
    """youzan's ``meta`` of ``/lookup?metainfo=``: zeros for a topic without metadata (a topic
    only stock nsqds registered), which youzan go-nsq reads as "count the partitions"."""
    return {
        "partition_num": partition_num,
        "replica": replica,
        "extend_support": extend_support,
        "ordered": ordered,
        "multi_part": multi_part,
        "disable_channel_auto_create": disable_channel_auto_create,
    }


def lookup_payload(
    channels: Sequence[str],
    producers: Sequence[Mapping[str, object]],
    partitions: Mapping[int, Mapping[str, object]],
    meta: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """``/lookup``: youzan's keys in youzan's order; ``meta`` only when asked for."""
    payload: dict[str, object] = {"channels": list(channels)}
    if meta is not None:
        payload["meta"] = dict(meta)
    payload["producers"] = [dict(p) for p in producers]
    payload["partitions"] = {str(pid): dict(info) for pid, info in sorted(partitions.items())}
    return payload


# ---------------------------------------------------------------- pnsq's assignments


@dataclass(frozen=True, slots=True)
class PartitionAssignment:
    """Where one partition lives: its leader and replicas (node ids ``host:tcp_port``), and the
    leader epoch (bumped by every change of leader; 0 until the first failover)."""

    leader: str
    replicas: tuple[str, ...] = ()
    epoch: int = 0
    #: the in-sync set, leader first (what a publish must reach before it is acknowledged);
    #: () means the leader alone
    isr: tuple[str, ...] = ()

    @property
    def in_sync(self) -> tuple[str, ...]:
        """The in-sync set, never empty: at least the leader."""
        return self.isr or (self.leader,)


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """A topic as one node must hold it."""

    name: str
    partition_num: int
    replica: int
    partitions: tuple[PartitionAssignment, ...]
    meta: Mapping[str, object]


def assignments_payload(
    node: str, topics: Sequence[TopicAssignment], deleted: Sequence[str] = ()
) -> dict[str, object]:
    """``GET /pnsq/assignments?node=``: the topics with a partition led or replicated by
    ``node``, and the topics deleted on lookupd (which no node may keep serving)."""
    return {
        "node": node,
        "deleted": sorted(deleted),
        "topics": {
            t.name: {
                "partition_num": t.partition_num,
                "replica": t.replica,
                "partitions": {
                    str(i): {
                        "leader": p.leader,
                        "replicas": list(p.replicas),
                        "epoch": p.epoch,
                        "isr": list(p.in_sync),
                    }
                    for i, p in enumerate(t.partitions)
                },
                "meta": dict(t.meta),
            }
            for t in topics
        },
    }


def parse_deleted(document: Any) -> list[str]:
    """The ``deleted`` topics of :func:`assignments_payload` (none from an older lookupd);
    raises ValueError for anything but a list of names."""
    deleted = document.get("deleted", []) if isinstance(document, dict) else []
    if not isinstance(deleted, list) or not all(isinstance(n, str) for n in deleted):
        raise ValueError("bad deleted list")
    return deleted


def parse_assignments(document: Any) -> list[TopicAssignment]:
    """Read :func:`assignments_payload`; raises ValueError for anything else."""
    if not isinstance(document, dict) or not isinstance(document.get("topics"), dict):
        raise ValueError("not an assignments document")
    result = []
    for name, entry in document["topics"].items():
        if not isinstance(entry, dict):
            raise ValueError(f"topic {name!r}: not an object")
        count, replica = entry.get("partition_num"), entry.get("replica", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"topic {name!r}: bad partition_num {count!r}")
        raw_parts = entry.get("partitions", {})
        if not isinstance(raw_parts, dict):
            raise ValueError(f"topic {name!r}: bad partitions")
        parts = []
        for pid in range(count):
            part = raw_parts.get(str(pid), {})
            leader = part.get("leader", "") if isinstance(part, dict) else ""
            replicas = part.get("replicas", []) if isinstance(part, dict) else []
            epoch = part.get("epoch", 0) if isinstance(part, dict) else 0
            if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
                raise ValueError(f"topic {name!r}: partition {pid}: bad epoch {epoch!r}")
            isr = part.get("isr", []) if isinstance(part, dict) else []
            if not isinstance(isr, list):
                raise ValueError(f"topic {name!r}: partition {pid}: bad isr {isr!r}")
            parts.append(
                PartitionAssignment(
                    str(leader),
                    tuple(str(r) for r in replicas),
                    epoch,
                    tuple(str(n) for n in isr),
                )
            )
        meta = entry.get("meta", {})
        result.append(
            TopicAssignment(
                name=str(name),
                partition_num=count,
                replica=int(replica) if isinstance(replica, int) else 1,
                partitions=tuple(parts),
                meta=dict(meta) if isinstance(meta, dict) else {},
            )
        )
    return result


LISTLOOKUP_PATH: Final = "/listlookup"


@dataclass(frozen=True, slots=True)
class LookupdNode:
    """One lookupd of youzan's ``/listlookup``: where nsqd registers (TCP) and asks (HTTP)."""

    host: str
    tcp_port: int
    http_port: int

    @property
    def tcp_address(self) -> str:
        return _join(self.host, self.tcp_port)

    @property
    def http_address(self) -> str:
        return _join(self.host, self.http_port)


def parse_listlookup(document: Any) -> list[LookupdNode]:
    """The lookupds of a ``/listlookup`` reply (youzan's ``{"lookupdnodes": [{"NodeIP",
    "TcpPort", "HttpPort", ...}], "lookupdleader": {...}}``, ports as strings); entries that
    do not name a host and two ports are skipped. Raises ValueError if it is not that shape."""
    document = unwrap(document)
    if document is None:
        return []  # youzan: a lookupd without a coordinator
    if not isinstance(document, dict):
        raise ValueError("listlookup reply is not an object")
    nodes = document.get("lookupdnodes") or []
    if not isinstance(nodes, list):
        raise ValueError("lookupdnodes is not a list")
    out: list[LookupdNode] = []
    for node in nodes:
        if not isinstance(node, dict):
            continue
        host = node.get("NodeIP")
        try:
            tcp, http = int(node.get("TcpPort", "")), int(node.get("HttpPort", ""))
        except (TypeError, ValueError):
            continue
        if isinstance(host, str) and host and 0 < tcp < 65536 and 0 < http < 65536:
            out.append(LookupdNode(host, tcp, http))
    return out


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
