"""The read endpoints' payloads, computed from the registry and the placements. Pure: the
caller passes ``now`` and the timeouts.

pnsq answers youzan's superset shapes to everyone: ``/lookup`` producers carry youzan's ``id``
and ``distributed_id`` and the reply has ``partitions`` (and ``meta`` with ``metainfo``);
``/nodes`` entries have ``partitions`` (and pnsq's ``rack``, for a pnsq node started with
``--rack``). Stock clients (go-nsq, pynsq, nsqadmin) ignore keys they
do not know.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from protocol.lookup import lookup_payload, peer_info, topic_meta

from .placement import TopicPlacement
from .registry import Peer, Producer, Registry


@dataclass(frozen=True, slots=True)
class Timeouts:
    """``--inactive-producer-timeout`` and ``--tombstone-lifetime``, in seconds."""

    inactive: float = 300.0
    tombstone: float = 45.0


class ViewError(Exception):
    """A read endpoint refused: HTTP status and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def peer_payload(peer: Peer) -> dict[str, object]:
    """A producer as ``/lookup`` lists it (youzan's eight keys)."""
    ident = peer.identity
    return peer_info(
        peer_id=peer.peer_id,
        remote_address=peer.peer_id,
        hostname=ident.hostname,
        broadcast_address=ident.broadcast_address,
        tcp_port=ident.tcp_port,
        http_port=ident.http_port,
        version=ident.version,
        distributed_id=ident.distributed_id,
        youzan=True,
    )


def lookup(
    registry: Registry,
    placements: Mapping[str, TopicPlacement],
    topic: str,
    now: float,
    timeouts: Timeouts,
    *,
    access: str | None = None,
    partition: str | None = None,
    metainfo: bool = False,
    deleted: Collection[str] = (),
) -> dict[str, object]:
    """``/lookup``. ``access``: None (a stock client), ``"r"`` or ``"w"`` (youzan's clients);
    ``partition``: None or ``"*"`` for all, else one partition id; a ``deleted`` topic's
    left-over copies are not named (:func:`left_over`). Raises :class:`ViewError`."""
    if access not in (None, "r", "w"):
        raise ViewError(400, "INVALID_ACCESS_MODE")
    placement = placements.get(topic)
    meta = None
    if metainfo:
        meta = placement.meta.lookup_meta() if placement else topic_meta()
    if not registry.has_topic(topic) or left_over(registry, topic, deleted):
        if access == "r":  # youzan: an unknown topic read is 200 with empty lists
            return lookup_payload([], [], {}, meta)
        raise ViewError(404, "TOPIC_NOT_FOUND")
    wanted: int | None = None
    if partition not in (None, "", "*"):
        wanted = int(partition) if partition.lstrip("-").isdigit() else -1  # -1: matches none
    producers = registry.producers(
        topic, now, timeouts.inactive, timeouts.tombstone, hide_tombstoned=access != "r"
    )
    if wanted is not None:
        producers = [p for p in producers if wanted in p.partitions]
    partitions = {
        pid: peer_payload(chosen.peer)
        for pid, chosen in partition_leaders(producers, placement).items()
        if wanted is None or pid == wanted
    }
    channels = registry.channel_names(topic, wanted)
    return lookup_payload(channels, [peer_payload(p.peer) for p in producers], partitions, meta)


def left_over(registry: Registry, topic: str, deleted: Collection[str]) -> bool:
    """A topic deleted on lookupd that only pnsq nodes register: copies they hold until they
    hear of the deletion (a node that registered again first, after a restart of lookupd),
    listed nowhere. A stock nsqd's registration of the name is listed, as on nsqlookupd."""
    if topic not in deleted:
        return False
    return all(producer.peer.placed for producer in registry.topics.get(topic, {}).values())


def partition_leaders(
    producers: list[Producer], placement: TopicPlacement | None
) -> dict[int, Producer]:
    """For each registered partition, the producer to name: the placed leader if it registered
    the partition, else the registering producer with the lowest peer id."""
    holders: dict[int, list[Producer]] = {}
    for producer in producers:
        for pid in producer.partitions:
            holders.setdefault(pid, []).append(producer)
    chosen = {}
    for pid, candidates in sorted(holders.items()):
        leader = placement.leader(pid) if placement else None
        preferred = [p for p in candidates if p.peer.node_id == leader]
        chosen[pid] = (preferred or sorted(candidates, key=lambda p: p.peer.peer_id))[0]
    return chosen


