"""Forwarding a stock publish to a partition leader elsewhere in the cluster.

NSQ's usual layout puts an nsqd beside every producer, and stock producers (go-nsq, pynsq) name
no partition. In a pnsq cluster a node may lead none of a topic's partitions; such a node
forwards the publish to a leader lookupd names and acknowledges only once that leader did, so
the producer's ``OK`` still means "stored by the partition's leader". Leaders come from pnsq
lookupd's ``GET /lookup?topic=&access=w`` (youzan's ``partitions`` map), cached for a second
(:mod:`.leader_cache`; while lookupd still names this node, a move or hand-over a moment ago,
it is asked again for a while); one connection per leader is kept and reused, one publish at
a time on it.

That connection is the forwarding link (``"  F2"``, :mod:`protocol.cluster_links`;
:mod:`.leader_links`), opened through :class:`~pnsq._netio.cluster_link.ClusterLinks`: over TLS
when this node has a certificate, then, with a cluster secret, the handshake that proves it to
the leader, which then takes the link as a trusted cluster node's (no AUTH asked: the publish
was authorized here, where the client connected; docs/security.md). After that it speaks
protocol V2.

A stock publish of a topic nobody has asks lookupd to create it (``--default-partitions``, the
asking node leading its first partition), so two nodes publishing a new topic at once cannot
both create their own copy of it.

Only the stock publishes are forwarded (``PUB``, ``MPUB``, ``DPUB``); partition-aware ones
(``PUB <topic> <partition>``, the ``_TRACE`` and ``_EXT`` families) get youzan's
``E_FAILED_ON_NOT_LEADER`` and look the leader up themselves, as youzan's clients do; naming a
topic this node does not hold, they get ``E_TOPIC_NOT_EXIST`` and create nothing
(:meth:`Forwarder.refuses`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import httpx
import trio

from pnsq._netio.cluster_link import ClusterLinks
from protocol import Dpub, Mpub, ProtocolError, Pub
from protocol.cluster_auth import http_headers
from protocol.encode import encode_command

from ..broker import Broker
from ..core.errors import NotLeaderError, TopicNotFoundError
from .leader_cache import (  # the errors are this module's to its callers
    ForwardError as ForwardError,
    LeaderCache,
    NoLeaderError as NoLeaderError,
    NoLookupdError as NoLookupdError,
    PlacedElsewhereError as PlacedElsewhereError,
    failure,
    placed_leaders,
)
from .leader_links import LeaderLinks

log = logging.getLogger("nsqd.forward")

TIMEOUT = 5.0  # one forwarded publish, connecting included
CREATE_WAIT = 2.0  # seconds a publish waits for a topic it had lookupd create to be placed
RELOOK = 0.05  # seconds between lookups while lookupd still names this node as the leader
_NOT_LEADER = "E_FAILED_ON_NOT_LEADER"  # a leader's answer for a partition it leads no more
#: lookupd's /topic/create answers once the placed nodes registered the topic, after 2 s at
#: most: the node's usual 2 s read timeout turned a slow registration into "lookupd unreachable"
ADMIN_TIMEOUT = httpx.Timeout(TIMEOUT, connect=1.0)


class Forwarder:
    """Forwards publishes for topics this node leads no partition of (see the module doc).

    ``lookupd_http`` returns the HTTP addresses of the pnsq lookupds this node is registered
    with (empty while none is connected); ``self_id`` returns this node's ``host:tcp_port``;
    ``monotonic`` is the clock the cache of leaders ages by (the broker's); ``secret``, the
    cluster credential, goes (as its HTTP header) with the admin calls to lookupd, some of which
    (``/topic/partition/expand``) a lookupd with a secret refuses without it; ``links`` opens
    the forwarding links to leaders (None: plaintext, no credential).
    """

    def __init__(
        self,
        lookupd_http: Callable[[], Sequence[str]],
        self_id: Callable[[], str],
        monotonic: Callable[[], float] = trio.current_time,
        secret: bytes = b"",
        links: ClusterLinks | None = None,
    ) -> None:
        self._lookupd_http = lookupd_http
        self._links = LeaderLinks(links or ClusterLinks(self_id, monotonic, log), TIMEOUT)
        self._auth = http_headers(secret)
        self._monotonic = monotonic
        self._self_id = self_id
        self._cache = LeaderCache(lookupd_http, monotonic, self._client)
        self._http: httpx.AsyncClient | None = None

    @property
    def active(self) -> bool:
        """True when a pnsq lookupd places partitions (forwarding applies)."""
        return bool(self._lookupd_http())

    def known_here(self, broker: Broker, topic: str, partition: int | None) -> bool | None:
        """:meth:`must_forward`'s answer when this node knows it without asking lookupd (a
        named partition, no pnsq lookupd, or a topic held here), None when lookupd must be
        asked, or the publish refused (:meth:`refuses`). The topic is looked at before
        :attr:`active`: the publish path asks this."""
        if partition is not None:
            return None if self.refuses(broker, topic, partition) else False
        local = broker.find_topic(topic)
        if local is not None and not local.deleted:
            # placed here by lookupd (reachable now or not): forwarded unless led here
            return local.managed and not local.led
        return None if self.active else False

    async def must_forward(self, broker: Broker, topic: str, partition: int | None) -> bool:
        """Whether a stock publish (``partition`` None) of ``topic`` goes to a leader on
        another node: this node holds the topic, placed by lookupd, and leads none of its
        partitions; or it lacks the topic and lookupd knows it. Raises
        :class:`NoLookupdError` for a topic unknown here while no lookupd answers."""
        known = self.known_here(broker, topic, partition)
        if known is not None:
            return known
        self.check_held(broker, topic, partition)
        if await self.leaders(topic):
            return True
        await self._create(broker, topic)
        local = broker.find_topic(topic)
        if local is not None and local.led:
            return False  # placed here: publish locally
        self._cache.forget(topic)
        return True

    def refuses(self, broker: Broker, topic: str, partition: int | None) -> bool:
        """Whether a publish naming ``partition`` of ``topic`` is refused here: in a cluster a
        topic comes to a node only by lookupd's placement, never by a publish that names a
        partition of a topic the node does not hold (it would make a copy lookupd does not
        place: unreplicated, and deleted or stranded later with the messages acknowledged to
        it). youzan's nsqd creates none either."""
        if partition is None or not self.active:
            return False
        local = broker.find_topic(topic)
        return local is None or local.deleted

    def check_held(self, broker: Broker, topic: str, partition: int | None) -> None:
        """When :meth:`refuses` says so, raise :class:`~nsqd.core.errors.TopicNotFoundError`
        (``E_TOPIC_NOT_EXIST``: look the topic up again), or
        :class:`~nsqd.core.errors.NotLeaderError` while lookupd's placement of the topic here
        is being opened (try again)."""
        if not self.refuses(broker, topic, partition):
            return
        if broker.is_opening(topic):
            raise NotLeaderError(f"topic {topic}: not served here yet (its partitions are opening)")
        raise TopicNotFoundError(f"topic {topic} partition {partition} is not held here")

    async def ensure_local(self, broker: Broker, topic: str) -> None:
        """Before a SUB of ``topic``: a topic unknown here and to lookupd is created through
        lookupd (this node leading a partition of it, as a PUB would), so a SUB never makes
        a copy lookupd does not know. Raises :class:`PlacedElsewhereError` when lookupd
        placed the topic on other nodes only, :class:`NoLeaderError` when it has placed it
        nowhere yet (every node drained), :class:`NoLookupdError` when no lookupd answers."""
        if not self.active:
            return
        local = broker.find_topic(topic)
        if local is not None and not local.deleted:
            return
        if await self.leaders(topic):
            raise PlacedElsewhereError(topic)
        await self._create(broker, topic)
        local = broker.find_topic(topic)
        if local is None or local.deleted:  # pending on lookupd: no node to place it on yet
            raise NoLeaderError(f"topic {topic} has no partition leader")

    async def create_topic(
        self,
        broker: Broker,
        topic: str,
        partitions: int | None,
        ordered: bool | None,
        ext: bool | None,
    ) -> None:
        """nsqd's ``/topic/create`` on a node placed by lookupd: a topic lookupd does not know
        is created through it (``partitions`` or ``--default-partitions``, youzan's
        ``orderedmulti`` and ``extend`` as asked, this node leading its first partition); one
        it knows is left as it is (held here or not: a node never makes a copy lookupd did
        not place). Raises :class:`NoLookupdError`, :class:`ForwardError`."""
        if await self.leaders(topic):
            return
        extra: dict[str, str | int] = {}
        if partitions is not None:
            extra["partition_num"] = partitions
        if ordered:
            extra["orderedmulti"] = "true"
        if ext:
            extra["extend"] = "true"
        await self._create(broker, topic, extra)

    async def _create(
        self, broker: Broker, topic: str, extra: dict[str, str | int] | None = None
    ) -> None:
        """Ask lookupd to create ``topic`` (``--default-partitions``, this node leading its
        first partition; ``extra`` parameters over those), then wait until its assignment
        reached this node. Raises ForwardError if lookupd refuses."""
        addresses = list(self._lookupd_http())
        params: dict[str, str | int] = {
            "topic": topic,
            "partition_num": broker.config.default_partitions,
            "replicator": broker.config.default_replicator,
            "prefer": self._self_id(),
            **(extra or {}),
        }
        problems = []
        for http in addresses:
            try:
                url = f"http://{http}/topic/create"
                reply = await self._client().post(
                    url, params=params, headers=self._auth, timeout=ADMIN_TIMEOUT
                )
            except httpx.HTTPError as exc:
                problems.append(f"{http}: {failure(exc)}")
                continue
            if reply.status_code != 200:
                raise ForwardError(f"lookupd refused to create topic {topic}: {reply.text}")
            log.info("TOPIC(%s): created through lookupd %s", topic, http)
            with trio.move_on_after(CREATE_WAIT):
                while broker.find_topic(topic) is None:
                    generation = broker.changes.generation
                    await broker.changes.wait_after(generation)
            return
        raise NoLookupdError("lookupd unreachable: " + "; ".join(problems))

    async def create_partition(
        self, broker: Broker, topic: str, number: int, ext: bool | None
    ) -> None:
        """youzan's ``INTERNAL_CREATE_TOPIC`` on a node placed by lookupd: return once this
        node leads partition ``number`` of ``topic``. A topic lookupd does not know is created
        there (``number + 1`` partitions at least, ``extend`` as asked, this node leading its
        first partition, as for a publish); a known one too small is expanded. Raises
        ForwardError when lookupd refuses or places the partition elsewhere."""
        if _leads(broker, topic, number):
            return
        self._cache.forget(topic)
        leaders = await self.leaders(topic)
        if not leaders:
            count = max(broker.config.default_partitions, number + 1)
            params: dict[str, str | int] = {
                "topic": topic,
                "partition_num": count,
                "replicator": broker.config.default_replicator,
                "prefer": self._self_id(),
            }
            if ext:
                params["extend"] = "true"
            await self._admin(topic, "/topic/create", params)
        elif number not in leaders and number > max(leaders):
            expand: dict[str, str | int] = {"topic": topic, "partition_num": number + 1}
            await self._admin(topic, "/topic/partition/expand", expand)
        with trio.move_on_after(CREATE_WAIT):
            while not _leads(broker, topic, number):
                generation = broker.changes.generation
                await broker.changes.wait_after(generation)
        if not _leads(broker, topic, number):
            self._cache.forget(topic)
            where = (await self.leaders(topic)).get(number)
            elsewhere = f"{where[0]}:{where[1]}" if where else "no node yet"
            raise ForwardError(f"partition {number} of topic {topic} is led by {elsewhere}")

    async def _admin(self, topic: str, path: str, params: dict[str, str | int]) -> None:
        """POST an admin call to the first lookupd that answers; ForwardError if it refuses."""
        problems = []
        for http in list(self._lookupd_http()):
            try:
                url = f"http://{http}{path}"
                reply = await self._client().post(
                    url, params=params, headers=self._auth, timeout=ADMIN_TIMEOUT
                )
            except httpx.HTTPError as exc:
                problems.append(f"{http}: {failure(exc)}")
                continue
            if reply.status_code != 200:
                raise ForwardError(f"lookupd refused {path} of topic {topic}: {reply.text}")
            log.info("TOPIC(%s): %s through lookupd %s", topic, path, http)
            return
        raise NoLookupdError("lookupd unreachable: " + "; ".join(problems))

    async def leaders(self, topic: str) -> dict[int, tuple[str, int]]:
        """:meth:`LeaderCache.get` (raises :class:`NoLookupdError`)."""
        return await self._cache.get(topic)

    async def leaders_http(self, topic: str) -> dict[int, str]:
        """:meth:`LeaderCache.http` (raises :class:`NoLookupdError`)."""
        return await self._cache.http(topic)

    async def post_to_leader(
        self,
        topic: str,
        partition: int,
        path: str,
        params: dict[str, str],
        body: bytes,
        headers: dict[str, str],
    ) -> tuple[int, bytes]:
        """POST ``path`` to the HTTP API of the leader of ``partition`` of ``topic`` (an HTTP
        publish that must be stored there: one with an idempotency key); its status and body.
        Raises :class:`NoLeaderError` when lookupd names none, ForwardError when it cannot be
        reached."""
        leaders = await self.leaders_http(topic)
        address = leaders.get(partition)
        if address is None:
            raise NoLeaderError(f"topic {topic} partition {partition} has no leader")
        try:
            reply = await self._client().post(
                f"http://{address}{path}", params=params, content=body, headers=headers
            )
        except httpx.HTTPError as exc:
            raise ForwardError(f"leader {address} of {topic}/{partition}: {exc}") from exc
        return reply.status_code, reply.content

    async def publish(
        self, topic: str, bodies: list[bytes], defer_ms: int = 0, broker: Broker | None = None
    ) -> None:
        """Publish ``bodies`` (one DPUB when ``defer_ms``) at a leader of ``topic``, round-robin
        over its partitions; returns once that leader acknowledged. While no lookupd answers,
        the leaders this node's own placement names (``broker``'s: the partitions of ``topic``
        it holds as a replica) stand in for lookupd's. A leader that answers it leads the
        partition no more (a move, a drain, a hand-over a moment ago) is looked up again and
        the rest goes once more, to the new leader (a stock client cannot do that itself: it
        gets an error it does not know, fatal when forwarded). A refused publish may have been
        stored all the same (appended as the lead moved away): sent again, it is there at
        least once, as a stock client's own retry would leave it. Raises ForwardError."""
        sent = 0  # bodies a leader acknowledged
        for attempt in range(2):
            leaders, numbers = await self._targets(topic, broker)
            entry = self._cache.entry(topic)
            number = numbers[entry.next % len(numbers)]
            entry.next += 1
            address = leaders[number]
            rest = bodies[sent:]
            if defer_ms:
                commands = [encode_command(Dpub(topic, defer_ms, body)) for body in rest]
            elif len(rest) == 1:
                commands = [encode_command(Pub(topic, rest[0], number))]
            else:
                commands = [encode_command(Mpub(topic, rest, number))]
            acked, refused = await self._send(topic, address, commands)
            if refused is None:
                return
            sent += acked  # (DPUBs go one by one: those acknowledged are not sent again)
            if attempt == 0 and refused.startswith(_NOT_LEADER):
                log.info(
                    "FORWARD: %s:%d leads %s/%d no more: looking again", *address, topic, number
                )
                await self._cache.until_moved(topic, number, address, CREATE_WAIT, RELOOK)
                continue
            raise ForwardError(f"leader {address[0]}:{address[1]}: {refused}")

    async def _send(
        self, topic: str, address: tuple[str, int], commands: list[bytes]
    ) -> tuple[int, str | None]:
        """Send ``commands`` to the leader at ``address`` one by one: how many it acknowledged
        and its refusal of the next (None once all were). Raises ForwardError when the link
        fails."""
        try:
            with trio.fail_after(TIMEOUT):
                return await self._links.send_all(address, commands)
        except (
            OSError,
            trio.BrokenResourceError,
            trio.ClosedResourceError,
            trio.TooSlowError,
            ProtocolError,  # the link was refused (TLS, the credential), or not V2 framing
        ) as exc:
            await self._links.drop(address)
            self._cache.forget(topic)
            reason = str(exc) or type(exc).__name__
            raise ForwardError(f"forwarding to {address[0]}:{address[1]}: {reason}") from exc

    async def _targets(
        self, topic: str, broker: Broker | None
    ) -> tuple[dict[int, tuple[str, int]], list[int]]:
        """``topic``'s leaders and the partitions led elsewhere, for :meth:`publish`. While
        lookupd still names this node for the partitions it leads no more (a move or a
        hand-over a moment ago: the registrations it answers from follow its decision) or
        does not lead yet (a new topic placed here), it is asked again, for up to
        :data:`CREATE_WAIT` seconds, before :class:`NoLeaderError`."""
        me = self._self_id()
        with trio.move_on_after(CREATE_WAIT):
            while True:
                try:
                    leaders = await self.leaders(topic)
                except NoLookupdError:
                    leaders = placed_leaders(broker, topic) if broker is not None else {}
                    if not leaders:
                        raise
                    self._cache.keep(topic, leaders)  # (lookupd's word, kept here)
                if not leaders:
                    raise NoLeaderError(f"topic {topic} has no partition leader")
                numbers = sorted(n for n, (h, p) in leaders.items() if f"{h}:{p}" != me)
                if numbers:
                    return leaders, numbers
                self._cache.forget(topic)
                await trio.sleep(RELOOK)
        raise NoLeaderError(f"topic {topic}: lookupd names this node, which leads no partition")

    def _client(self) -> httpx.AsyncClient:
        """The HTTP client for lookupd, made on first use."""
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=httpx.Timeout(2.0, connect=1.0))
        return self._http

    async def aclose(self) -> None:
        """Close the leader connections and the HTTP client."""
        await self._links.aclose()
        if self._http is not None:
            await self._http.aclose()


def _leads(broker: Broker, topic: str, number: int) -> bool:
    local = broker.find_topic(topic)
    return (
        local is not None
        and not local.deleted
        and local.holds(number)
        and local.partition(number).state.leads
    )
