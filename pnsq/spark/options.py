"""The data source's options, parsed from Spark's string map: plain Python, no pyspark.

Names follow Spark's Kafka source where the meaning is the same (``startingOffsets``,
``endingOffsets``, ``startingTimestamp``, ``endingTimestamp``, ``maxOffsetsPerTrigger``,
``minPartitions``, ``failOnDataLoss``); Spark hands them over lower-cased, and so does a plain
dict here after :func:`_lower`. Every value is a string. ``docs/spark.md`` has the table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from .planning import PlanningError

#: The rows the source produces (and the Arrow schema its readers build from it).
SCHEMA: Final = (
    "topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, id BINARY, "
    "trace_id BIGINT, body BINARY, ext STRING"
)
COLUMNS: Final = ("topic", "partition", "offset", "timestamp", "id", "trace_id", "body", "ext")

#: nsqd's cap on ``max`` for one ``/partition/read`` (it also stops at 8 MiB).
MAX_FETCH: Final = 10_000
DEFAULT_TIMEOUT_MS: Final = 10_000
#: How long discovery, planning, range reads and a write's lookup retry a failing node.
DEFAULT_RETRY_TIMEOUT_MS: Final = 60_000
DEFAULT_WRITE_BATCH: Final = 1_000
#: Under nsqd's default ``--max-body-size`` (5 MiB), as the blocking client's own default.
DEFAULT_WRITE_BATCH_BYTES: Final = 4 * 1024 * 1024


class OptionError(PlanningError):
    """An option is missing, unknown in value, or malformed."""


@dataclass(frozen=True, slots=True)
class Endpoints:
    """Where the topic's partitions are found: nsqd HTTP addresses, or nsqlookupd's."""

    nsqd: tuple[str, ...] = ()
    lookupd: tuple[str, ...] = ()
    timeout: float = DEFAULT_TIMEOUT_MS / 1000
    retry_timeout: float = DEFAULT_RETRY_TIMEOUT_MS / 1000
    #: ``authSecret``: the AUTH secret range reads send (nodes with ``--auth-http-address``)
    auth_secret: str = ""


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """A read (batch or streaming). ``starting_offsets`` None: the mode's default."""

    endpoints: Endpoints
    topic: str
    starting_offsets: str | None = None
    ending_offsets: str = "latest"
    starting_timestamp: int | None = None  # ms since the Unix epoch
    ending_timestamp: int | None = None
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    fetch_size: int = MAX_FETCH


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """A write (batch or streaming)."""

    endpoints: Endpoints
    topic: str
    batch_size: int = DEFAULT_WRITE_BATCH
    batch_bytes: int = DEFAULT_WRITE_BATCH_BYTES
    partitions: int | None = None  # of a topic the write creates (None: the daemon's default)
    replicator: int | None = None  # copies of each partition of a created topic (lookupd only)
    #: ``writeId``: names a batch write's producers the same in every run of the job (a job
    #: run again after a crash stores nothing twice); None: a fresh name per run
    write_id: str | None = None
    #: ``exactlyOnce`` (default true): numbered publishes, each row stored once
    exactly_once: bool = True


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _addresses(raw: str | None) -> tuple[str, ...]:
    """``"h1:4151, http://h2:4151/"`` → ``("h1:4151", "h2:4151")``."""
    out = []
    for part in (raw or "").split(","):
        address = part.strip().removeprefix("http://").rstrip("/")
        if address:
            if ":" not in address:
                raise OptionError(f"address {part.strip()!r}: expected HOST:PORT")
            out.append(address)
    return tuple(out)


def _int(opts: Mapping[str, str], name: str, *, minimum: int = 0) -> int | None:
    raw = opts.get(name.lower())
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw.strip())
    except ValueError as exc:
        raise OptionError(f"{name} must be an integer, not {raw!r}") from exc
    if value < minimum:
        raise OptionError(f"{name} must be >= {minimum}, not {value}")
    return value


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"{name} must be true or false, not {raw!r}")
    return value == "true"


def _endpoints(opts: Mapping[str, str]) -> Endpoints:
    nsqd, lookupd = _addresses(opts.get("nsqd")), _addresses(opts.get("lookupd"))
    if bool(nsqd) == bool(lookupd):
        raise OptionError("give exactly one of the options nsqd (HTTP addresses) or lookupd")
    timeout_ms = _int(opts, "requestTimeoutMs", minimum=1) or DEFAULT_TIMEOUT_MS
    retry_ms = _int(opts, "retryTimeoutMs")
    retry_ms = DEFAULT_RETRY_TIMEOUT_MS if retry_ms is None else retry_ms
    secret = opts.get("authsecret", "")
    return Endpoints(nsqd, lookupd, timeout_ms / 1000, retry_ms / 1000, secret)


def _topic(opts: Mapping[str, str]) -> str:
    topic = opts.get("topic", "").strip()
    if not topic:
        raise OptionError("the option topic is required")
    return topic


def read_options(options: Mapping[str, str]) -> ReadOptions:
    """Parse a read's options.

    Raises:
        OptionError: a missing or malformed option.
    """
    opts = _lower(options)
    fetch = _int(opts, "fetchSize", minimum=1) or MAX_FETCH
    return ReadOptions(
        endpoints=_endpoints(opts),
        topic=_topic(opts),
        starting_offsets=opts.get("startingoffsets"),
        ending_offsets=opts.get("endingoffsets", "latest"),
        starting_timestamp=_int(opts, "startingTimestamp"),
        ending_timestamp=_int(opts, "endingTimestamp"),
        max_offsets_per_trigger=_int(opts, "maxOffsetsPerTrigger", minimum=1),
        min_partitions=_int(opts, "minPartitions", minimum=1),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        fetch_size=min(fetch, MAX_FETCH),
    )


def write_options(options: Mapping[str, str]) -> WriteOptions:
    """Parse a write's options.

    Raises:
        OptionError: a missing or malformed option.
    """
    opts = _lower(options)
    endpoints = _endpoints(opts)
    replicator = _int(opts, "replicator", minimum=1)
    if replicator is not None and not endpoints.lookupd:
        raise OptionError("replicator needs the lookupd option (a single nsqd has no replicas)")
    return WriteOptions(
        endpoints=endpoints,
        topic=_topic(opts),
        batch_size=_int(opts, "batchSize", minimum=1) or DEFAULT_WRITE_BATCH,
        batch_bytes=_int(opts, "batchBytes", minimum=1024) or DEFAULT_WRITE_BATCH_BYTES,
        partitions=_int(opts, "partitions", minimum=1),
        replicator=replicator,
        write_id=opts.get("writeid") or None,
        exactly_once=_bool(opts, "exactlyOnce", True),
    )
