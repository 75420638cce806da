"""A small blocking HTTP client for nsqd's API (stdlib ``http.client``): partitions, range
reads, channel offsets. Used by the blocking client directly and by the Trio client in a worker
thread (one :class:`HTTPNode` per thread; it is not thread-safe).
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Final
from urllib.parse import urlencode

from protocol.lookup import ACCEPT_V1, unwrap
from protocol.range_read import RangeBatch, RangeFormatError, decode_binary

from .errors import NsqHTTPError, UnexpectedResponseError
from .routing import (
    PartitionInfo,
    RoutingError,
    TopicPartitions,
    parse_address,
    parse_partitions,
)

DEFAULT_TIMEOUT: Final = 10.0
#: seconds each leader lookupd names has to describe its partitions
LEADER_TIMEOUT: Final = 1.0
#: Errors of a kept-alive connection that nsqd closed while it was idle: retried once.
_STALE: Final = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


class HTTPNode:
    """Requests to one nsqd's HTTP address over a kept-alive connection."""

    def __init__(
        self, address: str, timeout: float = DEFAULT_TIMEOUT, auth_secret: str = ""
    ) -> None:
        self.address = address
        self.timeout = timeout
        #: sent as ``Authorization: Bearer`` (an nsqd with ``--auth-http-address`` asks it
        #: for the endpoints that hand out messages, such as ``/partition/read``)
        self._auth = {"Authorization": f"Bearer {auth_secret}"} if auth_secret else {}
        self._host, self._port = parse_address(address)
        self._conn: http.client.HTTPConnection | None = None

    def request(
        self,
        method: str,
        path: str,
        params: Mapping[str, object] | None = None,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> bytes:
        """The body of a ``200`` reply.

        Raises:
            NsqHTTPError: any other status (with nsqd's ``message`` text when it sent one).
            OSError: the connection failed, or broke off the reply (``ConnectionError``).
        """
        target = path + ("?" + urlencode(params) if params else "")
        for attempt in (1, 2):
            reused = self._conn is not None
            conn = self._conn or http.client.HTTPConnection(
                self._host, self._port, timeout=self.timeout
            )
            self._conn = conn
            try:
                conn.request(method, target, body=body, headers={**self._auth, **(headers or {})})
                response = conn.getresponse()
                data = response.read()
            except _STALE:
                self.close()
                if reused and attempt == 1:
                    continue
                raise
            except OSError:
                self.close()
                raise
            except http.client.HTTPException as exc:  # a reply cut short (the node died) or garbled
                self.close()
                raise ConnectionError(f"{self.address}: broken HTTP reply: {exc!r}") from exc
            if response.will_close:
                self.close()
            if response.status != 200:
                raise NsqHTTPError(response.status, _message(data))
            return data
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Close the kept-alive connection (the next request opens a new one)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def partitions(self, topic: str, tcp_address: str | None = None) -> TopicPartitions:
        """``GET /partitions?topic=``; the answering node's own partitions are reached at
        ``tcp_address`` when given (see :func:`pnsq.client.routing.parse_partitions`).

        Raises:
            NsqHTTPError: e.g. 404 ``TOPIC_NOT_FOUND``.
        """
        data = self.request("GET", "/partitions", {"topic": topic})
        try:
            return parse_partitions(
                json.loads(data), http_address=self.address, tcp_address=tcp_address
            )
        except (ValueError, RoutingError) as exc:
            raise UnexpectedResponseError(f"/partitions: {exc}") from exc

    def read_range(self, topic: str, partition: int, offset: int, max_records: int) -> RangeBatch:
        """``GET /partition/read`` in the binary format, decoded.

        Raises:
            NsqHTTPError: 400 ``OFFSET_OUT_OF_RANGE`` (below ``earliest`` or past ``latest``),
                404 ``TOPIC_NOT_FOUND`` / ``PARTITION_NOT_FOUND``, ...
        """
        params = {"topic": topic, "partition": partition, "offset": offset, "max": max_records}
        data = self.request("GET", "/partition/read", {**params, "format": "binary"})
        try:
            return decode_binary(data)
        except RangeFormatError as exc:
            raise UnexpectedResponseError(f"/partition/read: {exc}") from exc

    def set_channel_offset(self, topic: str, partition: int, channel: str, start: str) -> None:
        """Create ``channel`` if needed, then ``POST /channel/setoffset`` with ``start``
        (``timestamp:<s>``, ``msgcount:<n>``, ``virtual_queue:<offset>`` or ``special:-1``)."""
        self.request("POST", "/channel/create", {"topic": topic, "channel": channel})
        params = {"topic": topic, "partition": partition, "channel": channel}
        self.request("POST", "/channel/setoffset", params, start.encode())


def _message(data: bytes) -> str:
    try:
        doc = json.loads(data)
    except ValueError:
        return data.decode("utf-8", "replace")
    if isinstance(doc, dict) and isinstance(doc.get("message"), str):
        return str(doc["message"])
    return data.decode("utf-8", "replace")


def fetch_partitions(
    http_address: str, topic: str, tcp_address: str | None, timeout: float = DEFAULT_TIMEOUT
) -> TopicPartitions | None:
    """One ``/partitions`` lookup on a fresh connection (for a worker thread); ``None`` when nsqd
    does not know the topic (404) or refuses its name (400)."""
    node = HTTPNode(http_address, timeout)
    try:
        return node.partitions(topic, tcp_address)
    except NsqHTTPError as exc:
        if exc.status in (400, 404):
            return None
        raise
    finally:
        node.close()


def fetch_partitions_via_lookupd(
    lookupd_http_address: str, topic: str, timeout: float = DEFAULT_TIMEOUT
) -> TopicPartitions | None:
    """A topic's partitions across a cluster: lookupd's ``/lookup?topic=&access=w`` names the
    leader of each partition, and each leader's ``/partitions`` describes the ones it leads
    (offsets, addresses); merged. ``None`` when lookupd does not know the topic yet. The
    leaders are asked together, each for at most :data:`LEADER_TIMEOUT` seconds: the
    partitions of one that does not answer are left out (raises its error when none
    answered)."""
    lookupd = HTTPNode(lookupd_http_address, timeout)
    try:
        params = {"topic": topic, "access": "w"}
        data = lookupd.request("GET", "/lookup", params, headers={"Accept": ACCEPT_V1})
    except NsqHTTPError as exc:
        if exc.status in (400, 404):
            return None
        raise
    finally:
        lookupd.close()
    try:
        found = unwrap(json.loads(data))
        leaders = {
            f"{peer['broadcast_address']}:{peer['http_port']}"
            for peer in (found.get("partitions") or {}).values()
        }
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UnexpectedResponseError(f"/lookup: {exc}") from exc
    # every leader at once, each given LEADER_TIMEOUT: one that does not answer (paused, cut
    # off) leaves its partitions out (the caller keeps the route it had for them)
    wait = min(timeout, LEADER_TIMEOUT)
    with ThreadPoolExecutor(max_workers=max(len(leaders), 1)) as pool:
        asked = [pool.submit(fetch_partitions, a, topic, None, wait) for a in sorted(leaders)]
    merged: dict[int, PartitionInfo] = {}
    first: TopicPartitions | None = None
    failures: list[Exception] = []
    for answer in asked:
        try:
            part = answer.result()
        except (OSError, NsqHTTPError) as exc:
            failures.append(exc)
            continue
        if part is None:
            continue
        first = first or part
        merged.update((info.partition, info) for info in part.partitions)
    if first is None:
        if failures:
            raise failures[0]
        return None
    return replace(first, partitions=tuple(merged[n] for n in sorted(merged)))
