"""The producers' retry policy, one for the Trio :class:`~pnsq.client.producer.Producer` and
the blocking :class:`~pnsq.client.blocking.BlockingClient`: which failures a publish is retried
after, and how long it waits before each retry.

Retried, as youzan's clients do: ``E_FAILED_ON_NOT_LEADER``, ``E_FAILED_ON_NOT_WRITABLE``,
``E_TOPIC_NOT_EXIST`` (:data:`~pnsq.client.routing.RETRYABLE_CODES`), a lost connection, and a
topic whose partitions are not known yet (it may be being created). The wait before retry ``n``
is ``retry_backoff * 2**(n-1)`` seconds, at most :data:`MAX_RETRY_BACKOFF`. Each client sleeps
in its own way (Trio or the thread) and looks the partitions up again before retrying.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from .errors import ConnectionClosedError, NsqError, PartitionsUnknownError
from .routing import RETRYABLE_CODES

#: seconds: the longest wait before a retry (docs/client.md)
MAX_RETRY_BACKOFF: Final = 2.0

#: the failures a retry may help with (an :class:`NsqError` only for :data:`RETRYABLE_CODES`)
RETRIED: Final = (NsqError, ConnectionClosedError, OSError, PartitionsUnknownError)


def retryable(error: BaseException) -> bool:
    """Whether a publish that failed with ``error`` is tried again."""
    if isinstance(error, NsqError):
        return error.code in RETRYABLE_CODES
    return isinstance(error, RETRIED)


def retry_delay(retry_backoff: float, attempt: int) -> float:
    """Seconds to wait before try number ``attempt`` (1: the first retry)."""
    return min(retry_backoff * 2.0 ** (attempt - 1), MAX_RETRY_BACKOFF)


def attempt_delays(max_attempts: int, retry_backoff: float) -> Iterator[float]:
    """The wait before each of ``max_attempts`` tries: 0 before the first, then
    :func:`retry_delay`."""
    yield 0.0
    for attempt in range(1, max_attempts):
        yield retry_delay(retry_backoff, attempt)
