"""What a Spark task does with its :class:`~pnsq.spark.planning.OffsetRange`: read the records
``[start, end)`` straight from the partition's leader with ``GET /partition/read``, and turn them
into the source's columns. Plain Python, no pyspark: executors call it from
:meth:`pnsq.spark.source.PnsqStreamReader.read`.

The same range gives the same records every time (nsqd's range read is deterministic), so a
re-run task or micro-batch reads the same rows. If the leader cannot be reached the task looks
the partition up again (a failover moves it, a restart brings it back) and goes on from where it
was, retrying with backoff for ``retryTimeoutMs`` before it fails naming the node.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Final

from pnsq.client.blocking import BlockingClient
from pnsq.client.errors import ConnectionClosedError, NsqHTTPError, UnexpectedResponseError
from protocol.range_read import RangeRecord

from .nodes import discover
from .options import ReadOptions
from .planning import OffsetRange, PlanningError
from .retry import FIRST_BACKOFF, MAX_BACKOFF, UnavailableError, passing

log = logging.getLogger("pnsq.spark")

_U64: Final = 1 << 64
_I64_MAX: Final = (1 << 63) - 1


class DataLossError(PlanningError):
    """Records of a planned range are gone (retention, or a truncated log after failover)."""


def read_range(r: OffsetRange, opts: ReadOptions) -> Iterator[list[RangeRecord]]:
    """The records of ``r`` in offset order, a fetch (at most ``opts.fetch_size``) at a time.

    With ``failOnDataLoss=false`` records deleted meanwhile are skipped (logged); otherwise
    :class:`DataLossError`. An unreachable leader (or a partition without one) is retried after
    a new lookup, with backoff, for ``retryTimeoutMs``; then :class:`UnavailableError`.
    """
    address = r.address or _leader(r, opts) or ""
    offset, deadline, delay = r.start, time.monotonic() + opts.endpoints.retry_timeout, 0.0
    nsq = _client(address, opts)
    try:
        while offset < r.end:
            want = min(opts.fetch_size, r.end - offset)
            try:
                if not address:
                    raise _NoLeader(f"{r.topic}[{r.partition}]: no node leads this partition now")
                batch = nsq.read_range(r.topic, r.partition, offset, want)
            except NsqHTTPError as exc:
                if exc.status == 400 and "OFFSET_OUT_OF_RANGE" in exc.message:
                    try:
                        moved = _skip_lost(nsq, r, offset, opts.fail_on_data_loss)
                    except NsqHTTPError as lookup_error:
                        if not passing(lookup_error) and lookup_error.status != 404:
                            raise
                        moved = offset
                    except (OSError, ConnectionClosedError, UnexpectedResponseError):
                        moved = offset
                    if moved != offset:
                        offset = moved
                        continue
                elif exc.status < 500 and exc.status != 404:
                    raise
                error: Exception = exc
            except (OSError, ConnectionClosedError, UnexpectedResponseError, _NoLeader) as exc:
                error = exc
            else:
                delay = 0.0
                records = [rec for rec in batch.records if rec.offset < r.end]
                if not records:
                    _lost_tail(r, offset, opts.fail_on_data_loss)
                    return
                yield records
                offset = records[-1].offset + 1
                continue
            where = f"nsqd {address}" if address else "no leader"
            if time.monotonic() >= deadline:
                raise UnavailableError(
                    f"reading {r.topic}[{r.partition}] at offset {offset} ({where}): {error} "
                    f"(still failing after {opts.endpoints.retry_timeout:g} s: retryTimeoutMs)"
                ) from error
            delay = min(delay * 2, MAX_BACKOFF) if delay else FIRST_BACKOFF
            log.warning(
                "reading %s[%d] at %d (%s): %s; retrying in %.1f s",
                r.topic,
                r.partition,
                offset,
                where,
                error,
                delay,
            )
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            address = _leader(r, opts) or address
            nsq.close()
            nsq = _client(address, opts)
    finally:
        nsq.close()


class _NoLeader(LookupError):
    """The partition has no leader to read from right now."""


def _client(address: str, opts: ReadOptions) -> BlockingClient:
    """A client of the node at ``address`` ("": none known) for range reads."""
    return BlockingClient(
        http_address=address or None,
        timeout=opts.endpoints.timeout,
        http_auth_secret=opts.endpoints.auth_secret,
    )


def _leader(r: OffsetRange, opts: ReadOptions) -> str | None:
    try:
        lead = discover(opts.endpoints, r.topic).leaders.get(r.partition)
    except (
        OSError,
        NsqHTTPError,
        PlanningError,
        UnexpectedResponseError,
        ConnectionClosedError,
    ) as exc:
        log.warning("looking up %s[%d] again failed: %s", r.topic, r.partition, exc)
        return None
    return lead.http_address if lead is not None else None


def _skip_lost(nsq: BlockingClient, r: OffsetRange, offset: int, fail: bool) -> int:
    """``offset`` is out of the partition's range: below ``earliest`` (deleted) → skip ahead
    or fail; past ``latest`` → the log was truncated (failover) → fail or stop."""
    info = nsq.partitions(r.topic).get(r.partition)
    earliest = info.earliest if info is not None else r.end
    latest = info.latest if info is not None else offset
    if offset < earliest:
        lost = f"{r.topic}[{r.partition}] offsets {offset}..{min(earliest, r.end) - 1} are gone"
        if fail:
            raise DataLossError(f"{lost} (retention); set failOnDataLoss=false to skip them")
        log.warning("%s (retention): skipped", lost)
        return min(earliest, r.end)
    if offset >= latest:
        _lost_tail(r, offset, fail)
        return r.end
    return offset  # a transient answer: read again


def _lost_tail(r: OffsetRange, offset: int, fail: bool) -> None:
    lost = f"{r.topic}[{r.partition}] ends at {offset}, before the planned end {r.end}"
    if fail:
        raise DataLossError(f"{lost} (truncated?); set failOnDataLoss=false to go on")
    log.warning("%s: records %d..%d skipped", lost, offset, r.end - 1)


def signed64(value: int) -> int:
    """A u64 (trace id) as Spark's signed ``long``, same bits."""
    return value - _U64 if value > _I64_MAX else value


def unsigned64(value: int) -> int:
    """The inverse of :func:`signed64` (a ``long`` column back to the u64 on the wire)."""
    return value & (_U64 - 1)


def columns(topic: str, partition: int, records: list[RangeRecord]) -> list[list[object]]:
    """The source's columns (:data:`pnsq.spark.options.COLUMNS`) for ``records``: timestamps in
    microseconds since the epoch (UTC), ``id`` the 16-byte message id, ``trace_id`` as a
    signed long, ``ext`` the ext header as text (None when empty)."""
    n = len(records)
    return [
        [topic] * n,
        [partition] * n,
        [rec.offset for rec in records],
        [rec.timestamp_ns // 1000 for rec in records],
        [rec.message_id for rec in records],
        [signed64(rec.trace_id) for rec in records],
        [rec.body for rec in records],
        [rec.ext.decode("utf-8", "replace") if rec.ext else None for rec in records],
    ]
