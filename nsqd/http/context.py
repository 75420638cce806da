"""What nsqd's HTTP endpoint groups share: the settings and the long-lived parts.

The groups (:mod:`~nsqd.http.topic_admin`, :mod:`~nsqd.http.consume`, ...) are given an
:class:`HTTPContext`, never the ASGI app that routes to them: they import nothing above this
module, so the app can import them all without a circle (as hypercorn's protocols receive a
``WorkerContext``, not the server). One context serves the plain HTTP and the HTTPS listener:
one consume lease table, one metrics registry (installed once on the broker), one set of
``PUT /config`` changes, one view of the bound ports.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import final

from ..auth import AuthClient
from ..broker import Broker
from ..broker.pull import Puller
from ..cluster.admin_spread import AdminSpread
from ..cluster.forwarding import Forwarder
from ..cluster.publishing import PublishPath
from ..config.options import Options
from ..config.runtime import RuntimeConfig
from ..observe.metrics import Metrics
from ..observe.stats import SessionLike
from .auth import HTTPAuth

__all__ = ["HTTPContext", "HTTPSettings"]


@dataclass(frozen=True, slots=True)
class HTTPSettings:
    """What the HTTP API needs of nsqd's options."""

    max_msg_size: int = 1_048_576
    max_body_size: int = 5_242_880
    max_req_timeout_ms: int = 3_600_000
    broadcast_address: str = ""
    tcp_port: int = 4150
    http_port: int = 4151
    max_heartbeat_interval_ns: int = 60_000_000_000
    max_output_buffer_size: int = 65_536
    max_output_buffer_timeout_ns: int = 30_000_000_000
    max_deflate_level: int = 6
    version: str = "1.3.0"
    msg_timeout_ms: int = 60_000
    max_msg_timeout_ms: int = 900_000
    max_rdy_count: int = 2500


@final
class HTTPContext:
    """The parts every endpoint group may use, built once per nsqd.

    ``sessions``: the live TCP sessions (``TCPServer.sessions``), for ``/stats`` and
    ``/metrics``; ``options``: for ``/config/:opt``; ``forwarder``: a stock publish or consume
    of a topic led elsewhere (pnsq lookupd). :attr:`settings` is replaced once the listeners
    are bound (the real HTTP port); every group reads it at request time. Building the context
    installs the metrics' latency histograms on the broker.
    """

    def __init__(
        self,
        broker: Broker,
        settings: HTTPSettings,
        *,
        sessions: Collection[SessionLike] = (),
        options: Options | None = None,
        on_lookupd_change: Callable[[list[str]], None] | None = None,
        forwarder: Forwarder | None = None,
        auth: AuthClient | None = None,
        cluster_credential: str = "",
    ) -> None:
        self.broker = broker
        #: ``X-Pnsq-Cluster-Auth``'s value with --cluster-secret-file ("": none): changing
        #: which lookupds this node registers with asks for it (:mod:`.topic_admin`)
        self.cluster_credential = cluster_credential
        self.settings = settings
        self.sessions = sessions
        self.forwarder = forwarder
        #: the publish path (forward or append, then wait for the in-sync replicas)
        self.publishing = PublishPath(broker, forwarder)
        #: admin calls carried to the topic's other partition leaders (pnsq lookupd)
        self.spread = AdminSpread(broker, forwarder)
        #: HTTP consume's leases (one table for the HTTP and HTTPS listeners)
        self.puller = Puller(broker)
        self.metrics = Metrics(broker, sessions, settings.version)
        #: --auth-http-address: the endpoints that hand out messages ask it (:mod:`.auth`)
        self.auth = HTTPAuth(auth)
        self.runtime = RuntimeConfig(
            options or Options(),
            lambda: (self.settings.tcp_port, self.settings.http_port),
            on_lookupd_change,
        )
