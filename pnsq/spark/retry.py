"""Riding out broker restarts and failovers: what counts as a passing failure, and retrying a
call with exponential backoff for a bounded time (the ``retryTimeoutMs`` option). Plain
Python, no pyspark.

A passing failure is a node that cannot be reached or closed the connection, a 5xx answer, a
partition without a leader for now (a failover in progress) and, where the caller says so, a
topic that no node reports (a restarted node not registered yet). Anything else (a 4xx answer,
a bad option, lost data) is raised at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final, TypeVar

from pnsq.client.errors import ConnectionClosedError, NsqHTTPError, UnexpectedResponseError

from .planning import PlanningError

log = logging.getLogger("pnsq.spark")

T = TypeVar("T")

FIRST_BACKOFF: Final = 0.1
MAX_BACKOFF: Final = 5.0


class NodeError(OSError):
    """One node failed: ``str()`` names it (``"nsqd 10.0.0.7:4151: [Errno 111] ..."``)."""

    def __init__(self, node: str, error: BaseException) -> None:
        super().__init__(f"{node}: {error}")
        self.node = node
        self.error = error


class TopicNotFoundError(PlanningError):
    """No node (or lookupd) knows the topic."""


class NoLeaderError(PlanningError):
    """Some partitions of the topic have no leader right now (a failover or a placement in
    progress)."""


class UnavailableError(RuntimeError):
    """A node kept failing for longer than ``retryTimeoutMs``; the message names it."""


def passing(error: BaseException, *, missing_topic: bool = False) -> bool:
    """Whether ``error`` may go away by itself (see the module doc)."""
    if isinstance(error, NodeError):
        return passing(error.error, missing_topic=missing_topic)
    if isinstance(error, NsqHTTPError):
        return error.status >= 500
    if isinstance(error, TopicNotFoundError):
        return missing_topic
    return isinstance(
        error, (OSError, ConnectionClosedError, UnexpectedResponseError, NoLeaderError)
    )


def retrying(what: str, call: Callable[[], T], timeout: float, *, missing_topic: bool = False) -> T:
    """``call()``, again after a passing failure (0.1 s, doubling, at most 5 s apart) until
    ``timeout`` seconds have gone by.

    Raises:
        UnavailableError: still failing after ``timeout`` (from the last error).
        Exception: the first failure that is not passing.
    """
    deadline = time.monotonic() + timeout
    delay = FIRST_BACKOFF
    while True:
        try:
            return call()
        except Exception as exc:
            if not passing(exc, missing_topic=missing_topic):
                raise
            left = deadline - time.monotonic()
            if left <= 0:
                raise UnavailableError(
                    f"{what}: {exc} (still failing after {timeout:g} s: retryTimeoutMs)"
                ) from exc
            log.warning("%s: %s; retrying in %.1f s", what, exc, min(delay, left))
            time.sleep(min(delay, left))
            delay = min(delay * 2, MAX_BACKOFF)
