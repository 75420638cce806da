"""Tests for nsqd.config.options: nsqd 1.3.0's flags, defaults and start-up checks.

``NSQD_1_3_0_USAGE`` is the output of ``nsqd -h`` from a real nsqd v1.3.0 built from the module
cache (go1.26.8), with the host-dependent defaults replaced by placeholders. Error texts marked
"nsqd" were also checked against that binary.
"""

from __future__ import annotations

import ast
import dataclasses
import socket
from pathlib import Path

import pytest

from nsqd.config.flags import nsqd_flagset, options_from_flags, parse_nsqd_args
from nsqd.config.options import (
    LOG_LEVELS,
    Options,
    OptionsError,
    attribute_name,
    default_node_id,
    validate_options,
)
from pnsq._goflag.addresses import address_kind, parse_host_port, split_host_port
from pnsq._goflag.flags import FlagError, HelpRequested
from pnsq._goflag.syntax import go_quote

NSQD_1_3_0_USAGE = """\
Usage of nsqd:
  -auth-http-address value
    \t<addr>:<port> or a full url to query auth server (may be given multiple times)
  -broadcast-address string
    \taddress that will be registered with lookupd (defaults to the OS hostname) (default <HOSTNAME>)
  -broadcast-http-port int
    \tHTTP port that will be registered with lookupd (defaults to the HTTP port that this nsqd is listening on)
  -broadcast-tcp-port int
    \tTCP port that will be registered with lookupd (defaults to the TCP port that this nsqd is listening on)
  -config string
    \tpath to config file
  -data-path string
    \tpath to store disk-backed messages
  -deflate
    \tenable deflate feature negotiation (client compression) (default true)
  -e2e-processing-latency-percentile value
    \tmessage processing time percentiles (as float (0, 1.0]) to track (can be specified multiple times or comma separated '1.0,0.99,0.95', default none)
  -e2e-processing-latency-window-time duration
    \tcalculate end to end latency quantiles for this duration of time (ie: 60s would only show quantile calculations from the past 60 seconds) (default 10m0s)
  -http-address string
    \taddress to listen on for HTTP clients (<addr>:<port> for TCP/IP or <path> for unix socket) (default "0.0.0.0:4151")
  -http-client-connect-timeout duration
    \ttimeout for HTTP connect (default 2s)
  -http-client-request-timeout duration
    \ttimeout for HTTP request (default 5s)
  -https-address string
    \t<addr>:<port> to listen on for HTTPS clients (default "0.0.0.0:4152")
  -log-level value
    \tset log verbosity: debug, info, warn, error, or fatal (default INFO)
  -log-prefix string
    \tlog message prefix (default "[nsqd] ")
  -lookupd-tcp-address value
    \tlookupd TCP address (may be given multiple times)
  -max-body-size int
    \tmaximum size of a single command body (default 5242880)
  -max-bytes-per-file int
    \tnumber of bytes per diskqueue file before rolling (default 104857600)
  -max-channel-consumers int
    \tmaximum channel consumer connection count per nsqd instance (default 0, i.e., unlimited)
  -max-deflate-level int
    \tmax deflate compression level a client can negotiate (> values == > nsqd CPU usage) (default 6)
  -max-heartbeat-interval duration
    \tmaximum client configurable duration of time between client heartbeats (default 1m0s)
  -max-msg-size int
    \tmaximum size of a single message in bytes (default 1048576)
  -max-msg-timeout duration
    \tmaximum duration before a message will timeout (default 15m0s)
  -max-output-buffer-size int
    \tmaximum client configurable size (in bytes) for a client output buffer (default 65536)
  -max-output-buffer-timeout duration
    \tmaximum client configurable duration of time between flushing to a client (default 30s)
  -max-rdy-count int
    \tmaximum RDY count for a client (default 2500)
  -max-req-timeout duration
    \tmaximum requeuing timeout for a message (default 1h0m0s)
  -mem-queue-size int
    \tnumber of messages to keep in memory (per topic/channel) (default 10000)
  -min-output-buffer-timeout duration
    \tminimum client configurable duration of time between flushing to a client (default 25ms)
  -msg-timeout duration
    \tdefault duration to wait before auto-requeing a message (default 1m0s)
  -node-id int
    \tunique part for message IDs, (int) in range [0,1024) (default is hash of hostname) (default <NODE_ID>)
  -output-buffer-timeout duration
    \tdefault duration of time between flushing data to clients (default 250ms)
  -queue-scan-selection-count int
    \tnumber of channels to check per cycle (every 100ms) for in-flight and deferred timeouts (default 20)
  -queue-scan-worker-pool-max int
    \tmax concurrency for checking in-flight and deferred message timeouts (default 4)
  -snappy
    \tenable snappy feature negotiation (client compression) (default true)
  -statsd-address string
    \tUDP <addr>:<port> of a statsd daemon for pushing stats
  -statsd-exclude-ephemeral
    \tSkip ephemeral topics and channels when sending stats to statsd
  -statsd-interval duration
    \tduration between pushing to statsd (default 1m0s)
  -statsd-mem-stats
    \ttoggle sending memory and GC stats to statsd (default true)
  -statsd-prefix string
    \tprefix used for keys sent to statsd (%s for host replacement) (default "nsq.%s")
  -statsd-udp-packet-size int
    \tthe size in bytes of statsd UDP packets (default 508)
  -sync-every int
    \tnumber of messages per diskqueue fsync (default 2500)
  -sync-timeout duration
    \tduration of time per diskqueue fsync (default 2s)
  -tcp-address string
    \taddress to listen on for TCP clients (<addr>:<port> for TCP/IP or <path> for unix socket) (default "0.0.0.0:4150")
  -tls-cert string
    \tpath to certificate file
  -tls-client-auth-policy string
    \tclient certificate auth policy ('require' or 'require-verify')
  -tls-key string
    \tpath to key file
  -tls-min-version value
    \tminimum SSL/TLS version acceptable ('ssl3.0', 'tls1.0', 'tls1.1', 'tls1.2' or 'tls1.3') (default tls1.0)
  -tls-required
    \trequire TLS for client connections (true, false, tcp-https)
  -tls-root-ca-file string
    \tpath to certificate authority file
  -verbose
    \t[deprecated] has no effect, use --log-level
  -version
    \tprint version string
  -worker-id
    \t[deprecated] use --node-id
"""  # noqa: E501

