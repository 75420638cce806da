"""Which lookupds nsqd registers with: those given with ``--lookupd-tcp-address``, plus those
their youzan ``/listlookup`` names (an HA lookupd names every live lookupd of its cluster; a lone
one names itself).

:class:`LookupdDirectory` is the list; :func:`discover` asks one pnsq lookupd for its peers now
and every :data:`DISCOVER_INTERVAL` seconds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import httpx
import trio

from protocol.lookup import ACCEPT_V1, LISTLOOKUP_PATH, LookupdNode, parse_listlookup

log = logging.getLogger("nsqd.lookup")

DISCOVER_INTERVAL = 5.0  # seconds between two /listlookup of a lookupd


class LookupdDirectory:
    """The lookupds to serve: the configured ones, then those their /listlookup named."""

    def __init__(self, configured: Iterable[str]) -> None:
        self.configured = list(dict.fromkeys(configured))  # as configured (--lookupd-tcp-address)
        #: lookupd address -> the lookupds its /listlookup named (TCP addresses) that are not
        #: configured: registered with as well (an HA lookupd's peers)
        self._discovered: dict[str, set[str]] = {}
        #: lookupd address -> (broadcast address, TCP port) as the lookupd names itself
        self._self_named: dict[str, tuple[str, int]] = {}

    def configure(self, addresses: Iterable[str]) -> None:
        """A new configured list (PUT /config); what a source no longer listed named is gone."""
        self.configured = list(dict.fromkeys(addresses))
        for source in [a for a in self._discovered if a not in self.configured]:
            del self._discovered[source]

    def wanted(self) -> list[str]:
        """The configured lookupds, then those their /listlookup named."""
        found = [a for named in self._discovered.values() for a in sorted(named)]
        return list(dict.fromkeys([*self.configured, *found]))

    def forget(self, address: str) -> None:
        """``address`` is no longer served: drop what it said."""
        self._self_named.pop(address, None)
        self._discovered.pop(address, None)

    def names_itself(self, address: str, info: dict[str, object]) -> None:
        """The lookupd at ``address`` answered IDENTIFY with ``info`` (its own name)."""
        host, port = str(info.get("broadcast_address", "")), info.get("tcp_port")
        if isinstance(port, int):
            self._self_named[address] = (host, port)

    def found(self, source: str, nodes: Iterable[LookupdNode]) -> bool:
        """``source``'s /listlookup named ``nodes``: keep the ones that are not a lookupd
        this node already serves (under another address, e.g. a hostname). True if that
        changed what ``source`` names."""
        known = set(self._self_named.values())
        named = {
            node.tcp_address
            for node in nodes
            if (node.host, node.tcp_port) not in known and node.tcp_address not in self.configured
        }
        if named == self._discovered.get(source, set()):
            return False
        for address in named - self._discovered.get(source, set()):
            log.info("LOOKUPD(%s): names lookupd %s", source, address)
        self._discovered[source] = named
        return True


async def discover(
    address: str, http_address: str, found: Callable[[str, list[LookupdNode]], None]
) -> None:
    """Ask the lookupd for its peers (youzan's ``/listlookup``) now and every
    :data:`DISCOVER_INTERVAL` seconds, and hand them to ``found``."""
    url = f"http://{http_address}{LISTLOOKUP_PATH}"
    timeout = httpx.Timeout(5.0, connect=1.0)
    async with httpx.AsyncClient(timeout=timeout) as http:
        while True:
            try:
                reply = await http.get(url, headers={"Accept": ACCEPT_V1})
                reply.raise_for_status()
                nodes = parse_listlookup(reply.json())
            except (httpx.HTTPError, ValueError) as exc:
                log.warning("LOOKUPD(%s): listlookup: %s", address, exc)
            else:
                found(address, nodes)
            await trio.sleep(DISCOVER_INTERVAL)
