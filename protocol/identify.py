"""IDENTIFY: decode the client's JSON like Go's encoding/json, validate it like nsqd, and build
the feature-negotiation reply with nsqd's keys in nsqd's order.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Final

from .errors import ClientError, ErrorCode

_INT32: Final = (-(2**31), 2**31 - 1)
_INT64: Final = (-(2**63), 2**63 - 1)

# Go struct fields nsqd decodes: json key -> (kind, int range). Keys match case-insensitively.
_FIELDS: Final[dict[str, tuple[str, tuple[int, int]]]] = {
    "client_id": ("str", _INT64),
    "short_id": ("str", _INT64),
    "long_id": ("str", _INT64),
    "hostname": ("str", _INT64),
    "user_agent": ("str", _INT64),
    "desired_tag": ("str", _INT64),
    "feature_negotiation": ("bool", _INT64),
    "tls_v1": ("bool", _INT64),
    "snappy": ("bool", _INT64),
    "deflate": ("bool", _INT64),
    "extend_support": ("bool", _INT64),
    "heartbeat_interval": ("int", _INT64),
    "output_buffer_size": ("int", _INT64),
    "output_buffer_timeout": ("int", _INT64),
    "deflate_level": ("int", _INT64),
    "msg_timeout": ("int", _INT64),
    "sample_rate": ("int", _INT32),
    "ext_filter": ("object", _INT64),  # youzan: validated by the server when it subscribes
    "pnsq_producer": ("str", _INT64),  # pnsq: a numbering producer's name (idempotent publish)
}
#: bytes of UTF-8 a producer's name may have
MAX_PRODUCER_NAME = 128


@dataclass(frozen=True, slots=True)
class IdentifyLimits:
    """The server side of the negotiation: nsqd's options and what this server can upgrade to."""

    max_heartbeat_interval_ms: int = 60_000
    default_heartbeat_interval_ms: int = 30_000
    max_output_buffer_size: int = 65_536
    default_output_buffer_size: int = 16_384
    min_output_buffer_timeout_ms: int = 25
    max_output_buffer_timeout_ms: int = 30_000
    default_output_buffer_timeout_ms: int = 250
    max_msg_timeout_ms: int = 900_000
    default_msg_timeout_ms: int = 60_000
    max_deflate_level: int = 6
    tls_available: bool = False
    snappy_available: bool = False
    deflate_available: bool = False


@dataclass(frozen=True, slots=True)
class IdentifyResult:
    """What was negotiated. Intervals in ms; 0 means disabled (heartbeat, flush timer)."""

    client_id: str
    hostname: str
    user_agent: str
    feature_negotiation: bool
    heartbeat_interval_ms: int
    output_buffer_size: int
    output_buffer_timeout_ms: int
    sample_rate: int
    msg_timeout_ms: int
    tls_v1: bool
    snappy: bool
    deflate: bool
    deflate_level: int
    extend_support: bool
    desired_tag: str
    #: youzan's server-side filter on ext headers, as sent (``{}`` when absent)
    ext_filter: dict[str, object] = field(default_factory=dict)
    #: pnsq: the producer's 64-bit id (:func:`producer_id` of the name it gave), None when it
    #: gave none: its publishes may then carry no number
    producer: int | None = None


def _plain(value: object) -> dict[str, object]:
    """A decoded JSON object (its pairs, the last duplicate winning) as nested dicts."""
    if not isinstance(value, _Pairs):
        return {}
    return {k: _plain(v) if isinstance(v, _Pairs) else _lists(v) for k, v in value}


def _lists(value: object) -> object:
    if isinstance(value, list):
        return [_plain(v) if isinstance(v, _Pairs) else _lists(v) for v in value]
    return value


def _bad(text: str) -> ClientError:
    return ClientError(ErrorCode.BAD_BODY, f"IDENTIFY {text}")


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")  # Go has no NaN / Infinity


class _Pairs(list[tuple[str, object]]):
    """A JSON object as its (key, value) pairs: Go assigns every duplicate key in turn."""


def _decode(body: bytes) -> dict[str, object]:
    """Go's json.Unmarshal into nsqd's struct: wrong types fail, unknown keys are ignored."""
    try:
        # Go: invalid UTF-8 in strings becomes U+FFFD, no BOM / UTF-16 sniffing, no NaN;
        # too deep nesting is a decode error, never a crash.
        raw = json.loads(
            body.decode("utf-8", "replace"), parse_constant=_no_constant, object_pairs_hook=_Pairs
        )
    except (ValueError, RecursionError) as exc:
        raise _bad("failed to decode JSON body") from exc
    if raw is None:
        raw = _Pairs()  # Go: null into a struct is a no-op
    if not isinstance(raw, _Pairs):
        raise _bad("failed to decode JSON body")
    values: dict[str, object] = {}
    for key, value in raw:
        field = key.lower()
        spec = _FIELDS.get(field)
        if spec is None or value is None:
            continue
        kind, (low, high) = spec
        ok = (
            isinstance(value, str)
            if kind == "str"
            else isinstance(value, _Pairs)
            if kind == "object"
            else isinstance(value, bool)
            if kind == "bool"
            else isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
        )
        if not ok:
            raise _bad("failed to decode JSON body")
        values[field] = value
    return values