PNSQ_EXTRA_FLAGS = {
    "auth-http-request-method",  # nsqd master, not 1.3.0
    "default-partitions",
    "default-replicator",
    "replica-lag-max",
    "replica-move-rate",
    "producer-state-ttl",
    "max-producers",
    "max-disk-usage-percent",
    "max-pending-output-bytes",
    "read-cache-bytes",
    "max-segment-fds",
    "retention",
    "busy-poll",
    "cluster-secret-file",
    "rack",
}


def _usage_blocks(usage: str) -> dict[str, str]:
    blocks: dict[str, str] = {}
    for block in usage.split("\n  -")[1:]:
        blocks[block.split()[0]] = block
    return blocks


def test_usage_is_nsqd_1_3_0_plus_pnsq_flags() -> None:
    expected = NSQD_1_3_0_USAGE.replace("<HOSTNAME>", go_quote(socket.gethostname()))
    expected = expected.replace("<NODE_ID>", str(default_node_id()))
    usage = nsqd_flagset().usage()
    blocks = _usage_blocks(usage)
    assert set(blocks) - set(_usage_blocks(expected)) == PNSQ_EXTRA_FLAGS
    stock = "".join(
        "\n  -" + block for name, block in blocks.items() if name not in PNSQ_EXTRA_FLAGS
    )
    assert usage.split("\n  -")[0] + stock == expected


def test_pnsq_flags_usage() -> None:
    blocks = _usage_blocks(nsqd_flagset().usage())
    assert blocks["retention"].startswith("retention duration\n")
    assert blocks["retention"].endswith("(default 168h0m0s)")
    assert blocks["default-partitions"].endswith("(default 1)")
    assert blocks["max-disk-usage-percent"].endswith("(default 95)")
    assert blocks["read-cache-bytes"].endswith("(default 16777216)")
    assert blocks["max-pending-output-bytes"].endswith("(default 1048576)")
    assert blocks["auth-http-request-method"].endswith('(default "get")')


# ------------------------------------------------------------------ defaults


