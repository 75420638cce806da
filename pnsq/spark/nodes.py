"""Where a topic's partitions are, asked over HTTP: plain Python, no pyspark.

* ``nsqd`` option: each listed node's ``GET /partitions?topic=`` (through
  :class:`pnsq.client.blocking.BlockingClient`), merged;
* ``lookupd`` option: nsqlookupd's ``GET /lookup?topic=&access=r`` names the nodes (youzan's
  ``partitions`` map, partition id → node, else the ``producers``), then each node's
  ``/partitions``.

A partition is read from and written to its leader. ``GET /partition/offset`` resolves a
timestamp to an offset per partition (``startingTimestamp``). A write's missing topic is created
with ``POST /topic/create`` (:func:`create_topic`). A node's failure is raised as
:class:`~pnsq.spark.retry.NodeError`, naming the node; callers retry (:mod:`pnsq.spark.retry`).
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Final, TypeVar
from urllib.parse import urlencode

from pnsq.client.blocking import BlockingClient
from pnsq.client.errors import ConnectionClosedError, NsqHTTPError, UnexpectedResponseError
from pnsq.client.routing import PartitionInfo as Leader, TopicPartitions
from protocol.lookup import unwrap

from .options import Endpoints
from .planning import PartitionInfo, PlanningError
from .retry import NodeError, TopicNotFoundError

log = logging.getLogger("pnsq.spark")

T = TypeVar("T")
_ACCEPT: Final = {"Accept": "application/vnd.nsq; version=1.0"}


@dataclass(frozen=True, slots=True)
class TopicLayout:
    """A topic's partitions as discovered now: each with its offsets and leader."""

    topic: str
    partition_num: int
    leaders: dict[int, Leader]

    def infos(self) -> dict[int, PartitionInfo]:
        """What offset planning needs: offsets and the leader's HTTP address."""
        return {
            p: PartitionInfo(p, lead.earliest, lead.latest, lead.http_address)
            for p, lead in sorted(self.leaders.items())
        }

    def latest(self) -> dict[int, int]:
        """The next offset to be written, per partition."""
        return {p: lead.latest for p, lead in sorted(self.leaders.items())}


