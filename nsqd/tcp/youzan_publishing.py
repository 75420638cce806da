"""youzan's traced and ext publishes on a connection's :class:`~nsqd.tcp.publishing.Publisher`.

PUB_TRACE / MPUB_TRACE answer a traced reply (the stored message's id, trace id, offset and
size). PUB_EXT / MPUB_EXT headers follow :mod:`protocol.ext`: stored with the message on ext
topics, dropped on others when they hold only reserved ``##`` keys; a PUB_EXT whose header names
a ``##trace_id`` gets the traced reply. Either may be numbered (pnsq's idempotent publishing):
a retry an earlier try stored is answered ``OK`` or ``DUPLICATE <n>``.
"""

from __future__ import annotations

from protocol import ErrorCode, frames
from protocol.ext import ext_not_supported, parse_json_header
from protocol.tracing import traced_response

from ..broker import Broker, NewRecord, ext_header
from ..core.errors import BadPartitionError
from .delivery import raw_size
from .errors import HANDLED_ERRORS, client_error_for
from .publishing import Publisher, acknowledged


async def publish_traced(
    publisher: Publisher,
    topic: str,
    messages: list[tuple[int, bytes]],
    partition: int | None,
    name: str,
    sequence: int | None = None,
) -> None:
    """PUB_TRACE (one message) or MPUB_TRACE: ``(trace id, body)`` each."""
    now = publisher.broker.clock.now_ns()
    entries = [NewRecord(timestamp_ns=now, body=b, trace_id=t) for t, b in messages]
    try:
        records, already = await publisher.publish_partitioned(
            topic, entries, partition, sequence, name
        )
    except HANDLED_ERRORS as exc:
        raise client_error_for(exc, name, ErrorCode.PUB_FAILED) from exc
    if not records:  # a retry of a publish retention has deleted since: nothing to name
        publisher.output.append(acknowledged(already))
        return
    first = records[0]
    trace = first.trace_id if name == "PUB_TRACE" else 0
    size = sum(raw_size(r, ext_header(r.ext)) for r in records)
    publisher.output.append(
        frames.encode_response(traced_response(first.internal_id, trace, first.offset, size))
    )


async def publish_ext(
    publisher: Publisher,
    topic: str,
    messages: list[tuple[bytes, bytes]],
    partition: int | None,
    name: str,
    sequence: int | None = None,
) -> None:
    """PUB_EXT (one message; a ``##trace_id`` asks for the traced reply) or MPUB_EXT
    (``OK``; an element with an empty header is a plain message)."""
    single = name == "PUB_EXT"
    code = ErrorCode.PUB_FAILED if single else ErrorCode.MPUB_FAILED
    try:
        ext_topic = _check_target(publisher.broker, topic, partition)
    except HANDLED_ERRORS as exc:
        raise client_error_for(exc, name, code) from exc
    now = publisher.broker.clock.now_ns()
    entries = []
    traced = False
    for header, body in messages:
        trace_id, ext = 0, b""
        if header or single:
            parsed = parse_json_header(header)
            if parsed.trace_id is not None:
                trace_id, traced = parsed.trace_id, single
            if ext_topic:
                ext = header
            elif not parsed.ignorable:
                raise ext_not_supported(topic)
        entries.append(NewRecord(timestamp_ns=now, body=body, trace_id=trace_id, ext=ext))
    try:
        records, already = await publisher.publish_partitioned(
            topic, entries, partition, sequence, name
        )
    except HANDLED_ERRORS as exc:
        raise client_error_for(exc, name, code) from exc
    if not traced or not records:
        publisher.output.append(acknowledged(already))
        return
    record = records[0]
    publisher.output.append(
        frames.encode_response(
            traced_response(
                record.internal_id,
                record.trace_id,
                record.offset,
                raw_size(record, ext_header(record.ext)),
            )
        )
    )


def _check_target(broker: Broker, topic: str, partition: int | None) -> bool:
    """Whether ``topic`` is ext; the topic and partition refusals come first, as youzan
    checks them before the header (a topic not created yet will be a plain one)."""
    existing = broker.find_topic(topic)
    if existing is None:
        return False
    if partition is None or partition == -1:
        if existing.ordered:
            raise BadPartitionError(topic)
    else:
        existing.partition(partition)
    return existing.ext
