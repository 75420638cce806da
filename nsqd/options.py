"""nsqd's options: every nsqd 1.3.0 command-line flag, with nsqd's defaults and checks.

:func:`nsqd_flagset` declares the flags (names, wording and usage layout as ``nsqd -h`` of 1.3.0
prints them) plus pnsq's own (``--default-partitions``, ``--retention``,
``--max-disk-usage-percent``) and ``--auth-http-request-method`` from nsqd's master branch.
:func:`parse_nsqd_args` turns a command line into a frozen :class:`Options`. An attribute is named
after its flag with ``-`` → ``_``, except ``--version`` (``show_version``) and the repeatable
flags, which are plural: ``lookupd_tcp_addresses``, ``auth_http_addresses``,
``e2e_processing_latency_percentiles`` (the names nsqd's config file uses). Durations are float
seconds.

Errors: :class:`~nsqd.flags.FlagError`/:class:`~nsqd.flags.HelpRequested` for the command line
itself (nsqd exits 2/0), :class:`OptionsError` for values nsqd rejects at start-up (nsqd logs
``FATAL: failed to instantiate nsqd - <message>`` and exits 1).
"""

from __future__ import annotations

import dataclasses
import hashlib
import socket
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from nsqd.flags import (
    FlagSet,
    FlagValueError,
    ParseResult,
    format_go_float,
    go_quote,
    parse_go_float,
)

LOG_LEVELS = ("debug", "info", "warn", "error", "fatal")
TLS_VERSIONS = ("tls1.0", "tls1.1", "tls1.2", "tls1.3")
_LOG_LEVEL_TEXT = {
    "debug": "DEBUG",
    "info": "INFO",
    "warn": "WARNING",
    "error": "ERROR",
    "fatal": "FATAL",
}  # nsqd's LogLevel.String()
_TLS_REQUIRED_TEXT = {"false": "0", "tcp-https": "1", "true": "2"}  # nsqd's TLSRequired ints


class OptionsError(ValueError):
    """An option value nsqd refuses at start-up; the message is nsqd's text where it has one."""


def default_node_id(hostname: str | None = None) -> int:
    """nsqd's default ``--node-id``: ``crc32(md5(hostname)) % 1024``."""
    name = socket.gethostname() if hostname is None else hostname
    digest = hashlib.md5(name.encode(), usedforsecurity=False).digest()
    return zlib.crc32(digest) % 1024


def split_host_port(address: str) -> tuple[str, str]:
    """Split ``host:port`` like Go's ``net.SplitHostPort`` (``[::1]:4150`` → ``("::1", "4150")``);
    raises ``ValueError`` with Go's text."""

    def fail(why: str) -> ValueError:
        return ValueError(f"address {address}: {why}")

    colon = address.rfind(":")
    if colon < 0:
        raise fail("missing port in address")
    start, end = 0, 0
    if address.startswith("["):
        close = address.find("]")
        if close < 0:
            raise fail("missing ']' in address")
        if close + 1 == len(address):
            raise fail("missing port in address")
        if close + 1 != colon:
            raise fail(
                "too many colons in address"
                if address[close + 1] == ":"
                else "missing port in address"
            )
        host, start, end = address[1:close], 1, close + 1
    else:
        host = address[:colon]
        if ":" in host:
            raise fail("too many colons in address")
    if "[" in address[start:]:
        raise fail("unexpected '[' in address")
    if "]" in address[end:]:
        raise fail("unexpected ']' in address")
    return host, address[colon + 1 :]


def address_kind(address: str) -> Literal["tcp", "unix"]:
    """nsqd 1.3.0's rule: an address that does not split as ``host:port`` is a unix socket path."""
    try:
        split_host_port(address)
    except ValueError:
        return "unix"
    return "tcp"


def parse_host_port(address: str) -> tuple[str, int]:
    """``host:port`` → ``(host, port)``; an empty host means all interfaces. Raises
    ``ValueError`` for a unix socket path or a port that is not a number in [0, 65535]."""
    host, port = split_host_port(address)
    if not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise ValueError(f"address {address}: invalid port {go_quote(port)}")
    return host, int(port)


