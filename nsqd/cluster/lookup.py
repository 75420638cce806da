"""nsqd's side of nsqlookupd (``--lookupd-tcp-address``): the supervisor that keeps one task per
lookupd, reconnecting.

For each lookupd (:mod:`nsqd.cluster.discovery` says which), one task does what nsqd's
``lookupLoop``/``lookupPeer`` do: connect (1 s timeout), register over protocol V1
(:mod:`nsqd.cluster.registration`) until an error closes the connection, then reconnect (0.5 s,
doubling to 5 s) and register everything again, so nsqd keeps working while a lookupd is down
and a restarted lookupd rebuilds its view.

pnsq's extension (invisible to a stock nsqlookupd, which ignores unknown IDENTIFY keys and gets
no other command): a lookupd whose IDENTIFY reply speaks pnsq's partitions also gets, on its
HTTP port, this node's placement exchange (:mod:`nsqd.cluster.placement`) and is asked for its
peers (:func:`~nsqd.cluster.discovery.discover`).

With the cluster credential each V1 connection opens with the cluster handshake, and only a
lookupd that proves the secret gets pnsq's extensions (and with them the credential's HTTP
header); one that does not answer the handshake at all is registered with as a stock
nsqlookupd (:meth:`LookupClient._identify`, docs/security.md).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import trio

from pnsq._goflag.addresses import split_host_port
from pnsq._netio.handshake import FailureLog
from protocol.cluster_auth import REFUSED_CODE, HandshakeError, NotAHandshake, http_headers
from protocol.lookup import LookupdNode

from ..broker import Broker
from ..replication.progress import ProgressTracker
from .discovery import LookupdDirectory, discover
from .placement import hand_over, poll_assignments, report_progress
from .registration import (
    LookupIdentity,
    LookupPeerError,
    V1Connection,
    keep_registered,
    lookupd_http_address,
    speaks_partitions,
)

log = logging.getLogger("nsqd.lookup")

DIAL_TIMEOUT = 1.0  # nsqd's lookupPeer: net.DialTimeout(..., time.Second)


class _AsStock(LookupPeerError):
    """The lookupd answered no cluster handshake: the session starts again as with a stock
    nsqlookupd (not an error)."""


class LookupClient:
    """Keeps this nsqd registered with every lookupd in ``addresses`` (see the module
    docstring). Run :meth:`run` in a nursery; :meth:`set_addresses` changes the list.
    ``secret``: the cluster credential, proved on every V1 link before IDENTIFY and sent (as
    its HTTP header) with the assignments, progress and leaving calls a lookupd with a secret
    refuses without it."""

    def __init__(
        self,
        broker: Broker,
        identity: LookupIdentity,
        addresses: Iterable[str],
        *,
        poll_interval: float = 1.0,
        replica_lag_max: float = 10.0,
        secret: bytes = b"",
    ) -> None:
        self.broker = broker
        self.progress = ProgressTracker(replica_lag_max)
        self.identity = identity
        self.lookupds = LookupdDirectory(addresses)
        self.poll_interval = poll_interval
        #: the cluster credential: proved on every V1 link before IDENTIFY
        self.secret = secret
        #: the cluster credential's header for pnsq lookupd's cluster-control endpoints
        self.auth = http_headers(secret)
        #: failed handshakes, logged at most once a minute per lookupd (it may retry forever)
        self.failures = FailureLog(log, broker.clock.monotonic)
        self._scopes: dict[str, trio.CancelScope] = {}
        self._pnsq_http: dict[str, str] = {}  # lookupd address -> its HTTP address (pnsq's)
        #: lookupds that did not answer the cluster handshake: registered with as stock ones
        self._stock: set[str] = set()
        self._nursery: trio.Nursery | None = None
        httpx_log = logging.getLogger("httpx")
        if httpx_log.level == logging.NOTSET:  # not one INFO line per assignments poll
            httpx_log.setLevel(logging.WARNING)

    def pnsq_http_addresses(self) -> list[str]:
        """HTTP addresses of the pnsq lookupds this node has registered with (they place
        partitions), reachable or not right now."""
        return list(self._pnsq_http.values())

    async def run(self) -> None:
        """Serve every lookupd until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self.set_addresses(self.lookupds.configured)
            await trio.sleep_forever()

    def set_addresses(self, addresses: Iterable[str]) -> None:
        """Start serving new lookupds and drop the ones no longer listed (PUT /config)."""
        self.lookupds.configure(addresses)
        self._reconcile()

    async def hand_over(self) -> None:
        """A clean shutdown: pnsq's lookupds move this node's leaderships away (see
        :func:`nsqd.cluster.placement.hand_over`)."""
        await hand_over(self.broker, self.identity.node_id, self.pnsq_http_addresses(), self.auth)

    def _reconcile(self) -> None:
        wanted = self.lookupds.wanted()
        for address in list(self._scopes):
            if address not in wanted:
                log.info("LOOKUP(%s): removing peer", address)
                self._scopes.pop(address).cancel()
                self._pnsq_http.pop(address, None)
                self._stock.discard(address)
                self.lookupds.forget(address)
        if self._nursery is None:
            return
        for address in wanted:
            if address not in self._scopes:
                log.info("LOOKUP(%s): adding peer", address)
                scope = self._scopes[address] = trio.CancelScope()
                self._nursery.start_soon(self._peer, address, scope)

    def _found(self, source: str, nodes: list[LookupdNode]) -> None:
        if self.lookupds.found(source, nodes):
            self._reconcile()

    async def _peer(self, address: str, scope: trio.CancelScope) -> None:
        with scope:
            delay = 0.5
            while True:
                started = self.broker.clock.monotonic()
                try:
                    await self._session(address)
                except* HandshakeError as refused:
                    for failure in refused.exceptions:
                        self.failures.failed(address, str(failure))
                except* (
                    OSError,
                    trio.BrokenResourceError,
                    trio.TooSlowError,
                    LookupPeerError,
                ) as g:
                    for exc in g.exceptions:
                        # (taking a lookupd for a stock one is no error: its WARNING said why)
                        level = logging.INFO if isinstance(exc, _AsStock) else logging.ERROR
                        log.log(level, "LOOKUPD(%s): %s", address, str(exc) or type(exc).__name__)
                except* Exception:  # a lookupd problem must never take nsqd down
                    log.exception("LOOKUPD(%s): unexpected error", address)
                if self.broker.clock.monotonic() - started > 5.0:
                    delay = 0.5  # it was up for a while: retry soon
                await trio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _session(self, address: str) -> None:
        try:
            host, port = split_host_port(address)
        except ValueError as exc:  # PUT /config/nsqlookupd_tcp_addresses takes any string
            raise LookupPeerError(str(exc)) from None
        log.info("LOOKUP connecting to %s", address)
        with trio.fail_after(DIAL_TIMEOUT):
            stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            conn = V1Connection(stream)
            info, extensions = await self._identify(conn, address)
            partitioned = extensions and speaks_partitions(info)
            log.info("LOOKUPD(%s): peer info %s", address, info)
            # the host we reached, which a broadcast hostname may not be
            http = lookupd_http_address(host, info) if partitioned else ""
            self.lookupds.names_itself(address, info)
            async with trio.open_nursery() as nursery:
                if partitioned:
                    self._pnsq_http[address] = http  # kept while it is down: it places topics
                    node_id = self.identity.node_id
                    poll = (self.broker, node_id, address, http, self.poll_interval, self.auth)
                    nursery.start_soon(poll_assignments, *poll)
                    report = (self.broker, self.progress, node_id, address, http, self.auth)
                    nursery.start_soon(report_progress, *report)
                    nursery.start_soon(discover, address, http, self._found)
                elif address in self._pnsq_http:
                    del self._pnsq_http[address]  # replaced by a stock nsqlookupd
                await keep_registered(conn, self.broker, address, partitioned)

    async def _identify(self, conn: V1Connection, address: str) -> tuple[dict[str, object], bool]:
        """IDENTIFY, after the cluster handshake when this node holds the secret: the lookupd's
        reply, and whether pnsq's extensions (placement, the HTTP calls with the credential)
        may be used with it.

        A lookupd that answers the handshake with something that is no handshake at all, or
        not at all, is taken for a stock nsqlookupd: the next connection registers with it as
        Go nsqd would, without pnsq's extensions, so it learns what any nsqlookupd learns and
        is never sent the credential nor obeyed. If it then refuses a plain IDENTIFY with
        ``E_CLUSTER_AUTH``, it holds a secret after all: the handshake again.
        """
        if not self.secret:
            return await conn.identify(self.identity), True
        if address not in self._stock:
            try:
                proved = await conn.prove(self.secret, self.identity.node_id)
            except (NotAHandshake, trio.TooSlowError) as exc:
                self._stock.add(address)
                log.warning(
                    "LOOKUPD(%s): no cluster handshake (%s): registering with it as with a stock "
                    "nsqlookupd, without pnsq's extensions (no placement, no credential sent)",
                    address,
                    str(exc) or "no answer in time",
                )
                raise _AsStock("reconnecting as to a stock nsqlookupd") from exc
            log.info("LOOKUPD(%s): proved the cluster credential as %s", address, proved)
            return await conn.identify(self.identity, magic=False), True
        try:
            return await conn.identify(self.identity, extensions=False), False
        except LookupPeerError as exc:
            if REFUSED_CODE in str(exc):  # it holds a secret: the handshake next time
                self._stock.discard(address)
            raise