def topics(
    registry: Registry,
    placements: Mapping[str, TopicPlacement],
    deleted: Collection[str] = (),
    *,
    meta_info: bool = False,
) -> dict[str, object]:
    """``/topics`` (with youzan's ``metaInfo=true``: ``meta_info`` per topic). A ``deleted``
    topic registered only by pnsq nodes is left out: they still hold a copy lookupd has told
    them to delete (a node that registered again before it heard of the deletion)."""
    names = [name for name in registry.topic_names() if not left_over(registry, name, deleted)]
    payload: dict[str, object] = {"topics": names}
    if meta_info:
        infos = []
        for name in names:
            placement = placements.get(name)
            meta = placement.meta if placement else None
            infos.append(
                {
                    "topic_name": name,
                    "extend_support": bool(meta and meta.extend_support),
                    "ordered": bool(meta and meta.ordered),
                    "multi_part": bool(meta and meta.multi_part),
                    "disable_channel_auto_create": bool(meta and meta.disable_channel_auto_create),
                    "registered_channels": registry.channel_names(name),
                }
            )
        payload["meta_info"] = infos
    return payload


def nodes(registry: Registry, now: float, timeouts: Timeouts) -> dict[str, object]:
    """``/nodes``: every active peer (tombstoned ones too), its topics, a tombstone flag per
    topic and, as youzan's lookupd adds, its partitions per topic; a partitioned peer that
    registered a rack (pnsq's nsqd with ``--rack``) has its ``rack`` too."""
    result: list[dict[str, object]] = []
    for peer in registry.active_peers(now, timeouts.inactive):
        held = registry.peer_topics(peer.peer_id)
        ident = peer.identity
        result.append(
            {
                "remote_address": peer.peer_id,
                "hostname": ident.hostname,
                "broadcast_address": ident.broadcast_address,
                "tcp_port": ident.tcp_port,
                "http_port": ident.http_port,
                "version": ident.version,
                "tombstones": [p.is_tombstoned(now, timeouts.tombstone) for _, p in held],
                "topics": [topic for topic, _ in held],
                "partitions": {
                    topic: [str(pid) for pid in sorted(p.partitions)]
                    for topic, p in held
                    if p.partitions
                },
            }
        )
        if peer.partitioned and ident.rack:
            result[-1]["rack"] = ident.rack
    return {"producers": result}


def debug(registry: Registry) -> dict[str, object]:
    """``/debug``: every registration key and its producers (``last_update`` and
    ``tombstoned_at`` in Unix nanoseconds, as nsqlookupd prints them)."""

    def entry(peer: Peer, tombstoned_at: float | None) -> dict[str, object]:
        ident = peer.identity
        return {
            "id": peer.peer_id,
            "hostname": ident.hostname,
            "broadcast_address": ident.broadcast_address,
            "tcp_port": ident.tcp_port,
            "http_port": ident.http_port,
            "version": ident.version,
            "last_update": int(peer.last_update * 1e9),
            "tombstoned": tombstoned_at is not None,
            "tombstoned_at": int(tombstoned_at * 1e9) if tombstoned_at is not None else 0,
        }

    data: dict[str, object] = {}
    if registry.peers:
        data["client::"] = [entry(peer, None) for _, peer in sorted(registry.peers.items())]
    for topic, producers in sorted(registry.topics.items()):
        if producers:  # nsqlookupd lists only keys with producers
            data[f"topic:{topic}:"] = [
                entry(p.peer, p.tombstoned_at) for _, p in sorted(producers.items())
            ]
    for topic, channels in sorted(registry.channels.items()):
        for channel, holders in sorted(channels.items()):
            peers = [registry.peers[i] for i in sorted(holders) if i in registry.peers]
            if peers:
                data[f"channel:{topic}:{channel}"] = [entry(peer, None) for peer in peers]
    return data


def listlookup(broadcast_address: str, tcp_port: int, http_port: int) -> dict[str, object]:
    """youzan's ``/listlookup``: this lookupd is the only node and the leader (Go field names,
    ports as strings)."""
    node = {
        "ID": f"{broadcast_address}:{http_port}:{tcp_port}",
        "NodeIP": broadcast_address,
        "TcpPort": str(tcp_port),
        "HttpPort": str(http_port),
        "RpcPort": "",
        "Epoch": 0,
    }
    return {"lookupdnodes": [node], "lookupdleader": node}
