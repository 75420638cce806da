"""IDENTIFY on a live connection: apply what was negotiated, reply, then upgrade the stream.

nsqd's sequence (``protocolV2.IDENTIFY``): the JSON reply goes out in plain form and is flushed;
then, if negotiated, a server-side TLS handshake (5 s deadline) and a framed ``OK`` sent over
TLS; then snappy or deflate (both directions at once) and an ``OK`` sent compressed. Bytes the
client pipelined after IDENTIFY are dropped, as nsqd builds a new reader (clients never
pipeline across an upgrade). A failed upgrade is fatal: ``E_IDENTIFY_FAILED IDENTIFY failed
<err>``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from protocol import ClientError, ErrorCode, frames
from protocol.identify import IdentifyResult, identify_response, parse_identify

from ..core.tags import ExtFilterError, parse_ext_filter
from .streams import DeflateStream, SnappyStream, peer_common_name

if TYPE_CHECKING:
    from .session import Session

log = logging.getLogger("nsqd.session")

UPGRADE_TIMEOUT = 5.0  # nsqd's TLS handshake deadline; also bounds each upgrade's OK


async def identify(session: Session, body: bytes) -> None:
    """Handle ``IDENTIFY``: validate, apply, reply and upgrade.

    Raises:
        ClientError: nsqd's E_BAD_BODY / E_IDENTIFY_FAILED texts.
    """
    result = parse_identify(body, session.settings.identify)
    session.client_id = result.client_id or session.client_id
    session.hostname = result.hostname or session.hostname
    session.user_agent = result.user_agent
    session.heartbeat_interval = result.heartbeat_interval_ms / 1000
    session.parser.heartbeats_disabled = result.heartbeat_interval_ms == 0
    session.msg_timeout_ns = result.msg_timeout_ms * 1_000_000
    session.output_buffer_timeout = result.output_buffer_timeout_ms / 1000
    session.sample_rate = result.sample_rate
    session.extend_support = result.extend_support
    session.desired_tag = result.desired_tag
    try:
        session.ext_filter = parse_ext_filter(result.ext_filter)
    except ExtFilterError as exc:  # youzan logs it and consumes unfiltered
        log.info("[%s] ignoring ext_filter: %s", session.remote_address, exc)
    session.restart_timers()
    if not result.feature_negotiation:
        session.output.write(frames.OK)
        return
    settings = session.settings
    reply = identify_response(
        result,
        version=settings.version,
        max_rdy_count=settings.max_rdy_count,
        max_msg_timeout_ms=settings.identify.max_msg_timeout_ms,
        max_deflate_level=settings.identify.max_deflate_level,
        auth_required=settings.auth is not None,
    )
    session.output.write(frames.encode_response(reply))
    if result.tls_v1 or result.snappy or result.deflate:
        await upgrade(session, result)


async def upgrade(session: Session, result: IdentifyResult) -> None:
    """Swap the session's stream for TLS and/or compression, each confirmed by an ``OK``."""
    output = session.output
    await output.drain()  # the JSON reply leaves in plain form first
    output.hold()  # heartbeats queued meanwhile go out after the OKs, through the new layers
    session.parser.take_buffered()
    stream = session.stream
    try:
        if result.tls_v1:
            context = session.settings.tls_context
            assert context is not None  # IdentifyLimits.tls_available
            log.info("[%s] upgrading connection to TLS", session.remote_address)
            tls_stream = trio.SSLStream(stream, context, server_side=True)
            with trio.fail_after(UPGRADE_TIMEOUT):
                await tls_stream.do_handshake()
            stream = tls_stream
            session.tls = True
            session.parser.tls_required = False
            if session.auth is not None:
                session.auth.tls = True
                session.auth.common_name = peer_common_name(tls_stream)
            await _send_ok(stream)
        if result.snappy:
            log.info("[%s] upgrading connection to snappy", session.remote_address)
            stream = SnappyStream(stream)
            session.snappy = True
            await _send_ok(stream)
        if result.deflate:
            log.info(
                "[%s] upgrading connection to deflate (level %d)",
                session.remote_address,
                result.deflate_level,
            )
            stream = DeflateStream(stream, result.deflate_level)
            session.deflate = True
            session.deflate_level = result.deflate_level
            await _send_ok(stream)
    except (trio.BrokenResourceError, trio.TooSlowError) as exc:
        reason = "i/o timeout" if isinstance(exc, trio.TooSlowError) else exc.__cause__ or exc
        raise ClientError(ErrorCode.IDENTIFY_FAILED, f"IDENTIFY failed {reason}") from exc
    finally:
        session.stream = stream
        output.release(stream)


async def _send_ok(stream: trio.abc.Stream) -> None:
    with trio.fail_after(UPGRADE_TIMEOUT):
        await stream.send_all(frames.OK)
