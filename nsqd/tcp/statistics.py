"""A V2 session's :class:`~nsqd.observe.records.ClientStatistics`: what ``/stats`` shows of a
client and ``/metrics`` counts, read from the session's own attributes (typed, no defaults)."""

from __future__ import annotations

from typing import Protocol

import trio

from protocol import CommandParser

from ..broker import Channel, youzan_style
from ..core.tags import ExtFilter
from ..observe.records import ClientStatistics
from .auth import SessionAuth
from .consuming import Consuming
from .publishing import Publisher
from .streams import CompressedStream

__all__ = ["ClientStatistics", "SessionFacts", "client_statistics"]


class SessionFacts(Protocol):
    """What a client's record is read from (:class:`~nsqd.tcp.session.Session`)."""

    @property
    def client_id(self) -> str: ...
    @property
    def hostname(self) -> str: ...
    @property
    def remote_address(self) -> str: ...
    @property
    def user_agent(self) -> str: ...
    @property
    def parser(self) -> CommandParser: ...
    @property
    def connect_time(self) -> int: ...
    @property
    def deflate(self) -> bool: ...
    @property
    def snappy(self) -> bool: ...
    @property
    def tls(self) -> bool: ...
    @property
    def stream(self) -> trio.abc.Stream: ...
    @property
    def auth(self) -> SessionAuth | None: ...
    @property
    def channel(self) -> Channel | None: ...
    @property
    def desired_tag(self) -> str: ...
    @property
    def ext_filter(self) -> ExtFilter | None: ...
    @property
    def publisher(self) -> Publisher: ...
    @property
    def consuming(self) -> Consuming: ...


def client_statistics(session: SessionFacts) -> ClientStatistics:
    """The record of ``session`` now."""
    auth = session.auth
    authed = auth is not None and auth.authorized
    auth_state = auth.state if auth is not None and authed else None
    channel = session.channel
    consuming = session.consuming
    tls = _tls_stream(session)
    cipher = tls.cipher() if tls is not None else None
    return ClientStatistics(
        client_id=session.client_id,
        hostname=session.hostname,
        remote_address=session.remote_address,
        user_agent=session.user_agent,
        state=session.parser.state.value,
        ready_count=consuming.ready_count,
        in_flight_count=consuming.in_flight,
        message_count=consuming.message_count,
        finish_count=consuming.finish_count,
        requeue_count=consuming.requeue_count,
        connect_time=session.connect_time,
        sample_rate=consuming.sample_rate,
        deflate=session.deflate,
        snappy=session.snappy,
        tls=tls is not None,
        tls_cipher_suite=cipher[0] if cipher else "",
        tls_version=(tls.version() or "").replace("TLSv", "TLS") if tls is not None else "",
        tls_negotiated_protocol=(tls.selected_alpn_protocol() or "") if tls is not None else "",
        tls_negotiated_protocol_is_mutual=tls is not None,  # Go: always true (deprecated)
        authed=authed,
        auth_identity=auth_state.identity if auth_state is not None else "",
        auth_identity_url=auth_state.identity_url if auth_state is not None else "",
        subscribed=channel is not None,
        youzan_style=channel is not None and youzan_style(channel.topic),
        desired_tag=session.desired_tag,
        ext_filter=session.ext_filter,
        msg_timeout_ns=consuming.msg_timeout_ns,
        pub_counts=tuple(sorted(session.publisher.pub_counts.items())),
    )


def _tls_stream(session: SessionFacts) -> trio.SSLStream[trio.abc.Stream] | None:
    """The TLS layer of the session's stream (under snappy or deflate), if it negotiated TLS."""
    if not session.tls:
        return None
    stream = session.stream
    while isinstance(stream, CompressedStream):
        stream = stream.inner
    return stream if isinstance(stream, trio.SSLStream) else None