def get_json(
    address: str, path: str, params: Mapping[str, object], timeout: float, method: str = "GET"
) -> object:
    """``GET http://address/path?params`` (or ``method``) → the JSON body (None if empty),
    unwrapping an older lookupd's pre-1.0 ``{"status_code", "status_txt", "data"}`` envelope.

    Raises:
        NsqHTTPError: a non-200 status.
        OSError: the node could not be reached.
    """
    url = f"http://{address}{path}?{urlencode(params)}"
    request = urllib.request.Request(url, headers=_ACCEPT, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            body = response.read()
    except urllib.error.HTTPError as exc:
        raise NsqHTTPError(exc.code, exc.read().decode("utf-8", "replace")) from None
    if not body.strip():
        return None
    return unwrap(json.loads(body))


def discover(endpoints: Endpoints, topic: str) -> TopicLayout:
    """The topic's partitions and their leaders, asked now.

    Raises:
        TopicNotFoundError: no node knows the topic.
        PlanningError: two nodes both claim to lead a partition.
        NodeError: a node (or every lookupd) failed; it names the node.
        NsqHTTPError: a node answered 4xx (other than 404).
    """
    if endpoints.lookupd:
        nodes, assigned = _lookup(endpoints, topic)
    else:
        nodes, assigned = list(endpoints.nsqd), {}
    leaders: dict[int, Leader] = {}
    self_led: dict[int, str] = {}
    partition_num = 0
    for node in nodes:
        route = _at(f"nsqd {node}", partial(_partitions, node, topic, endpoints.timeout))
        if route is None:
            continue
        partition_num = max(partition_num, route.partition_num)
        for info in route.partitions:
            if assigned and assigned.get(info.partition) != node:
                continue  # lookupd names another node for it
            mine = info.http_address == node
            if mine and info.partition in self_led:
                raise PlanningError(
                    f"partition {info.partition} of {topic!r} is led by both "
                    f"{self_led[info.partition]} and {node}: give the nodes of one cluster"
                )
            if mine:
                self_led[info.partition] = node
            if mine or info.partition not in leaders:
                leaders[info.partition] = info
    if not leaders:
        where = f"lookupd {', '.join(endpoints.lookupd)}" if endpoints.lookupd else "nsqd"
        raise TopicNotFoundError(
            f"topic {topic!r} not found via {where} "
            f"(create it first: POST /topic/create?topic={topic}&partition_num=N)"
        )
    return TopicLayout(topic, max(partition_num, len(leaders)), dict(sorted(leaders.items())))


def _at(node: str, call: Callable[[], T]) -> T:
    """``call()``, its failure raised as :class:`NodeError` naming ``node`` (a 4xx answer as
    it is)."""
    try:
        return call()
    except NsqHTTPError as exc:
        if exc.status < 500:
            raise
        raise NodeError(node, exc) from exc
    except (OSError, ConnectionClosedError, UnexpectedResponseError, ValueError) as exc:
        if isinstance(exc, NodeError):
            raise
        raise NodeError(node, exc) from exc


def create_topic(
    endpoints: Endpoints, topic: str, partitions: int | None, replicator: int | None
) -> str:
    """Create ``topic`` as a publish would: through lookupd (``partition_num``, ``replicator``;
    lookupd places it), else on the first nsqd (``partition_num``, default nsqd's
    ``--default-partitions``). An existing topic is left as it is. Returns where it was asked.

    Raises:
        PlanningError: refused (a bad name or count; the topic exists with other settings).
        NodeError: no lookupd (or the nsqd) could be reached.
    """
    params: dict[str, object] = {"topic": topic}
    if partitions is not None:
        params["partition_num"] = partitions
    if endpoints.lookupd:
        if replicator is not None:
            params["replicator"] = replicator
        targets = [f"lookupd {address}" for address in endpoints.lookupd]
    else:
        targets = [f"nsqd {endpoints.nsqd[0]}"]
    error: NodeError | None = None
    for target in targets:
        address = target.split(" ", 1)[1]
        try:
            _at(
                target,
                partial(get_json, address, "/topic/create", params, endpoints.timeout, "POST"),
            )
        except NsqHTTPError as exc:
            raise PlanningError(f"creating topic {topic!r} through {target}: {exc}") from exc
        except NodeError as exc:
            log.warning("creating topic %s: %s", topic, exc)
            error = exc
            continue
        log.info("created topic %s through %s (%s)", topic, target, urlencode(params))
        return target
    assert error is not None
    raise error


def _partitions(node: str, topic: str, timeout: float) -> TopicPartitions | None:
    with BlockingClient(http_address=node, timeout=timeout) as nsq:
        try:
            return nsq.partitions(topic)
        except NsqHTTPError as exc:
            if exc.status == 404:
                return None
            raise


def _lookup(endpoints: Endpoints, topic: str) -> tuple[list[str], dict[int, str]]:
    """The nodes (HTTP addresses) to ask, and youzan's partition → node map (may be empty)."""
    error: Exception | None = None
    for lookupd in endpoints.lookupd:
        try:
            doc = get_json(lookupd, "/lookup", {"topic": topic, "access": "r"}, endpoints.timeout)
        except NsqHTTPError as exc:
            if exc.status == 404:  # stock nsqlookupd: TOPIC_NOT_FOUND
                return [], {}
            error = NodeError(f"lookupd {lookupd}", exc)
            continue
        except (OSError, ValueError) as exc:
            log.warning("lookupd %s failed: %s", lookupd, exc)
            error = NodeError(f"lookupd {lookupd}", exc)
            continue
        return _parse_lookup(doc)
    assert error is not None
    raise error


def _parse_lookup(doc: object) -> tuple[list[str], dict[int, str]]:
    if not isinstance(doc, dict):
        raise PlanningError(f"lookupd answered {doc!r}")
    assigned: dict[int, str] = {}
    partitions = doc.get("partitions") or {}
    if isinstance(partitions, dict):
        for pid, peer in partitions.items():
            if str(pid).isdigit():
                assigned[int(pid)] = _peer_http(peer)
    nodes = sorted(set(assigned.values()))
    if not nodes:
        nodes = sorted({_peer_http(peer) for peer in doc.get("producers") or []})
    return nodes, assigned


def _peer_http(peer: object) -> str:
    if not isinstance(peer, dict):
        raise PlanningError(f"lookupd: producer {peer!r} is not an object")
    host, port = peer.get("broadcast_address"), peer.get("http_port")
    if not isinstance(host, str) or type(port) is not int:
        raise PlanningError(f"lookupd: producer {peer!r} has no broadcast_address/http_port")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def offsets_for_timestamp(layout: TopicLayout, timestamp_ms: int, timeout: float) -> dict[int, int]:
    """Per partition, the first offset published at or after ``timestamp_ms`` (``latest`` if
    none), from each leader's ``GET /partition/offset``."""
    out: dict[int, int] = {}
    for p, lead in sorted(layout.leaders.items()):
        params = {"topic": layout.topic, "partition": p, "timestamp": timestamp_ms}
        where = f"nsqd {lead.http_address}"
        doc = _at(where, partial(get_json, lead.http_address, "/partition/offset", params, timeout))
        offset = doc.get("offset") if isinstance(doc, dict) else None
        if type(offset) is not int:
            raise PlanningError(f"/partition/offset answered {doc!r}")
        out[p] = offset
    return out
