"""The nsqd options every client connection of a TCP listener shares."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from protocol import ParserLimits
from protocol.identify import IdentifyLimits

from ..auth import AuthClient
from ..cluster.forwarding import Forwarder
from .reactor import DEFAULT_BUSY_POLL

RECEIVE_SIZE = 256 * 1024  # bytes a connection asks of its socket per read


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """The nsqd options a connection needs."""

    parser: ParserLimits = field(default_factory=ParserLimits)
    identify: IdentifyLimits = field(default_factory=IdentifyLimits)
    max_rdy_count: int = 2500
    #: message frames queued for the client before the pump waits for its socket to drain
    max_pending_output_bytes: int = 1024 * 1024
    #: seconds the publish reactor polls on after close turns (:mod:`.reactor`; 0: never)
    busy_poll: float = DEFAULT_BUSY_POLL
    version: str = "1.3.0"
    tls_context: ssl.SSLContext | None = None  # --tls-cert/--tls-key given
    #: the links this node dials to other pnsq nodes run over TLS with it (a certificate given)
    link_tls_context: ssl.SSLContext | None = None
    tls_required: bool = False  # --tls-required true or tcp-https: only IDENTIFY before TLS
    auth: AuthClient | None = None  # --auth-http-address given
    #: publishes for topics this node leads no partition of go to a leader (pnsq lookupd)
    forwarder: Forwarder | None = None