NSQD_DEFAULTS: dict[str, object] = {
    "show_version": False,
    "config": "",
    "log_level": "info",
    "log_prefix": "[nsqd] ",
    "verbose": False,
    "worker_id": False,
    "tcp_address": "0.0.0.0:4150",
    "http_address": "0.0.0.0:4151",
    "https_address": "0.0.0.0:4152",
    "broadcast_tcp_port": 0,
    "broadcast_http_port": 0,
    "lookupd_tcp_addresses": (),
    "auth_http_addresses": (),
    "auth_http_request_method": "get",
    "http_client_connect_timeout": 2.0,
    "http_client_request_timeout": 5.0,
    "data_path": "",
    "mem_queue_size": 10000,
    "max_bytes_per_file": 104857600,
    "sync_every": 2500,
    "sync_timeout": 2.0,
    "queue_scan_worker_pool_max": 4,
    "queue_scan_selection_count": 20,
    "msg_timeout": 60.0,
    "max_msg_timeout": 900.0,
    "max_msg_size": 1048576,
    "max_req_timeout": 3600.0,
    "max_body_size": 5242880,
    "max_heartbeat_interval": 60.0,
    "max_rdy_count": 2500,
    "max_output_buffer_size": 65536,
    "max_output_buffer_timeout": 30.0,
    "min_output_buffer_timeout": 0.025,
    "output_buffer_timeout": 0.25,
    "max_channel_consumers": 0,
    "statsd_address": "",
    "statsd_interval": 60.0,
    "statsd_mem_stats": True,
    "statsd_prefix": "nsq.%s",
    "statsd_udp_packet_size": 508,
    "statsd_exclude_ephemeral": False,
    "e2e_processing_latency_percentiles": (),
    "e2e_processing_latency_window_time": 600.0,
    "tls_cert": "",
    "tls_key": "",
    "tls_client_auth_policy": "",
    "tls_root_ca_file": "",
    "tls_required": "false",
    "tls_min_version": "tls1.0",
    "deflate": True,
    "max_deflate_level": 6,
    "snappy": True,
    "default_partitions": 1,
    "default_replicator": 1,
    "replica_lag_max": 10.0,
    "replica_move_rate": 32 << 20,
    "producer_state_ttl": 86400.0,
    "max_producers": 10_000,
    "retention": 604800.0,
    "max_disk_usage_percent": 95,
    "read_cache_bytes": 16 * 1024 * 1024,
    "max_pending_output_bytes": 1024 * 1024,
    "max_segment_fds": 0,
    "busy_poll": 200e-6,
    "cluster_secret_file": "",
}


def test_defaults_are_nsqds() -> None:
    options = Options()
    fields = {field.name for field in dataclasses.fields(Options)}
    assert fields == set(NSQD_DEFAULTS) | {"broadcast_address", "node_id", "rack"}
    for name, value in NSQD_DEFAULTS.items():
        assert getattr(options, name) == value, name
        assert type(getattr(options, name)) is type(value), name
    assert options.broadcast_address == socket.gethostname()
    assert options.node_id == default_node_id(socket.gethostname())


def test_empty_command_line_gives_the_defaults() -> None:
    assert parse_nsqd_args([]) == Options()


def test_default_node_id_matches_nsqd() -> None:
    # nsqd 1.3.0 on a host named "vm" prints "-node-id int ... (default 617)"
    assert default_node_id("vm") == 617
    assert 0 <= default_node_id() < 1024


def test_every_flag_maps_to_a_field_of_the_right_type() -> None:
    flags = nsqd_flagset()
    fields = {field.name for field in dataclasses.fields(Options)}
    names = [flag.name for flag in flags]
    assert sorted(attribute_name(name) for name in names) == sorted(fields)
    defaults = Options()
    for flag in flags:
        assert flag.default == getattr(defaults, attribute_name(flag.name)), flag.name


def test_flagset_takes_defaults_from_given_options() -> None:
    base = dataclasses.replace(Options(), msg_timeout=5.0, lookupd_tcp_addresses=("a:1",))
    result = nsqd_flagset(base).parse(["--lookupd-tcp-address=b:2"])
    options = options_from_flags(result)
    assert options.msg_timeout == 5.0
    assert options.lookupd_tcp_addresses == ("a:1", "b:2")


def test_options_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Options().msg_timeout = 1.0  # type: ignore[misc]


# ------------------------------------------------------------------ command lines


def test_pynsq_harness_command_line() -> None:
    options = parse_nsqd_args(
        [
            "-lookupd-tcp-address=127.0.0.1:4160",
            "-lookupd-tcp-address=127.0.0.1:4161",
            "--verbose",
            "-data-path=/tmp/nsq",
            "--tls-cert=cert.pem",
            "--tls-key=key.pem",
            "--snappy",
            "--deflate",
        ]
    )
    assert options.lookupd_tcp_addresses == ("127.0.0.1:4160", "127.0.0.1:4161")
    assert options.verbose is True
    assert options.data_path == "/tmp/nsq"
    assert (options.tls_cert, options.tls_key) == ("cert.pem", "key.pem")
    assert options.snappy is True
    assert options.deflate is True


