"""pnsq's partition endpoints, for partition-aware clients and pipelines (not in nsqd 1.3.0):

* ``GET /partitions?topic=`` — per partition its offsets and leader (``latest`` is the
  high-watermark: what every in-sync replica holds);
* ``GET /partition/read?topic=&partition=&offset=[&max=][&format=binary|ndjson]`` — the records
  from ``offset``: deterministic and repeatable, independent of channels, so a Spark task that
  is re-run reads the same rows. Encodings in :mod:`protocol.range_read`.

Errors are nsqd's ``{"message": "<TEXT>"}`` with 400 (bad argument) or 404 (no such topic or
partition): :data:`~nsqd.http.errors.RANGE_ERRORS`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from protocol.range_read import (
    BINARY_CONTENT_TYPE,
    NDJSON_CONTENT_TYPE,
    encode_binary,
    encode_ndjson,
    record_size,
)

from ..broker import Partition, Record, Topic, ext_header, read_records
from .args import topic_arg, uint_arg
from .base import HTTPError, Raw, Reply, Request, Route, routes_with
from .context import HTTPContext
from .errors import RANGE_ERRORS

DEFAULT_MAX_RECORDS: Final = 1000
#: ``max`` above this is clamped (the reply says where to continue).
MAX_RECORDS: Final = 10_000
#: A reply stops before the record that would take it past this many bytes (binary encoding
#: sizes, whatever the format, so both formats stop at the same record); it always carries at
#: least one record, so a reader makes progress even past a record larger than the cap.
MAX_BYTES: Final = 8 * 1024 * 1024
#: Records per read from the log before the byte cap is known to bind (then adapted).
_FIRST_CHUNK: Final = 64


class PartitionsAPI:
    """The handlers; :meth:`routes` gives the app's route table entries."""

    def __init__(self, context: HTTPContext) -> None:
        self.context = context

    def routes(self) -> dict[str, Route]:
        """``path -> Route``."""
        return routes_with(
            RANGE_ERRORS,
            {
                "/partitions": {"GET": self.partitions},
                "/partition/read": {"GET": self.read},
            },
        )

    def _topic(self, request: Request) -> Topic:
        name = topic_arg(request)
        topic = self.context.broker.find_topic(name)
        if topic is None or topic.deleted:
            raise HTTPError(404, "TOPIC_NOT_FOUND")
        return topic

    def _node(self) -> dict[str, object]:
        s = self.context.settings
        return {
            "broadcast_address": s.broadcast_address,
            "tcp_port": s.tcp_port,
            "http_port": s.http_port,
        }

    async def partitions(self, request: Request) -> Reply:
        """``{"topic", "partition_num", flags…, "node", "partitions": [...], "replicas"}``:
        the partitions this node leads (where clients read and write them), and the numbers of
        those it holds as a replica (pnsq lookupd's placement)."""
        topic = self._topic(request)
        node = self._node()
        return {
            "topic": topic.name,
            "partition_num": topic.partition_num,
            **_flags(topic),
            "node": node,
            "partitions": [
                {
                    "partition": p.number,
                    "earliest": p.log.start_offset,
                    "latest": p.state.high_watermark,  # what every in-sync replica holds
                    "leader": node,
                }
                for p in topic.led
            ],
            "replicas": [p.number for p in topic.partitions if not p.state.leads],
        }

    async def read(self, request: Request) -> Reply:
        """The records ``[offset, offset + n)``, ``n <= max``, within the byte cap."""
        await self.context.auth.require(request, request.arg("topic") or "", None)
        topic = self._topic(request)
        number = uint_arg(request, "partition")
        partition = topic.partition(number)
        offset = uint_arg(request, "offset")
        limit = uint_arg(request, "max", DEFAULT_MAX_RECORDS)
        if limit < 1:
            raise HTTPError(400, "INVALID_MAX")
        limit = min(limit, MAX_RECORDS)
        fmt = request.arg("format") or "binary"
        if fmt not in ("binary", "ndjson"):
            raise HTTPError(400, "INVALID_FORMAT")
        records = [_client_view(r) for r in await _read_capped(partition, offset, limit)]
        if fmt == "ndjson":
            return Raw(encode_ndjson(records), NDJSON_CONTENT_TYPE.encode())
        return Raw(encode_binary(number, offset, records), BINARY_CONTENT_TYPE.encode())


def _client_view(record: Record) -> Record:
    """``record`` as a reader sees it: its ext without the producer stamp (youzan's header)."""
    header = ext_header(record.ext)
    return record if header is record.ext else replace(record, ext=header)


def _flags(topic: Topic) -> dict[str, bool]:
    """The topic's flags (``ordered``: orderedmulti; ``ext``: extended) and ``ephemeral``."""
    return {
        "ordered": topic.ordered,
        "ext": topic.ext,
        "ephemeral": topic.ephemeral,
    }


async def _read_capped(partition: Partition, offset: int, limit: int) -> list[Record]:
    """Up to ``limit`` records from ``offset``, stopping at :data:`MAX_BYTES`.

    The broker reads a disk-backed log in a worker thread, in chunks sized from the records
    seen so far, so a range of large records is not read whole only to
    be cut by the byte cap.
    """
    plog = partition.log
    readable = partition.state.high_watermark  # never what an in-sync replica may lack
    if not plog.start_offset <= offset <= readable:
        raise HTTPError(400, "OFFSET_OUT_OF_RANGE")
    limit = min(limit, readable - offset)
    out: list[Record] = []
    size = 0
    chunk = _FIRST_CHUNK
    at = offset
    while len(out) < limit:
        want = min(chunk, limit - len(out))
        got = await read_records(partition, at, want)  # retention or a delete may refuse it
        for record in got:
            n = record_size(record)
            if out and size + n > MAX_BYTES:
                return out
            out.append(record)
            size += n
        if len(got) < want:
            return out
        at += len(got)
        average = max(size // len(out), 1)
        chunk = max(1, min(MAX_RECORDS, (MAX_BYTES - size) // average + 1))
    return out