@dataclass(frozen=True, slots=True)
class Options:
    """nsqd's configuration. ``Options()`` holds nsqd's defaults for this host."""

    # basic
    show_version: bool = False
    config: str = ""
    log_level: str = "info"  # lower case: debug, info, warn, error or fatal
    log_prefix: str = "[nsqd] "
    verbose: bool = False  # deprecated, no effect
    node_id: int = field(default_factory=default_node_id)
    worker_id: bool = False  # deprecated, no effect
    https_address: str = "0.0.0.0:4152"
    http_address: str = "0.0.0.0:4151"
    tcp_address: str = "0.0.0.0:4150"
    auth_http_addresses: tuple[str, ...] = ()
    auth_http_request_method: str = "get"
    broadcast_address: str = field(default_factory=socket.gethostname)
    broadcast_tcp_port: int = 0  # 0: the port --tcp-address listens on
    broadcast_http_port: int = 0  # 0: the port --http-address listens on
    lookupd_tcp_addresses: tuple[str, ...] = ()
    http_client_connect_timeout: float = 2.0
    http_client_request_timeout: float = 5.0
    # disk queue
    data_path: str = ""  # "": the current directory
    mem_queue_size: int = 10000
    max_bytes_per_file: int = 104857600
    sync_every: int = 2500
    sync_timeout: float = 2.0
    queue_scan_worker_pool_max: int = 4
    queue_scan_selection_count: int = 20
    # messages and commands
    msg_timeout: float = 60.0
    max_msg_timeout: float = 900.0
    max_msg_size: int = 1048576
    max_req_timeout: float = 3600.0
    max_body_size: int = 5242880
    # client-overridable
    max_heartbeat_interval: float = 60.0
    max_rdy_count: int = 2500
    max_output_buffer_size: int = 65536
    max_output_buffer_timeout: float = 30.0
    min_output_buffer_timeout: float = 0.025
    output_buffer_timeout: float = 0.25
    max_channel_consumers: int = 0  # 0: unlimited
    # statsd
    statsd_address: str = ""
    statsd_interval: float = 60.0
    statsd_mem_stats: bool = True
    statsd_prefix: str = "nsq.%s"
    statsd_udp_packet_size: int = 508
    statsd_exclude_ephemeral: bool = False
    # end-to-end latency
    e2e_processing_latency_percentiles: tuple[float, ...] = ()  # sorted, largest first
    e2e_processing_latency_window_time: float = 600.0
    # TLS
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_auth_policy: str = ""  # "", "require" or "require-verify"
    tls_root_ca_file: str = ""
    tls_required: str = "false"  # "false", "true" or "tcp-https"
    tls_min_version: str = "tls1.0"
    # compression
    deflate: bool = True
    max_deflate_level: int = 6
    snappy: bool = True
    # pnsq's own
    default_partitions: int = 1
    retention: float = 604800.0
    max_disk_usage_percent: int = 95

    def tcp_host_port(self) -> tuple[str, int]:
        """``--tcp-address`` as ``(host, port)``; see :func:`parse_host_port`."""
        return parse_host_port(self.tcp_address)

    def http_host_port(self) -> tuple[str, int]:
        """``--http-address`` as ``(host, port)``; see :func:`parse_host_port`."""
        return parse_host_port(self.http_address)

    def https_host_port(self) -> tuple[str, int]:
        """``--https-address`` as ``(host, port)``; see :func:`parse_host_port`."""
        return parse_host_port(self.https_address)