@pytest.mark.parametrize(
    ("argv", "attribute", "value"),
    [
        (["--tcp-address", "127.0.0.1:5150"], "tcp_address", "127.0.0.1:5150"),
        (["-http-address=:4151"], "http_address", ":4151"),
        (["-broadcast-address=host.example"], "broadcast_address", "host.example"),
        (["-broadcast-tcp-port=14150"], "broadcast_tcp_port", 14150),
        (["-node-id=0x10"], "node_id", 16),
        (["-mem-queue-size=0"], "mem_queue_size", 0),
        (["-msg-timeout=90s"], "msg_timeout", 90.0),
        (["-max-msg-timeout", "1h"], "max_msg_timeout", 3600.0),
        (["-output-buffer-timeout=0"], "output_buffer_timeout", 0.0),
        (["-min-output-buffer-timeout=10ms"], "min_output_buffer_timeout", 0.01),
        (["-sync-timeout=1.5s"], "sync_timeout", 1.5),
        (["-retention=24h"], "retention", 86400.0),
        (["-default-partitions=4"], "default_partitions", 4),
        (["-default-replicator=2"], "default_replicator", 2),
        (["-replica-lag-max=3s"], "replica_lag_max", 3.0),
        (["-replica-move-rate=1000"], "replica_move_rate", 1000),
        (["-producer-state-ttl=2h"], "producer_state_ttl", 7200.0),
        (["-max-producers=50000"], "max_producers", 50000),
        (["-max-segment-fds=300"], "max_segment_fds", 300),
        (["-busy-poll=50us"], "busy_poll", 50e-6),
        (["-busy-poll=0"], "busy_poll", 0.0),
        (["-max-disk-usage-percent=80"], "max_disk_usage_percent", 80),
        (["-snappy=false"], "snappy", False),
        (["-deflate=0"], "deflate", False),
        (["-statsd-mem-stats=f"], "statsd_mem_stats", False),
        (["-max-deflate-level=9"], "max_deflate_level", 9),
        (
            ["-auth-http-address=a:1", "-auth-http-address=b:2"],
            "auth_http_addresses",
            ("a:1", "b:2"),
        ),
        (["-auth-http-request-method=post"], "auth_http_request_method", "post"),
        (["-log-level=WARN"], "log_level", "warn"),
        (["-log-level", "Debug"], "log_level", "debug"),
        (["-log-prefix="], "log_prefix", ""),
        (["-tls-min-version=TLS1.2"], "tls_min_version", "tls1.2"),
        (["-tls-min-version="], "tls_min_version", "tls1.0"),
        (["-tls-required=false"], "tls_required", "false"),
        (["-worker-id"], "worker_id", True),
        (["-version"], "show_version", True),
        (
            ["-e2e-processing-latency-percentile=0.5,0.99", "-e2e-processing-latency-percentile=1"],
            "e2e_processing_latency_percentiles",
            (1.0, 0.99, 0.5),
        ),
        (["-verbose", "positional", "-snappy=false"], "snappy", True),
    ],
)
def test_flags_set_options(argv: list[str], attribute: str, value: object) -> None:
    assert getattr(parse_nsqd_args(argv), attribute) == value


@pytest.mark.parametrize("value", ["true", "TRUE", "1", "t"])
def test_tls_required_true(value: str) -> None:
    tls = ["--tls-cert=c.pem", "--tls-key=k.pem"]
    assert parse_nsqd_args([*tls, f"--tls-required={value}"]).tls_required == "true"
    assert parse_nsqd_args([*tls, "--tls-required"]).tls_required == "true"
    assert parse_nsqd_args([*tls, "--tls-required=Tcp-Https"]).tls_required == "tcp-https"


