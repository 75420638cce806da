"""IDENTIFY on a live connection: what was negotiated, the reply, then the stream upgrades.

:func:`negotiate` is pure: it reads the IDENTIFY body against the listener's limits and returns
a :class:`Negotiated` record, which the connection applies to itself (its identity, heartbeat
and message timeout, its consumer settings) before writing the reply it carries.

:func:`upgrade` follows nsqd's sequence (``protocolV2.IDENTIFY``): the JSON reply goes out in
plain form and is flushed; then, if negotiated, a server-side TLS handshake (5 s deadline) and
a framed ``OK`` sent over TLS; then snappy or deflate (both directions at once) and an ``OK``
sent compressed. Bytes the client pipelined after IDENTIFY are dropped, as nsqd builds a new
reader (clients never pipeline across an upgrade). A failed upgrade is fatal:
``E_IDENTIFY_FAILED IDENTIFY failed <err>``. Each layer is announced to the connection through
a callback as soon as it is in place, so the connection, not this module, keeps its state.
"""

from __future__ import annotations

import enum
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass

import trio

from protocol import ClientError, CommandParser, ErrorCode, frames
from protocol.identify import identify_response, parse_identify

from ..core.tags import ExtFilter, ExtFilterError, parse_ext_filter
from .output import OutputBuffer
from .settings import SessionSettings
from .streams import DeflateStream, SnappyStream

log = logging.getLogger("nsqd.session")

UPGRADE_TIMEOUT = 5.0  # nsqd's TLS handshake deadline; also bounds each upgrade's OK


class Layer(enum.Enum):
    """A stream upgrade IDENTIFY can negotiate, in the order they are put in place."""

    TLS = enum.auto()
    SNAPPY = enum.auto()
    DEFLATE = enum.auto()


@dataclass(frozen=True, slots=True)
class Negotiated:
    """What one IDENTIFY settled, in the units the connection keeps (seconds, ns)."""

    client_id: str  # "" when not sent: the connection keeps its own
    hostname: str  # likewise
    user_agent: str
    heartbeat_interval: float  # seconds; 0: no heartbeats (and no read deadline)
    msg_timeout_ns: int
    output_buffer_timeout: float  # seconds
    sample_rate: int
    extend_support: bool  # youzan: ext topics
    desired_tag: str  # youzan: tagged consumption
    #: youzan's ext filter; ``keep_ext_filter`` when the one sent was invalid (logged, ignored)
    ext_filter: ExtFilter | None
    keep_ext_filter: bool
    producer: int | None  # pnsq_producer's id: the connection may number its publishes
    reply: bytes  # the frame answering IDENTIFY: ``OK``, or the negotiated features as JSON
    tls: bool  # the upgrades to make once the reply is out
    snappy: bool
    deflate: bool
    deflate_level: int

    @property
    def upgrades(self) -> bool:
        """Whether the stream is to be upgraded (:func:`upgrade`)."""
        return self.tls or self.snappy or self.deflate


def negotiate(body: bytes, settings: SessionSettings, remote_address: str) -> Negotiated:
    """Read ``IDENTIFY``'s body: what the connection is to apply, and the reply to send.

    Raises:
        ClientError: nsqd's E_BAD_BODY texts.
    """
    result = parse_identify(body, settings.identify)
    ext_filter = None
    keep_ext_filter = False
    try:
        ext_filter = parse_ext_filter(result.ext_filter)
    except ExtFilterError as exc:  # youzan logs it and consumes unfiltered
        log.info("[%s] ignoring ext_filter: %s", remote_address, exc)
        keep_ext_filter = True
    features = result.feature_negotiation  # without it, no JSON reply and no upgrade
    reply = frames.OK
    if features:
        reply = frames.encode_response(
            identify_response(
                result,
                version=settings.version,
                max_rdy_count=settings.max_rdy_count,
                max_msg_timeout_ms=settings.identify.max_msg_timeout_ms,
                max_deflate_level=settings.identify.max_deflate_level,
                auth_required=settings.auth is not None,
            )
        )
    return Negotiated(
        client_id=result.client_id,
        hostname=result.hostname,
        user_agent=result.user_agent,
        heartbeat_interval=result.heartbeat_interval_ms / 1000,
        msg_timeout_ns=result.msg_timeout_ms * 1_000_000,
        output_buffer_timeout=result.output_buffer_timeout_ms / 1000,
        sample_rate=result.sample_rate,
        extend_support=result.extend_support,
        desired_tag=result.desired_tag,
        ext_filter=ext_filter,
        keep_ext_filter=keep_ext_filter,
        producer=result.producer,
        reply=reply,
        tls=features and result.tls_v1,
        snappy=features and result.snappy,
        deflate=features and result.deflate,
        deflate_level=result.deflate_level,
    )


async def upgrade(
    negotiated: Negotiated,
    stream: trio.abc.Stream,
    output: OutputBuffer,
    parser: CommandParser,
    tls_context: ssl.SSLContext | None,
    remote_address: str,
    installed: Callable[[Layer, trio.abc.Stream], None],
) -> None:
    """Wrap ``stream`` in TLS and/or compression, each confirmed by an ``OK`` sent through it.

    ``installed(layer, stream)`` is called as each layer is put in place (before its ``OK``):
    the connection reads and writes through ``stream`` from then on. ``output`` sends through
    the last one installed, from the end of the upgrade, even a failed one (its error).

    Raises:
        ClientError: E_IDENTIFY_FAILED (a handshake or an ``OK`` failed or timed out).
    """
    await output.drain()  # the JSON reply leaves in plain form first
    output.hold()  # heartbeats queued meanwhile go out after the OKs, through the new layers
    parser.take_buffered()
    try:
        if negotiated.tls:
            assert tls_context is not None  # IdentifyLimits.tls_available
            log.info("[%s] upgrading connection to TLS", remote_address)
            tls_stream = trio.SSLStream(stream, tls_context, server_side=True)
            with trio.fail_after(UPGRADE_TIMEOUT):
                await tls_stream.do_handshake()
            stream = tls_stream
            installed(Layer.TLS, stream)
            await _send_ok(stream)
        if negotiated.snappy:
            log.info("[%s] upgrading connection to snappy", remote_address)
            stream = SnappyStream(stream)
            installed(Layer.SNAPPY, stream)
            await _send_ok(stream)
        if negotiated.deflate:
            level = negotiated.deflate_level
            log.info("[%s] upgrading connection to deflate (level %d)", remote_address, level)
            stream = DeflateStream(stream, level)
            installed(Layer.DEFLATE, stream)
            await _send_ok(stream)
    except (trio.BrokenResourceError, trio.TooSlowError) as exc:
        reason = "i/o timeout" if isinstance(exc, trio.TooSlowError) else exc.__cause__ or exc
        raise ClientError(ErrorCode.IDENTIFY_FAILED, f"IDENTIFY failed {reason}") from exc
    finally:
        output.release(stream)


async def _send_ok(stream: trio.abc.Stream) -> None:
    with trio.fail_after(UPGRADE_TIMEOUT):
        await stream.send_all(frames.OK)
