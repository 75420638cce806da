"""An administrative HTTP call made on one node, carried to every other node that leads a
partition of its topic, so that pausing, creating, deleting, emptying or moving a channel on any
node holding the topic changes every partition, wherever it is led.

nsqd's admin endpoints act on the partitions held here. In a pnsq cluster a topic's partitions
are led by different nodes, and each leader carries its partitions' administrative state to
their replicas (:mod:`nsqd.broker.admin_state`); so once a node applied a call, it sends the same
call (method ``POST``, path, query and body) to the HTTP address of each partition's leader that
is not itself, as pnsq lookupd's ``/lookup`` names them. Such a call carries
:data:`HOP_HEADER`: the node that gets it applies it and carries it no further. nsqadmin already
sends a change to every producer lookupd lists (every partition's leader); each of them also
carries it to the others, and the repeats are harmless (the changes are idempotent, and a
channel deleted a moment ago may be deleted again, see :mod:`nsqd.broker.admin`).

Who may use it: the calls are nsqd's own HTTP admin API, open as on nsqd (no credential); the
header only stops the carrying, which anybody may ask for (a call then acts on one node, as
before). The one that asks AUTH with ``--auth-http-address`` (``/channel/setoffset``,
:mod:`nsqd.http.auth`) is carried with the caller's ``Authorization`` header, and each leader
asks its own auth server. A leader that cannot be reached is logged; the answer to the caller
is this node's.
"""

from __future__ import annotations

import logging
from typing import Final

import httpx
import trio

from ..broker import Broker
from .forwarding import Forwarder, NoLookupdError

log = logging.getLogger("nsqd.http")

HOP_HEADER: Final = "X-Pnsq-Admin-Hop"  # the call was carried here: apply, carry no further
TIMEOUT: Final = 15.0  # seconds for one carried call (it waits for the leader's replicas)


class AdminSpread:
    """Carries admin calls to the other leaders of their topic (see the module doc); does
    nothing without a pnsq lookupd (standalone nodes, stock nsqlookupd)."""

    def __init__(self, broker: Broker, forwarder: Forwarder | None) -> None:
        self.broker = broker
        self.forwarder = forwarder

    async def spread(
        self,
        topic: str,
        path: str,
        raw_query: str,
        body: bytes = b"",
        partition: int | None = None,
        authorization: bytes = b"",
    ) -> list[str]:
        """POST ``path?raw_query`` with ``body`` to the leader of each partition of ``topic``
        (only ``partition`` when given) that this node does not lead, with the caller's
        ``Authorization`` header if it sent one (a leader with an auth server asks it too);
        returns the addresses it reached (failures are logged)."""
        forwarder = self.forwarder
        if forwarder is None or not forwarder.active:
            return []
        try:
            leaders = await forwarder.leaders_http(topic)
        except NoLookupdError as exc:
            log.warning("ADMIN(%s): %s not carried to the other leaders: %s", topic, path, exc)
            return []
        targets = sorted(
            {
                address
                for number, address in leaders.items()
                if (partition is None or number == partition) and not self._leads(topic, number)
            }
        )
        reached: list[str] = []
        if not targets:
            return reached
        url_query = f"?{raw_query}" if raw_query else ""
        async with (
            httpx.AsyncClient(timeout=httpx.Timeout(TIMEOUT, connect=2.0)) as client,
            trio.open_nursery() as nursery,
        ):
            for address in targets:
                url = f"http://{address}{path}{url_query}"
                headers = {HOP_HEADER: "1"}
                if authorization:
                    headers["Authorization"] = authorization.decode("latin-1")
                nursery.start_soon(self._post, client, url, body, headers, address, reached)
        return sorted(reached)

    def _leads(self, topic: str, number: int) -> bool:
        local = self.broker.find_topic(topic)
        return (
            local is not None
            and not local.deleted
            and local.holds(number)
            and local.partition(number).state.leads
        )

    async def _post(
        self,
        client: httpx.AsyncClient,
        url: str,
        body: bytes,
        headers: dict[str, str],
        address: str,
        reached: list[str],
    ) -> None:
        try:
            reply = await client.post(url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            log.warning("ADMIN: carrying %s: %s", url, str(exc) or type(exc).__name__)
            return
        if reply.status_code != 200:
            log.warning("ADMIN: %s answered %d %s", url, reply.status_code, reply.text)
            return
        reached.append(address)