def test_tls_client_auth_policy_implies_tls_required() -> None:
    options = parse_nsqd_args(["-tls-cert=c", "-tls-key=k", "-tls-client-auth-policy=require"])
    assert options.tls_required == "true"
    options = parse_nsqd_args(
        ["-tls-cert=c", "-tls-key=k", "-tls-client-auth-policy=require", "-tls-required=tcp-https"]
    )
    assert options.tls_required == "tcp-https"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["-log-level=verbose"],
            'invalid value "verbose" for flag -log-level: '
            "invalid log level 'verbose' (debug, info, warn, error, fatal)",
        ),
        (
            ["-tls-required=maybe"],
            'invalid boolean value "maybe" for -tls-required: '
            'strconv.ParseBool: parsing "maybe": invalid syntax',
        ),
        (
            ["-tls-min-version=ssl3.0"],
            'invalid value "ssl3.0" for flag -tls-min-version: unknown tlsVersionOption "ssl3.0"',
        ),
        (
            ["-e2e-processing-latency-percentile=0.9,abc"],
            'invalid value "0.9,abc" for flag -e2e-processing-latency-percentile: '
            "Could not parse: abc",
        ),
        (["-msg-timeout=60"], 'invalid value "60" for flag -msg-timeout: parse error'),
        (["-mem-queue-size=1e4"], 'invalid value "1e4" for flag -mem-queue-size: parse error'),
        (["--lookupd-tcp-address"], "flag needs an argument: -lookupd-tcp-address"),
        (["--topology-zone=a"], "flag provided but not defined: -topology-zone"),
        (["-snappy=yes"], 'invalid boolean value "yes" for -snappy: parse error'),
    ],
)
def test_flag_errors(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError) as info:
        parse_nsqd_args(argv)
    assert str(info.value) == message


def test_help() -> None:
    with pytest.raises(HelpRequested):
        parse_nsqd_args(["--help"])


def test_log_levels() -> None:
    for level in LOG_LEVELS:
        assert parse_nsqd_args([f"--log-level={level.upper()}"]).log_level == level


# ------------------------------------------------------------------ start-up checks


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-max-deflate-level=0"], "--max-deflate-level must be [1,9]"),  # nsqd
        (["-max-deflate-level=10"], "--max-deflate-level must be [1,9]"),
        (["-node-id=1024"], "--node-id must be [0,1024)"),  # nsqd
        (["-node-id=-1"], "--node-id must be [0,1024)"),
        (["-tls-required"], "cannot require TLS client connections without TLS key and cert"),
        (
            ["-tls-client-auth-policy=require"],
            "cannot require TLS client connections without TLS key and cert",  # nsqd
        ),
        (
            ["-tls-required=tcp-https"],
            "cannot require TLS client connections without TLS key and cert",
        ),
        (
            ["-e2e-processing-latency-percentile=1.5"],
            "invalid E2E processing latency percentile: 1.5",  # nsqd
        ),
        (
            ["-e2e-processing-latency-percentile=0,1e-7"],
            "invalid E2E processing latency percentile: 0",  # nsqd
        ),
        (
            ["-e2e-processing-latency-percentile=-1e-7"],
            "invalid E2E processing latency percentile: -1e-07",
        ),
        (
            ["-e2e-processing-latency-percentile=NaN"],
            "invalid E2E processing latency percentile: NaN",
        ),
        (["-auth-http-request-method=put"], "--auth-http-request-method must be post or get"),
        (["-auth-http-request-method=GET"], "--auth-http-request-method must be post or get"),
        (["-default-partitions=0"], "--default-partitions must be >= 1"),
        (["-replica-move-rate=0"], "--replica-move-rate must be positive"),
        (["-producer-state-ttl=0s"], "--producer-state-ttl must be positive"),
        (["-max-producers=0"], "--max-producers must be positive"),
        (
            ["-statsd-address=127.0.0.1:8125", "-statsd-interval=0s"],
            "--statsd-interval must be positive",
        ),
        (["-retention=-1s"], "--retention must not be negative"),
        (["-max-disk-usage-percent=0"], "--max-disk-usage-percent must be [1,100]"),
        (["-max-disk-usage-percent=101"], "--max-disk-usage-percent must be [1,100]"),
        (["-read-cache-bytes=-1"], "--read-cache-bytes must not be negative"),
        (["-max-pending-output-bytes=0"], "--max-pending-output-bytes must be >= 1"),
        (["-busy-poll=11ms"], "--busy-poll must be between 0 and 10ms"),
        (["-busy-poll=-1us"], "--busy-poll must be between 0 and 10ms"),
        (["-tcp-address=0.0.0.0:x"], '--tcp-address: address 0.0.0.0:x: invalid port "x"'),
        (
            ["-http-address=127.0.0.1:65536"],
            '--http-address: address 127.0.0.1:65536: invalid port "65536"',
        ),
        (
            ["-tls-cert=c", "-tls-key=k", "-https-address=:https"],
            '--https-address: address :https: invalid port "https"',
        ),
    ],
)
def test_validation_errors(argv: list[str], message: str) -> None:
    with pytest.raises(OptionsError) as info:
        parse_nsqd_args(argv)
    assert str(info.value) == message


