"""IDENTIFY: Go-style JSON decoding, nsqd's validation texts and the negotiation reply.

Validation texts and order are nsqd 1.3.0's (``clientV2.Identify``: heartbeat, output buffer
timeout then size, sample rate, msg timeout). Which bodies decode was checked with Go 1.26's
``encoding/json`` unmarshalling into nsqd's ``identifyDataV2``, and several against the real
nsqd 1.3.0 (null body, invalid UTF-8, BOM, NaN, ``deflate_level`` in the reply).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from protocol import ClientError, ErrorCode
from protocol.identify import (
    IdentifyLimits,
    IdentifyResult,
    identify_response,
    parse_identify,
)

LIMITS = IdentifyLimits()
MAX_INT64 = 2**63 - 1
DECODE = "E_BAD_BODY IDENTIFY failed to decode JSON body"


def ident(body: dict[str, Any] | bytes, limits: IdentifyLimits = LIMITS) -> IdentifyResult:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return parse_identify(raw, limits)


def ident_error(body: dict[str, Any] | bytes, limits: IdentifyLimits = LIMITS) -> ClientError:
    with pytest.raises(ClientError) as info:
        ident(body, limits)
    assert info.value.fatal
    return info.value


def invalid(what: str, value: int) -> str:
    return f"E_BAD_BODY IDENTIFY {what} ({value}) is invalid"


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("field", "value", "attr", "expected"),
    [
        # heartbeat_interval: -1 disables, 0 = default, 1000..max_heartbeat_interval
        pytest.param("heartbeat_interval", -1, "heartbeat_interval_ms", 0, id="hb--1"),
        pytest.param("heartbeat_interval", 0, "heartbeat_interval_ms", 30_000, id="hb-0"),
        pytest.param("heartbeat_interval", 1000, "heartbeat_interval_ms", 1000, id="hb-1000"),
        pytest.param("heartbeat_interval", 60_000, "heartbeat_interval_ms", 60_000, id="hb-max"),
        # output_buffer_size: -1 = unbuffered (size 1, and timeout 0), 0 = default, 64..max
        pytest.param("output_buffer_size", -1, "output_buffer_size", 1, id="obs--1"),
        pytest.param("output_buffer_size", 0, "output_buffer_size", 16_384, id="obs-0"),
        pytest.param("output_buffer_size", 64, "output_buffer_size", 64, id="obs-64"),
        pytest.param("output_buffer_size", 65_536, "output_buffer_size", 65_536, id="obs-max"),
        # output_buffer_timeout: -1 disables, 0 = default, min..max (25..30000 ms)
        pytest.param("output_buffer_timeout", -1, "output_buffer_timeout_ms", 0, id="obt--1"),
        pytest.param("output_buffer_timeout", 0, "output_buffer_timeout_ms", 250, id="obt-0"),
        pytest.param("output_buffer_timeout", 25, "output_buffer_timeout_ms", 25, id="obt-min"),
        pytest.param("output_buffer_timeout", 30_000, "output_buffer_timeout_ms", 30_000, id="max"),
        # sample_rate 0..99
        pytest.param("sample_rate", 0, "sample_rate", 0, id="sr-0"),
        pytest.param("sample_rate", 99, "sample_rate", 99, id="sr-99"),
        # msg_timeout: 0 = default, 1000..max_msg_timeout
        pytest.param("msg_timeout", 0, "msg_timeout_ms", 60_000, id="mt-0"),
        pytest.param("msg_timeout", 1000, "msg_timeout_ms", 1000, id="mt-1000"),
        pytest.param("msg_timeout", 900_000, "msg_timeout_ms", 900_000, id="mt-max"),
    ],
)
def test_valid_values(field: str, value: int, attr: str, expected: int) -> None:
    assert getattr(ident({field: value}), attr) == expected


@pytest.mark.parametrize(
    ("body", "text"),
    [
        pytest.param({"heartbeat_interval": -2}, invalid("heartbeat interval", -2), id="hb--2"),
        pytest.param({"heartbeat_interval": 1}, invalid("heartbeat interval", 1), id="hb-1"),
        pytest.param({"heartbeat_interval": 999}, invalid("heartbeat interval", 999), id="hb-999"),
        pytest.param(
            {"heartbeat_interval": 60_001}, invalid("heartbeat interval", 60_001), id="hb-max+1"
        ),
        pytest.param(
            {"heartbeat_interval": MAX_INT64},
            invalid("heartbeat interval", MAX_INT64),
            id="hb-int64-max",
        ),
        pytest.param({"output_buffer_size": -2}, invalid("output buffer size", -2), id="obs--2"),
        pytest.param({"output_buffer_size": 1}, invalid("output buffer size", 1), id="obs-1"),
        pytest.param({"output_buffer_size": 63}, invalid("output buffer size", 63), id="obs-63"),
        pytest.param(
            {"output_buffer_size": 65_537}, invalid("output buffer size", 65_537), id="obs-max+1"
        ),
        pytest.param(
            {"output_buffer_timeout": -2}, invalid("output buffer timeout", -2), id="obt--2"
        ),
        pytest.param(
            {"output_buffer_timeout": 1}, invalid("output buffer timeout", 1), id="obt-1"
        ),
        pytest.param(
            {"output_buffer_timeout": 24}, invalid("output buffer timeout", 24), id="obt-24"
        ),
        pytest.param(
            {"output_buffer_timeout": 30_001},
            invalid("output buffer timeout", 30_001),
            id="obt-max+1",
        ),
        pytest.param({"sample_rate": -1}, invalid("sample rate", -1), id="sr--1"),
        pytest.param({"sample_rate": 100}, invalid("sample rate", 100), id="sr-100"),
        pytest.param(
            {"sample_rate": 2**31 - 1}, invalid("sample rate", 2**31 - 1), id="sr-int32-max"
        ),
        pytest.param({"msg_timeout": -1}, invalid("msg timeout", -1), id="mt--1"),
        pytest.param({"msg_timeout": 999}, invalid("msg timeout", 999), id="mt-999"),
        pytest.param({"msg_timeout": 900_001}, invalid("msg timeout", 900_001), id="mt-max+1"),
        # nsqd's order: heartbeat, output buffer timeout, output buffer size, sample, msg timeout
        pytest.param(
            {"msg_timeout": 1, "sample_rate": 100, "output_buffer_size": 1,
             "output_buffer_timeout": 1, "heartbeat_interval": 1},
            invalid("heartbeat interval", 1),
            id="order-heartbeat-first",
        ),
        pytest.param(
            {"msg_timeout": 1, "sample_rate": 100, "output_buffer_size": 1,
             "output_buffer_timeout": 1},
            invalid("output buffer timeout", 1),
            id="order-timeout-before-size",
        ),
        pytest.param(
            {"msg_timeout": 1, "sample_rate": 100, "output_buffer_size": 1},
            invalid("output buffer size", 1),
            id="order-size-before-sample",
        ),
        pytest.param(
            {"msg_timeout": 1, "sample_rate": 100},
            invalid("sample rate", 100),
            id="order-sample-before-msg-timeout",
        ),
        # keys match case-insensitively, as Go's encoding/json does
        pytest.param({"HEARTBEAT_INTERVAL": 999}, invalid("heartbeat interval", 999), id="upper"),
        pytest.param({"Msg_Timeout": 5}, invalid("msg timeout", 5), id="mixed-case"),
    ],
)  # fmt: skip
def test_invalid_values(body: dict[str, Any], text: str) -> None:
    exc = ident_error(body)
    assert exc.text == text
    assert exc.code is ErrorCode.BAD_BODY


def test_unbuffered_output_also_disables_the_flush_timer() -> None:
    result = ident({"output_buffer_size": -1, "output_buffer_timeout": 100})
    assert (result.output_buffer_size, result.output_buffer_timeout_ms) == (1, 0)


def test_limits_come_from_options() -> None:
    limits = IdentifyLimits(
        max_heartbeat_interval_ms=5000,
        max_msg_timeout_ms=2000,
        max_output_buffer_size=128,
        min_output_buffer_timeout_ms=10,
        max_output_buffer_timeout_ms=20,
    )
    assert ident_error({"heartbeat_interval": 5001}, limits).text == invalid(
        "heartbeat interval", 5001
    )
    assert ident_error({"msg_timeout": 2001}, limits).text == invalid("msg timeout", 2001)
    assert ident_error({"output_buffer_size": 129}, limits).text == invalid(
        "output buffer size", 129
    )
    assert ident_error({"output_buffer_timeout": 9}, limits).text == invalid(
        "output buffer timeout", 9
    )
    assert ident({"output_buffer_timeout": 10}, limits).output_buffer_timeout_ms == 10


# --------------------------------------------------------------------------- JSON decoding


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"{", id="truncated"),
        pytest.param(b"[]", id="array"),
        pytest.param(b'"x"', id="string"),
        pytest.param(b"1", id="number"),
        pytest.param(b"true", id="bool"),
        pytest.param(b"{} x", id="trailing-garbage"),
        pytest.param(b'{"a":1}{}', id="two-values"),
        pytest.param(b'{"a":1,}', id="trailing-comma"),
        pytest.param(b"{'a':1}", id="single-quotes"),
        pytest.param(b'{"a":01}', id="leading-zero"),
        pytest.param(b'{"a":"\x01"}', id="control-char"),
        pytest.param(b"\x00{}", id="nul"),
        pytest.param(b"\xef\xbb\xbf{}", id="utf8-bom"),
        pytest.param("{}".encode("utf-16"), id="utf16"),
        pytest.param(b'{"x":NaN}', id="nan"),
        pytest.param(b'{"x":Infinity}', id="infinity"),
        pytest.param(b'{"x":-Infinity}', id="-infinity"),
        pytest.param(b'{"heartbeat_interval":"1000"}', id="int-as-string"),
        pytest.param(b'{"heartbeat_interval":1000.0}', id="int-as-float"),
        pytest.param(b'{"heartbeat_interval":1e3}', id="int-as-exponent"),
        pytest.param(b'{"heartbeat_interval":+1}', id="plus-sign"),
        pytest.param(b'{"heartbeat_interval":true}', id="int-as-bool"),
        pytest.param(b'{"heartbeat_interval":9223372036854775808}', id="int64-overflow"),
        pytest.param(b'{"sample_rate":2147483648}', id="int32-overflow"),
        pytest.param(b'{"sample_rate":-2147483649}', id="int32-underflow"),
        pytest.param(b'{"sample_rate":5.0}', id="int32-as-float"),
        pytest.param(b'{"feature_negotiation":1}', id="bool-as-int"),
        pytest.param(b'{"feature_negotiation":"true"}', id="bool-as-string"),
        pytest.param(b'{"client_id":5}', id="string-as-int"),
        pytest.param(b'{"deflate_level":"6"}', id="level-as-string"),
        pytest.param(b'{"x":' + b"[" * 20_000 + b"]" * 20_000 + b"}", id="deep-nesting"),
        pytest.param(b'{"heartbeat_interval":"x","heartbeat_interval":2000}', id="dup-bad-first"),
        pytest.param(b'{"heartbeat_interval":2000,"heartbeat_interval":"x"}', id="dup-bad-last"),
    ],
)
def test_undecodable_bodies(body: bytes) -> None:
    assert ident_error(body).text == DECODE


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"{}", id="empty-object"),
        pytest.param(b"null", id="null"),  # Go: null into a struct is a no-op
        pytest.param(b" \t\r\n{}\n", id="whitespace"),
        pytest.param(b'{"heartbeat_interval":-0}', id="minus-zero"),
        pytest.param(b'{"heartbeat_interval":null,"client_id":null,"tls_v1":null}', id="nulls"),
        pytest.param(b'{"unknown":[1,{"a":null}],"x":1.5,"y":"s"}', id="unknown-keys"),
        pytest.param(b'{"client_id":"\xff\xfe"}', id="invalid-utf8-in-string"),
        pytest.param(b'{"client_id":"a\\u0000b","hostname":"\\ud800"}', id="escapes"),
        pytest.param(b'{"\xff":1}', id="invalid-utf8-key"),
    ],
)
def test_decodable_bodies(body: bytes) -> None:
    result = ident(body)
    assert result.heartbeat_interval_ms == LIMITS.default_heartbeat_interval_ms


def test_invalid_utf8_becomes_replacement_character() -> None:
    assert ident(b'{"client_id":"a\xffb"}').client_id == "a\ufffdb"


@pytest.mark.parametrize(
    ("body", "heartbeat"),
    [
        pytest.param(b'{"HeartBeat_Interval":2000}', 2000, id="case-insensitive"),
        pytest.param(b'{"heartbeat_interval":2000,"heartbeat_interval":3000}', 3000, id="dup"),
        pytest.param(b'{"heartbeat_interval":2000,"HEARTBEAT_INTERVAL":3000}', 3000, id="dup-ci"),
        pytest.param(b'{"heartbeat_interval":2000,"heartbeat_interval":null}', 2000, id="null"),
        pytest.param(b'{"heartbeat_interval":2000,"HEARTBEAT_INTERVAL":null}', 2000, id="null-ci"),
    ],
)
def test_key_matching(body: bytes, heartbeat: int) -> None:
    """Go assigns each matching key in order; a later null leaves the field alone."""
    assert ident(body).heartbeat_interval_ms == heartbeat


def test_identity_fields() -> None:
    result = ident(
        {"client_id": "c", "hostname": "h", "user_agent": "pynsq/0.9.1", "unknown": True}
    )
    assert (result.client_id, result.hostname, result.user_agent) == ("c", "h", "pynsq/0.9.1")
    assert not result.feature_negotiation


# --------------------------------------------------------------------------- negotiation


def test_negotiation_only_offers_what_the_server_has() -> None:
    body = {"feature_negotiation": True, "tls_v1": True, "snappy": True, "deflate": True}
    result = ident(body)
    assert (result.tls_v1, result.snappy, result.deflate) == (False, False, False)
    # without feature_negotiation nothing is upgraded even when available
    everything = IdentifyLimits(tls_available=True, snappy_available=True, deflate_available=True)
    result = ident({"tls_v1": True, "deflate": True}, everything)
    assert (result.tls_v1, result.deflate) == (False, False)


def test_snappy_and_deflate_together_fail() -> None:
    both = IdentifyLimits(snappy_available=True, deflate_available=True)
    exc = ident_error({"feature_negotiation": True, "snappy": True, "deflate": True}, both)
    assert exc.text == "E_IDENTIFY_FAILED cannot enable both deflate and snappy compression"


@pytest.mark.parametrize(
    ("deflate", "level", "max_level", "expected"),
    [
        pytest.param(False, 3, 6, 6, id="not-negotiated-reports-6"),  # checked on nsqd 1.3.0
        pytest.param(False, 0, 4, 4, id="not-negotiated-clamped"),
        pytest.param(True, 0, 6, 6, id="default"),
        pytest.param(True, -5, 6, 6, id="negative-is-default"),
        pytest.param(True, 3, 6, 3, id="requested"),
        pytest.param(True, 9, 6, 6, id="clamped"),
    ],
)
def test_deflate_level(deflate: bool, level: int, max_level: int, expected: int) -> None:
    limits = IdentifyLimits(deflate_available=True, max_deflate_level=max_level)
    body = {"feature_negotiation": True, "deflate": deflate, "deflate_level": level}
    result = ident(body, limits)
    assert result.deflate is deflate
    assert result.deflate_level == expected


NSQD_REPLY_KEYS = [
    "max_rdy_count",
    "version",
    "max_msg_timeout",
    "msg_timeout",
    "tls_v1",
    "deflate",
    "deflate_level",
    "max_deflate_level",
    "snappy",
    "sample_rate",
    "auth_required",
    "output_buffer_size",
    "output_buffer_timeout",
]


def _reply(result: IdentifyResult, **overrides: Any) -> bytes:
    kwargs: dict[str, Any] = {
        "version": "1.3.0",
        "max_rdy_count": 2500,
        "max_msg_timeout_ms": 900_000,
        "max_deflate_level": 6,
        "auth_required": False,
    }
    kwargs.update(overrides)
    return identify_response(result, **kwargs)


def test_reply_is_byte_identical_to_nsqd_1_3_0() -> None:
    """What the real nsqd 1.3.0 (--max-rdy-count=50) sent for this IDENTIFY."""
    result = ident({"feature_negotiation": True, "deflate_level": 3})
    assert _reply(result, max_rdy_count=50) == (
        b'{"max_rdy_count":50,"version":"1.3.0","max_msg_timeout":900000,"msg_timeout":60000,'
        b'"tls_v1":false,"deflate":false,"deflate_level":6,"max_deflate_level":6,'
        b'"snappy":false,"sample_rate":0,"auth_required":false,"output_buffer_size":16384,'
        b'"output_buffer_timeout":250}'
    )


@settings(max_examples=100, deadline=None)
@given(
    heartbeat=st.sampled_from([-1, 0]) | st.integers(1000, 60_000),
    size=st.sampled_from([-1, 0]) | st.integers(64, 65_536),
    timeout=st.sampled_from([-1, 0]) | st.integers(25, 30_000),
    sample=st.integers(0, 99),
    msg_timeout=st.just(0) | st.integers(1000, 900_000),
    auth=st.booleans(),
    rdy=st.integers(1, 10_000),
)
def test_reply_keys_and_values(
    heartbeat: int, size: int, timeout: int, sample: int, msg_timeout: int, auth: bool, rdy: int
) -> None:
    body = {
        "feature_negotiation": True,
        "heartbeat_interval": heartbeat,
        "output_buffer_size": size,
        "output_buffer_timeout": timeout,
        "sample_rate": sample,
        "msg_timeout": msg_timeout,
    }
    raw = _reply(ident(body), auth_required=auth, max_rdy_count=rdy)
    expected = {
        "max_rdy_count": rdy,
        "version": "1.3.0",
        "max_msg_timeout": 900_000,
        "msg_timeout": msg_timeout or 60_000,
        "tls_v1": False,
        "deflate": False,
        "deflate_level": 6,
        "max_deflate_level": 6,
        "snappy": False,
        "sample_rate": sample,
        "auth_required": auth,
        "output_buffer_size": {-1: 1, 0: 16_384}.get(size, size),
        "output_buffer_timeout": 0 if size == -1 else {-1: 0, 0: 250}.get(timeout, timeout),
    }
    assert list(expected) == NSQD_REPLY_KEYS
    # compact and in nsqd's key order, as Go's json.Marshal writes the struct
    assert raw == json.dumps(expected, separators=(",", ":")).encode()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200) | st.from_regex(rb"\A[\[\]{}\x22:,0-9a-z_ .-]{0,40}\Z"))
def test_arbitrary_bodies_never_crash(body: bytes) -> None:
    failure: ClientError | None = None
    try:
        parse_identify(body, LIMITS)
    except ClientError as exc:
        failure = exc
    if failure is not None:
        assert failure.fatal
        assert failure.code in (ErrorCode.BAD_BODY, ErrorCode.IDENTIFY_FAILED)