# nsqd's flags: a "name kind" line, then the usage on indented lines. Kinds other than the
# FlagSet's own (string, int, bool, duration, list) are nsqd's flag.Var types.
_FLAG_TABLE = """
version bool
    print version string
config string
    path to config file
log-level log-level
    set log verbosity: debug, info, warn, error, or fatal
log-prefix string
    log message prefix
verbose bool
    [deprecated] has no effect, use --log-level
node-id int
    unique part for message IDs, (int) in range [0,1024) (default is hash of hostname)
worker-id bool
    [deprecated] use --node-id
https-address string
    <addr>:<port> to listen on for HTTPS clients
http-address string
    address to listen on for HTTP clients (<addr>:<port> for TCP/IP or <path> for unix socket)
tcp-address string
    address to listen on for TCP clients (<addr>:<port> for TCP/IP or <path> for unix socket)
auth-http-address list
    <addr>:<port> or a full url to query auth server (may be given multiple times)
auth-http-request-method string
    HTTP method to use for auth server requests (get or post)
broadcast-address string
    address that will be registered with lookupd (defaults to the OS hostname)
broadcast-tcp-port int
    TCP port that will be registered with lookupd (defaults to the TCP port that this nsqd is
    listening on)
broadcast-http-port int
    HTTP port that will be registered with lookupd (defaults to the HTTP port that this nsqd is
    listening on)
lookupd-tcp-address list
    lookupd TCP address (may be given multiple times)
http-client-connect-timeout duration
    timeout for HTTP connect
http-client-request-timeout duration
    timeout for HTTP request
data-path string
    path to store disk-backed messages
mem-queue-size int
    number of messages to keep in memory (per topic/channel)
max-bytes-per-file int
    number of bytes per diskqueue file before rolling
sync-every int
    number of messages per diskqueue fsync
sync-timeout duration
    duration of time per diskqueue fsync
queue-scan-worker-pool-max int
    max concurrency for checking in-flight and deferred message timeouts
queue-scan-selection-count int
    number of channels to check per cycle (every 100ms) for in-flight and deferred timeouts
msg-timeout duration
    default duration to wait before auto-requeing a message
max-msg-timeout duration
    maximum duration before a message will timeout
max-msg-size int
    maximum size of a single message in bytes
max-req-timeout duration
    maximum requeuing timeout for a message
max-body-size int
    maximum size of a single command body
max-heartbeat-interval duration
    maximum client configurable duration of time between client heartbeats
max-rdy-count int
    maximum RDY count for a client
max-output-buffer-size int
    maximum client configurable size (in bytes) for a client output buffer
max-output-buffer-timeout duration
    maximum client configurable duration of time between flushing to a client
min-output-buffer-timeout duration
    minimum client configurable duration of time between flushing to a client
output-buffer-timeout duration
    default duration of time between flushing data to clients
max-channel-consumers int
    maximum channel consumer connection count per nsqd instance (default 0, i.e., unlimited)
statsd-address string
    UDP <addr>:<port> of a statsd daemon for pushing stats
statsd-interval duration
    duration between pushing to statsd
statsd-mem-stats bool
    toggle sending memory and GC stats to statsd
statsd-prefix string
    prefix used for keys sent to statsd (%s for host replacement)
statsd-udp-packet-size int
    the size in bytes of statsd UDP packets
statsd-exclude-ephemeral bool
    Skip ephemeral topics and channels when sending stats to statsd
e2e-processing-latency-percentile percentiles
    message processing time percentiles (as float (0, 1.0]) to track (can be specified multiple
    times or comma separated '1.0,0.99,0.95', default none)
e2e-processing-latency-window-time duration
    calculate end to end latency quantiles for this duration of time (ie: 60s would only show
    quantile calculations from the past 60 seconds)
tls-cert string
    path to certificate file
tls-key string
    path to key file
tls-client-auth-policy string
    client certificate auth policy ('require' or 'require-verify')
tls-root-ca-file string
    path to certificate authority file
tls-required tls-required
    require TLS for client connections (true, false, tcp-https)
tls-min-version tls-min-version
    minimum SSL/TLS version acceptable ('ssl3.0', 'tls1.0', 'tls1.1', 'tls1.2' or 'tls1.3')
deflate bool
    enable deflate feature negotiation (client compression)
max-deflate-level int
    max deflate compression level a client can negotiate (> values == > nsqd CPU usage)
snappy bool
    enable snappy feature negotiation (client compression)
default-partitions int
    [pnsq] number of partitions of an auto-created topic
retention duration
    [pnsq] how long fully consumed segments are kept on disk
max-disk-usage-percent int
    [pnsq] maximum disk usage of the --data-path filesystem, in percent
"""


def _read_table(table: str) -> tuple[tuple[str, str, str], ...]:
    """``_FLAG_TABLE`` as ``(flag, kind, usage)`` triples."""
    entries: list[list[str]] = []
    for line in table.strip().splitlines():
        if line.startswith(" "):
            entries[-1][2] = f"{entries[-1][2]} {line.strip()}".lstrip()
        else:
            name, kind = line.split()
            entries.append([name, kind, ""])
    return tuple((name, kind, usage) for name, kind, usage in entries)


_FLAGS = _read_table(_FLAG_TABLE)
_ATTRIBUTES = {
    "version": "show_version",
    "auth-http-address": "auth_http_addresses",
    "lookupd-tcp-address": "lookupd_tcp_addresses",
    "e2e-processing-latency-percentile": "e2e_processing_latency_percentiles",
}


def attribute_name(flag: str) -> str:
    """The :class:`Options` attribute that holds ``--flag``."""
    return _ATTRIBUTES.get(flag, flag.replace("-", "_"))


def _set_log_level(text: str, _current: str) -> str:
    level = text.lower()
    if level not in LOG_LEVELS:
        raise FlagValueError(f"invalid log level '{text}' (debug, info, warn, error, fatal)")
    return level


def _set_tls_required(text: str, _current: str) -> str:
    value = text.lower()  # nsqd lowercases before strconv.ParseBool
    if value == "tcp-https":
        return value
    if value in ("1", "t", "true"):
        return "true"
    if value in ("0", "f", "false"):
        return "false"
    raise FlagValueError(f"strconv.ParseBool: parsing {go_quote(value)}: invalid syntax")


