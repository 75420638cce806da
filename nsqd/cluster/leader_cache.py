"""Who leads each partition of a topic, as pnsq lookupd's ``GET /lookup?topic=&access=w``
says (youzan's ``partitions`` map), kept for :data:`LOOKUP_TTL` seconds: where
:class:`~nsqd.cluster.forwarding.Forwarder` sends a stock publish, and what a refused consume
or an administrative call names. The forwarding errors are declared here, below both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx
import trio

from protocol.lookup import ACCEPT_V1, unwrap

from ..broker import Broker

__all__ = [
    "LOOKUP_TTL",
    "ForwardError",
    "LeaderCache",
    "Leaders",
    "NoLeaderError",
    "NoLookupdError",
    "PlacedElsewhereError",
    "placed_leaders",
]

LOOKUP_TTL = 1.0  # seconds a topic's leaders are reused before asking lookupd again


class ForwardError(Exception):
    """The publish could not be forwarded (``str()`` says why; the client gets it)."""


class PlacedElsewhereError(ForwardError):
    """A SUB of a topic this node holds no partition of, placed on other nodes by lookupd."""


class NoLookupdError(ForwardError):
    """No pnsq lookupd answered: the cluster's view of the topic is unknown."""


class NoLeaderError(ForwardError):
    """lookupd names no leader of the topic to forward to right now (a lookupd just restarted,
    whose nodes have not registered again; a failover under way): a client may retry."""


@dataclass(slots=True)
class Leaders:
    """One topic's leaders as last looked up."""

    partitions: dict[int, tuple[str, int]]  # partition -> (host, tcp port) of its leader
    fetched: float
    http: dict[int, str] = field(default_factory=dict)  # partition -> its leader's host:http
    next: int = 0  # the round-robin position of the publishes forwarded to them


class LeaderCache:
    """Topics' leaders by lookupd (see the module doc). ``lookupd_http`` returns the HTTP
    addresses of the pnsq lookupds this node is registered with; ``client`` the HTTP client
    to ask them with."""

    def __init__(
        self,
        lookupd_http: Callable[[], Sequence[str]],
        monotonic: Callable[[], float],
        client: Callable[[], httpx.AsyncClient],
    ) -> None:
        self._lookupd_http = lookupd_http
        self._monotonic = monotonic
        self._client = client
        self._topics: dict[str, Leaders] = {}

    async def get(self, topic: str) -> dict[int, tuple[str, int]]:
        """Partition -> leader address for ``topic`` as lookupd says ({} if it does not know
        the topic). Raises :class:`NoLookupdError` if no lookupd answers."""
        cached = self._topics.get(topic)
        now = self._monotonic()
        if cached is not None and now - cached.fetched < LOOKUP_TTL:
            return cached.partitions
        partitions, http = await self._lookup(topic)
        self._topics[topic] = Leaders(partitions, now, http, cached.next if cached else 0)
        return partitions

    async def http(self, topic: str) -> dict[int, str]:
        """Partition -> ``host:http_port`` of its leader, as lookupd says ({} if it does not
        know the topic). Raises :class:`NoLookupdError` if no lookupd answers."""
        await self.get(topic)
        cached = self._topics.get(topic)
        return dict(cached.http) if cached is not None else {}

    def entry(self, topic: str) -> Leaders:
        """``topic``'s entry, as :meth:`get` (or :meth:`keep`) left it."""
        return self._topics[topic]

    def forget(self, topic: str) -> None:
        """Look ``topic`` up again next time."""
        self._topics.pop(topic, None)

    async def until_moved(
        self, topic: str, number: int, old: tuple[str, int], within: float, every: float
    ) -> None:
        """Look ``topic`` up again, every ``every`` seconds for up to ``within``, until lookupd
        names another leader of partition ``number`` than ``old`` (which said it leads it no
        more: lookupd's answer follows its decision a moment later), or none answers."""
        with trio.move_on_after(within):
            while True:
                self.forget(topic)
                try:
                    if (await self.get(topic)).get(number) != old:
                        return
                except NoLookupdError:
                    return
                await trio.sleep(every)

    def keep(self, topic: str, partitions: dict[int, tuple[str, int]]) -> None:
        """While no lookupd answers: ``partitions``, known otherwise (:func:`placed_leaders`),
        stand in until the next lookup, which is made next time."""
        stale = self._monotonic() - LOOKUP_TTL
        cached = self._topics.get(topic)
        self._topics[topic] = Leaders(partitions, stale, {}, cached.next if cached else 0)

    async def _lookup(self, topic: str) -> tuple[dict[int, tuple[str, int]], dict[int, str]]:
        addresses = list(self._lookupd_http())
        if not addresses:
            raise NoLookupdError("no pnsq lookupd connected")
        problems = []
        for http in addresses:
            url = f"http://{http}/lookup"
            params = {"topic": topic, "access": "w"}
            try:
                reply = await self._client().get(url, params=params, headers={"Accept": ACCEPT_V1})
            except httpx.HTTPError as exc:
                problems.append(f"{http}: {failure(exc)}")
                continue
            if reply.status_code == 404:
                return {}, {}  # lookupd does not know the topic
            try:
                reply.raise_for_status()
                document = unwrap(reply.json())
                return _partition_leaders(document)
            except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
                problems.append(f"{http}: {failure(exc)}")
        raise NoLookupdError("lookupd unreachable: " + "; ".join(problems))


def failure(exc: Exception) -> str:
    """An HTTP failure in a message: its text, or its kind where it has none (httpx's timeouts
    have an empty text)."""
    return str(exc) or type(exc).__name__


def placed_leaders(broker: Broker, topic: str) -> dict[int, tuple[str, int]]:
    """Partition -> leader address, for the partitions of ``topic`` this node holds led by
    another node, as lookupd last placed them here."""
    local = broker.find_topic(topic)
    if local is None or local.deleted:
        return {}
    found = {}
    for partition in local.partitions:
        state = partition.state
        host, _, port = state.placement.leader.rpartition(":")
        if not state.leads and host and port.isdigit():
            found[partition.number] = (host, int(port))
    return found


def _partition_leaders(
    document: dict[str, object],
) -> tuple[dict[int, tuple[str, int]], dict[int, str]]:
    """Partition -> its leader's ``(host, tcp_port)``, and -> ``host:http_port`` (where the
    lookupd names one), from a ``/lookup`` reply's ``partitions``."""
    partitions = document.get("partitions") or {}
    if not isinstance(partitions, dict):
        raise ValueError("partitions is not an object")
    tcp: dict[int, tuple[str, int]] = {}
    http: dict[int, str] = {}
    for number, peer in partitions.items():
        if isinstance(peer, dict):
            host = str(peer["broadcast_address"])
            tcp[int(number)] = (host, int(peer["tcp_port"]))
            if "http_port" in peer:
                http[int(number)] = f"{host}:{int(peer['http_port'])}"
    return tcp, http
