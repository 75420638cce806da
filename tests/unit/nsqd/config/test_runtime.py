"""``/config/:opt`` values: nsqd's names and JSON types, and the two options PUT may change."""

from __future__ import annotations

import logging

import pytest

from nsqd.config.options import Options
from nsqd.config.runtime import (
    OPTIONS,
    InvalidOptionError,
    InvalidValueError,
    RuntimeConfig,
    statsd_host_key,
)


def config(**fields: object) -> RuntimeConfig:
    options = Options(broadcast_address="10.0.0.1", node_id=7, **fields)
    return RuntimeConfig(options, lambda: (4150, 4151))


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("id", 7),
        ("msg_timeout", 60_000_000_000),
        ("min_output_buffer_timeout", 25_000_000),
        ("max_msg_size", 1_048_576),
        ("deflate", True),
        ("log_level", 2),
        ("log_prefix", "[nsqd] "),
        ("tls_required", 0),
        ("tls_min_version", 0x0301),
        ("nsqlookupd_tcp_addresses", []),
        ("broadcast_tcp_port", 4150),
        ("broadcast_http_port", 4151),
        ("statsd_prefix", "nsq.10_0_0_1_4151."),
        ("retention", 604_800_000_000_000),
    ],
)
def test_values_have_nsqds_types(name: str, value: object) -> None:
    got = config().get(name)
    assert (got, type(got)) == (value, type(value))


def test_option_values_follow_the_options() -> None:
    c = config(
        lookupd_tcp_addresses=("a:4160",),
        e2e_processing_latency_percentiles=(1.0, 0.99),
        tls_required="tcp-https",
        tls_min_version="tls1.3",
        broadcast_tcp_port=9,
        statsd_prefix="p",
    )
    assert c.get("nsqlookupd_tcp_addresses") == ["a:4160"]
    assert c.get("e2e_processing_latency_percentiles") == [1, 0.99]  # Go writes 1.0 as 1
    assert (c.get("tls_required"), c.get("tls_min_version")) == (1, 0x0304)
    assert (c.get("broadcast_tcp_port"), c.get("statsd_prefix")) == (9, "p.")


def test_names_nsqd_does_not_have() -> None:
    for name in ("node_id", "lookupd_tcp_address", "verbose", "config", "version", "nope"):
        with pytest.raises(InvalidOptionError):
            config().get(name)
    assert "id" in OPTIONS


def test_put_lookupd_addresses() -> None:
    seen: list[list[str]] = []
    c = config()
    c.on_lookupd_change = seen.append
    assert c.put("nsqlookupd_tcp_addresses", b'["h:1", "h:2"]') == ["h:1", "h:2"]
    assert c.get("nsqlookupd_tcp_addresses") == ["h:1", "h:2"]
    assert c.put("nsqlookupd_tcp_addresses", b"null") is None  # Go's nil slice
    assert seen == [["h:1", "h:2"], []]
    for bad in (b'"x"', b"[1]", b"{}", b"[", b"\xff", b"[" * 100_000):  # (too deep)
        with pytest.raises(InvalidValueError):
            c.put("nsqlookupd_tcp_addresses", bad)


def test_put_log_level_applies_it() -> None:
    root = logging.getLogger()
    before = root.level
    try:
        assert config().put("log_level", b"WARN") == 3
        assert root.level == logging.WARNING
        with pytest.raises(InvalidValueError):
            config().put("log_level", b"debug\n")  # nsqd does not trim
    finally:
        root.setLevel(before)


def test_put_other_options_is_refused() -> None:
    with pytest.raises(InvalidOptionError):
        config().put("max_msg_size", b"5")


def test_statsd_host_key() -> None:
    assert statsd_host_key("10.0.0.1", 4151) == "10_0_0_1_4151"
    assert statsd_host_key("::1", 4151) == "[__1]_4151"
