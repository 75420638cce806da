"""pnsq's timestamp-to-offset endpoint, for the Spark source's ``startingTimestamp`` (not in
nsqd 1.3.0):

* ``GET /partition/offset?topic=&partition=&timestamp=`` — the first offset of the partition
  whose publish time is at or after ``timestamp`` (milliseconds since the Unix epoch, as Spark's
  Kafka source counts), ``latest`` when there is none.

A disk-backed log answers from its timestamp index in a worker thread
(:meth:`nsqd.storage.log.PartitionLog.offset_for_timestamp`); an ``#ephemeral`` topic's memory
log is scanned. Errors are nsqd's ``{"message": "<TEXT>"}``
(:data:`~nsqd.http.errors.RANGE_ERRORS`).
"""

from __future__ import annotations

from typing import Final

from ..broker import offset_at
from .args import topic_arg, uint_arg
from .base import HTTPError, Reply, Request, Route, routes_with
from .context import HTTPContext
from .errors import RANGE_ERRORS

_NS_PER_MS: Final = 1_000_000


class OffsetsAPI:
    """The handler; :meth:`routes` gives the app's route table entry."""

    def __init__(self, context: HTTPContext) -> None:
        self.context = context

    def routes(self) -> dict[str, Route]:
        """``path -> Route``."""
        return routes_with(RANGE_ERRORS, {"/partition/offset": {"GET": self.offset}})

    async def offset(self, request: Request) -> Reply:
        """``{"topic", "partition", "timestamp", "offset", "earliest", "latest"}``."""
        topic = self.context.broker.find_topic(topic_arg(request))
        if topic is None or topic.deleted:
            raise HTTPError(404, "TOPIC_NOT_FOUND")
        number = uint_arg(request, "partition")
        plog = topic.partition(number).log
        timestamp_ms = uint_arg(request, "timestamp")
        offset = await offset_at(topic.partition(number), timestamp_ms * _NS_PER_MS)
        earliest, latest = plog.start_offset, plog.end_offset
        return {
            "topic": topic.name,
            "partition": number,
            "timestamp": timestamp_ms,
            "offset": min(max(offset, earliest), latest),
            "earliest": earliest,
            "latest": latest,
        }