def _set_tls_min_version(text: str, current: str) -> str:
    value = text.lower()
    if not value:
        return current
    if value not in TLS_VERSIONS:
        raise FlagValueError(f"unknown tlsVersionOption {go_quote(value)}")
    return value


def _set_percentiles(text: str, current: tuple[float, ...]) -> tuple[float, ...]:
    values = list(current)
    for part in text.split(","):
        try:
            values.append(parse_go_float(part))
        except FlagValueError:
            raise FlagValueError(f"Could not parse: {part}") from None  # nsqd: log.Fatalf
    return tuple(sorted(values, reverse=True))


def _percentiles_text(values: tuple[float, ...]) -> str:
    return ",".join(f"{value:f}" for value in values)


def nsqd_flagset(defaults: Options | None = None) -> FlagSet:
    """nsqd's flags. Their defaults come from ``defaults`` (nsqd's own when ``None``), so
    values read from a config file can be passed in and still be overridden by flags."""
    base = Options() if defaults is None else defaults
    flags = FlagSet("nsqd")
    for name, kind, usage in _FLAGS:
        default = getattr(base, attribute_name(name))
        if kind == "string":
            flags.add_string(name, default, usage)
        elif kind == "int":
            flags.add_int(name, default, usage)
        elif kind == "bool":
            flags.add_bool(name, default, usage)
        elif kind == "duration":
            flags.add_duration(name, default, usage)
        elif kind == "list":
            flags.add_list(name, usage, default)
        elif kind == "log-level":
            text = _LOG_LEVEL_TEXT.__getitem__
            flags.add_var(name, default, usage, _set_log_level, text=text, zero_text="invalid")
        elif kind == "tls-required":
            text = _TLS_REQUIRED_TEXT.__getitem__
            setter = _set_tls_required
            flags.add_var(name, default, usage, setter, text=text, zero_text="0", is_bool=True)
        elif kind == "tls-min-version":
            flags.add_var(name, default, usage, _set_tls_min_version, zero_text="0")
        else:
            flags.add_var(name, default, usage, _set_percentiles, text=_percentiles_text)
    return flags


def options_from_flags(result: ParseResult) -> Options:
    """Build and validate :class:`Options` from a parse of :func:`nsqd_flagset`."""
    values: dict[str, Any] = {attribute_name(name): result.values[name] for name, _, _ in _FLAGS}
    return validate_options(Options(**values))


def parse_nsqd_args(argv: Sequence[str]) -> Options:
    """Parse nsqd's command line (without the program name). Raises
    :class:`~nsqd.flags.FlagError`, :class:`~nsqd.flags.HelpRequested` or :class:`OptionsError`.
    Positional arguments are ignored, as nsqd ignores them."""
    return options_from_flags(nsqd_flagset().parse(argv))


def validate_options(options: Options) -> Options:
    """nsqd's start-up checks, in nsqd's order, plus pnsq's. Returns the options with nsqd's
    adjustment applied (``--tls-client-auth-policy`` implies ``--tls-required``). With
    ``--version`` nothing is checked: nsqd prints its version before validating."""
    if options.show_version:
        return options
    if not 1 <= options.max_deflate_level <= 9:
        raise OptionsError("--max-deflate-level must be [1,9]")
    if not 0 <= options.node_id < 1024:
        raise OptionsError("--node-id must be [0,1024)")
    if options.tls_client_auth_policy and options.tls_required == "false":
        options = dataclasses.replace(options, tls_required="true")
    if options.tls_required != "false" and not (options.tls_cert or options.tls_key):
        raise OptionsError("cannot require TLS client connections without TLS key and cert")
    for percentile in options.e2e_processing_latency_percentiles:
        if not 0 < percentile <= 1:  # also rejects NaN, which nsqd lets through
            text = format_go_float(percentile)
            raise OptionsError(f"invalid E2E processing latency percentile: {text}")
    if options.auth_http_request_method not in ("get", "post"):
        raise OptionsError("--auth-http-request-method must be post or get")
    if options.default_partitions < 1:
        raise OptionsError("--default-partitions must be >= 1")
    if options.retention < 0:
        raise OptionsError("--retention must not be negative")
    if not 1 <= options.max_disk_usage_percent <= 100:
        raise OptionsError("--max-disk-usage-percent must be [1,100]")
    listeners = ["tcp-address", "http-address"]
    if options.tls_cert or options.tls_key:
        listeners.append("https-address")  # nsqd listens for HTTPS only with TLS configured
    for flag in listeners:
        address = getattr(options, attribute_name(flag))
        if address and address_kind(address) == "tcp":
            try:
                parse_host_port(address)
            except ValueError as exc:
                raise OptionsError(f"--{flag}: {exc}") from None
    return options