@pytest.mark.parametrize(
    "argv",
    [
        ["-https-address=:https"],  # no TLS: nsqd never listens on it
        ["-http-address="],  # no HTTP listener
        ["-tcp-address=/tmp/nsqd.sock"],  # a unix socket path
        ["-e2e-processing-latency-percentile=1.0,0.99,1e-9"],
        ["-max-deflate-level=1"],
        ["-node-id=0"],
        ["-node-id=1023"],
        ["-retention=0"],
        ["-statsd-interval=0s"],  # no --statsd-address: no statsd task to tick
        ["-max-disk-usage-percent=100"],
        ["-tls-cert=c", "-tls-key=k", "-tls-required"],
        ["-tls-cert=c", "-tls-required"],  # nsqd would fail on the key file later
    ],
)
def test_valid_edge_values(argv: list[str]) -> None:
    parse_nsqd_args(argv)


def test_version_skips_validation() -> None:
    options = parse_nsqd_args(["--version", "--max-deflate-level=0"])
    assert options.show_version is True
    assert options.max_deflate_level == 0


def test_validate_options_is_idempotent() -> None:
    options = Options(tls_cert="c", tls_key="k", tls_client_auth_policy="require-verify")
    once = validate_options(options)
    assert once.tls_required == "true"
    assert validate_options(once) == once


# ------------------------------------------------------------------ addresses


@pytest.mark.parametrize(
    ("address", "host", "port"),
    [
        ("0.0.0.0:4150", "0.0.0.0", 4150),
        ("127.0.0.1:0", "127.0.0.1", 0),
        (":4151", "", 4151),
        ("localhost:65535", "localhost", 65535),
        ("[::1]:4150", "::1", 4150),
        ("[::]:4152", "::", 4152),
        ("[fe80::1%eth0]:4150", "fe80::1%eth0", 4150),
    ],
)
def test_parse_host_port(address: str, host: str, port: int) -> None:
    assert parse_host_port(address) == (host, port)
    assert address_kind(address) == "tcp"


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("4150", "address 4150: missing port in address"),
        ("/tmp/nsqd.sock", "address /tmp/nsqd.sock: missing port in address"),
        ("::1:4150", "address ::1:4150: too many colons in address"),
        ("[::1", "address [::1: missing ']' in address"),
        ("[::1]", "address [::1]: missing port in address"),
        ("[::1]x:1", "address [::1]x:1: missing port in address"),
        ("[::1]:1:2", "address [::1]:1:2: too many colons in address"),
        ("a[b:1", "address a[b:1: unexpected '[' in address"),
        ("a]b:1", "address a]b:1: unexpected ']' in address"),
    ],
)
def test_split_host_port_errors(address: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        split_host_port(address)
    assert str(info.value) == message
    assert address_kind(address) == "unix"
    with pytest.raises(ValueError):
        parse_host_port(address)


@pytest.mark.parametrize("address", ["host:", "host:-1", "host:+1", "host:70000", "host:\u0661"])
def test_parse_host_port_bad_ports(address: str) -> None:
    assert address_kind(address) == "tcp"
    with pytest.raises(ValueError, match="invalid port"):
        parse_host_port(address)


def test_options_host_port_helpers() -> None:
    options = parse_nsqd_args(
        ["-tcp-address=[::1]:5150", "-http-address=:5151", "-https-address=127.0.0.1:5152"]
    )
    assert options.tcp_host_port() == ("::1", 5150)
    assert options.http_host_port() == ("", 5151)
    assert options.https_host_port() == ("127.0.0.1", 5152)
    assert Options().tcp_host_port() == ("0.0.0.0", 4150)
    with pytest.raises(ValueError):
        Options(tcp_address="/tmp/nsqd.sock").tcp_host_port()


# ------------------------------------------------------------------ layering


STDLIB_AND_NSQD = {"__future__", "collections", "dataclasses", "decimal", "hashlib", "math"} | {
    "pnsq._goflag",
    "nsqd",
    "socket",
    "sys",
    "types",
    "typing",
    "zlib",
}


def _package(module: str) -> str:
    """The top-level package of ``module``; for pnsq's private helpers, the helper package."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "pnsq" else parts[0]


@pytest.mark.parametrize("module", ["options.py", "flags.py"])  # goflag: import-linter
def test_modules_do_not_import_trio(module: str) -> None:
    source = Path(__file__).parents[4] / "nsqd" / "config" / module
    imported: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            imported.update(_package(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(_package(node.module))
    assert "trio" not in imported
    assert imported <= STDLIB_AND_NSQD