def parse_identify(body: bytes, limits: IdentifyLimits) -> IdentifyResult:
    """Validate an IDENTIFY body in nsqd's order: heartbeat, buffer, sample rate, msg timeout.

    Raises:
        ClientError: fatal E_BAD_BODY / E_IDENTIFY_FAILED with nsqd's text.
    """
    v = _decode(body)

    def get_int(key: str) -> int:
        value = v.get(key, 0)
        assert isinstance(value, int)
        return value

    def get_str(key: str) -> str:
        value = v.get(key, "")
        assert isinstance(value, str)
        return value

    heartbeat = get_int("heartbeat_interval")
    if heartbeat == -1:
        heartbeat_ms = 0
    elif heartbeat == 0:
        heartbeat_ms = limits.default_heartbeat_interval_ms
    elif 1000 <= heartbeat <= limits.max_heartbeat_interval_ms:
        heartbeat_ms = heartbeat
    else:
        raise _bad(f"heartbeat interval ({heartbeat}) is invalid")

    size, timeout = get_int("output_buffer_size"), get_int("output_buffer_timeout")
    buffer_timeout = limits.default_output_buffer_timeout_ms
    if timeout == -1:
        buffer_timeout = 0
    elif timeout != 0:
        if (
            not limits.min_output_buffer_timeout_ms
            <= timeout
            <= limits.max_output_buffer_timeout_ms
        ):
            raise _bad(f"output buffer timeout ({timeout}) is invalid")
        buffer_timeout = timeout
    buffer_size = limits.default_output_buffer_size
    if size == -1:
        buffer_size, buffer_timeout = 1, 0
    elif size != 0:
        if not 64 <= size <= limits.max_output_buffer_size:
            raise _bad(f"output buffer size ({size}) is invalid")
        buffer_size = size

    sample_rate = get_int("sample_rate")
    if not 0 <= sample_rate <= 99:
        raise _bad(f"sample rate ({sample_rate}) is invalid")

    msg_timeout = get_int("msg_timeout")
    if msg_timeout == 0:
        msg_timeout = limits.default_msg_timeout_ms
    elif not 1000 <= msg_timeout <= limits.max_msg_timeout_ms:
        raise _bad(f"msg timeout ({msg_timeout}) is invalid")

    negotiate = bool(v.get("feature_negotiation", False))
    tls = negotiate and limits.tls_available and bool(v.get("tls_v1", False))
    snappy = negotiate and limits.snappy_available and bool(v.get("snappy", False))
    deflate = negotiate and limits.deflate_available and bool(v.get("deflate", False))
    if snappy and deflate:
        raise ClientError(
            ErrorCode.IDENTIFY_FAILED, "cannot enable both deflate and snappy compression"
        )
    level = get_int("deflate_level")
    deflate_level = min(level if deflate and level > 0 else 6, limits.max_deflate_level)
    name = get_str("pnsq_producer")
    if "pnsq_producer" in v and not 0 < len(name.encode()) <= MAX_PRODUCER_NAME:
        raise _bad(f"pnsq_producer must have 1 to {MAX_PRODUCER_NAME} bytes")

    return IdentifyResult(
        client_id=get_str("client_id") or get_str("short_id"),
        hostname=get_str("hostname") or get_str("long_id"),
        user_agent=get_str("user_agent"),
        feature_negotiation=negotiate,
        heartbeat_interval_ms=heartbeat_ms,
        output_buffer_size=buffer_size,
        output_buffer_timeout_ms=buffer_timeout,
        sample_rate=sample_rate,
        msg_timeout_ms=msg_timeout,
        tls_v1=tls,
        snappy=snappy,
        deflate=deflate,
        deflate_level=deflate_level,
        extend_support=bool(v.get("extend_support", False)),
        desired_tag=get_str("desired_tag"),
        ext_filter=_plain(v.get("ext_filter")),
        producer=producer_id(name) if name else None,
    )


def producer_id(name: str) -> int:
    """The 64-bit id of a producer named ``name``: the first 8 bytes (big-endian) of its
    BLAKE2b digest (two names sharing one has a chance of 2**-64)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big")


def identify_response(
    result: IdentifyResult,
    *,
    version: str,
    max_rdy_count: int,
    max_msg_timeout_ms: int,
    max_deflate_level: int,
    auth_required: bool,
) -> bytes:
    """The JSON reply to a feature-negotiating IDENTIFY, keys in nsqd's order."""
    reply = {
        "max_rdy_count": max_rdy_count,
        "version": version,
        "max_msg_timeout": max_msg_timeout_ms,
        "msg_timeout": result.msg_timeout_ms,
        "tls_v1": result.tls_v1,
        "deflate": result.deflate,
        "deflate_level": result.deflate_level,
        "max_deflate_level": max_deflate_level,
        "snappy": result.snappy,
        "sample_rate": result.sample_rate,
        "auth_required": auth_required,
        "output_buffer_size": result.output_buffer_size,
        "output_buffer_timeout": result.output_buffer_timeout_ms,
    }
    if result.desired_tag:  # youzan: omitted when empty
        reply["desired_tag"] = result.desired_tag
    if result.producer is not None:  # pnsq: only to a client that named itself
        reply["pnsq_producer"] = f"{result.producer:016x}"
    return json.dumps(reply, separators=(",", ":")).encode()
