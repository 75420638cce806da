"""What a client connection reports of itself: a frozen record, as trio's ``statistics()``.

``/stats`` and ``/metrics`` sit below the TCP shell in nsqd's layers, so they cannot know its
session class; they ask any connection for :class:`ClientStatistics` through
:class:`HasStatistics` (the session builds the record: :mod:`nsqd.tcp.statistics`). The type
checker then sees every value the documents show, where reading the session's attributes by
name with defaults checked nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..core.tags import ExtFilter

__all__ = ["ClientStatistics", "HasStatistics"]


@dataclass(frozen=True, slots=True)
class ClientStatistics:
    """One client connection at a moment: nsqd 1.3.0's ClientStats, youzan's extra keys and
    pnsq's publish counts."""

    client_id: str
    hostname: str
    remote_address: str
    user_agent: str
    #: the protocol state's number as nsqd reports it (0 init, 3 subscribed, 4 closing)
    state: int
    ready_count: int
    in_flight_count: int
    message_count: int
    finish_count: int
    requeue_count: int
    connect_time: int  # unix seconds
    sample_rate: int
    deflate: bool
    snappy: bool
    #: TLS negotiated and the stream below any compression is TLS; then the details of the
    #: session (Go's names: ``TLS1.3``; ``tls_negotiated_protocol_is_mutual`` is always true)
    tls: bool
    tls_cipher_suite: str
    tls_version: str
    tls_negotiated_protocol: str
    tls_negotiated_protocol_is_mutual: bool
    #: AUTH gave this connection authorizations; the identity the auth server named
    authed: bool
    auth_identity: str
    auth_identity_url: str
    #: subscribed to a channel (a consumer), and that channel's topic has youzan's features
    subscribed: bool
    youzan_style: bool
    #: youzan's IDENTIFY ``desired_tag``, ``ext_filter`` and the message timeout in force
    desired_tag: str
    ext_filter: ExtFilter | None
    msg_timeout_ns: int
    #: messages this connection published, per topic, by topic name (empty: not a producer)
    pub_counts: tuple[tuple[str, int], ...]


@runtime_checkable
class HasStatistics(Protocol):
    """A connection ``/stats`` and ``/metrics`` can report on (a TCP session)."""

    def statistics(self) -> ClientStatistics:
        """The connection's record now."""
        ...
