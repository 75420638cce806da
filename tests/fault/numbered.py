"""pnsq's client as the fault publishers use it: idempotent, one numbering for a publisher's
whole run, and the client's own retries; and the stored copies counted per kind of client.

A publisher opens its producer through the lookupd the cluster answers on now, and opens
another only when that lookupd changed (an HA lookupd killed: the client asks one lookupd) or
publishes keep failing. The new producer goes on with the numbering of the last one (the same
name in IDENTIFY, the next numbers): a new numbering under the same name would start at 0 again
and be told ``DUPLICATE`` for messages never stored (acknowledged, and lost).

Each publish is retried by the client (:data:`ATTEMPTS`, a silent connection given up after the
caller's ``reply_timeout``) with the partition and numbers of its first try, so a retry after a
lost reply, a kill -9, a pause or a failover is stored once. A publish that failed for good is
not sent again: the next publish carries a new body (a failed one may still have been stored,
unacknowledged; sending its body again as a new publish would store it twice, legitimately).

Stock clients (go-nsq, pynsq, the youzan-style producer) number nothing: a retry after a lost
reply may store a message twice (at-least-once). :func:`copies_by_kind` tells the two apart.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Final

from pnsq.client import Producer, open_producer
from pnsq.client.errors import (
    ConnectionClosedError,
    NsqError,
    NsqHTTPError,
    PartitionsUnknownError,
    UnexpectedResponseError,
)
from pnsq.client.numbering import Numbering
from tests.daemons import Daemon

#: tries of one publish (the first included); between them 0.02 s doubling, at most 2 s
ATTEMPTS: Final = 10
RETRY_BACKOFF: Final = 0.02
#: publishes failed for good in a row before a publisher opens its producer again
REOPEN_AFTER: Final = 3

#: how a publish fails for good, once the client's retries are spent (or at once, if the
#: error is not one a retry helps with)
PUBLISH_FAILED: Final = (
    NsqError,
    NsqHTTPError,
    PartitionsUnknownError,
    ConnectionClosedError,
    OSError,
    UnexpectedResponseError,
)


@asynccontextmanager
async def open_numbered(
    seed: Daemon,
    lookupd_http_address: str,
    numbering: Numbering | None,
    reply_timeout: float,
) -> AsyncIterator[Producer]:
    """pnsq's producer connected to ``seed``, routed through lookupd, numbering its publishes
    on from ``numbering`` (None: a fresh one; the producer's is ``producer.numbering``).

    Raises:
        OSError, ConnectionClosedError, NsqError: ``seed`` could not be reached.
    """
    async with open_producer(
        seed.tcp_address,
        lookupd_http_address=lookupd_http_address,
        max_attempts=ATTEMPTS,
        retry_backoff=RETRY_BACKOFF,
        route_ttl=0.2,
        reply_timeout=reply_timeout,
        producer_name=numbering.name if numbering is not None else None,
    ) as producer:
        if numbering is not None:
            producer.numbering = numbering  # the next numbers, not 0 again
        yield producer


def copies_by_kind(
    copies: Counter[bytes], pnsq: Iterable[str], stock: Iterable[str] | None = None
) -> tuple[int, int]:
    """Extra stored copies ``(of pnsq's client, of stock clients)``: a body is pnsq's when it
    starts with one of the ``pnsq`` prefixes, else a stock client's when it starts with one of
    the ``stock`` prefixes (None: any other body); other bodies are left out."""
    ours_prefixes = tuple(prefix.encode() for prefix in pnsq)
    stock_prefixes = None if stock is None else tuple(prefix.encode() for prefix in stock)
    ours = theirs = 0
    for body, count in copies.items():
        if count <= 1:
            continue
        if body.startswith(ours_prefixes):
            ours += count - 1
        elif stock_prefixes is None or body.startswith(stock_prefixes):
            theirs += count - 1
    return ours, theirs
