"""nsqd's command line: every nsqd 1.3.0 flag, nsqd's own flag types, and the parse → Options.

:func:`nsqd_flagset` declares the flags (names, wording and usage layout as ``nsqd -h`` of 1.3.0
prints them) plus pnsq's own (``--default-partitions``, ``--retention``,
``--max-disk-usage-percent``, ``--read-cache-bytes``, ``--max-pending-output-bytes``,
``--busy-poll``) and ``--auth-http-request-method`` from nsqd's master branch.
:func:`parse_nsqd_args` turns a command line into a validated :class:`~nsqd.config.options.Options`.

Errors: :class:`~pnsq._goflag.flags.FlagError`/:class:`~pnsq._goflag.flags.HelpRequested` for the
command line
itself (nsqd exits 2/0), :class:`~nsqd.config.options.OptionsError` for values nsqd rejects at
start-up (nsqd logs ``FATAL: failed to instantiate nsqd - <message>`` and exits 1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nsqd.config.file import load_config, resolve
from nsqd.config.options import LOG_LEVELS, TLS_VERSIONS, Options, attribute_name, validate_options
from pnsq._goflag.flags import FlagSet, FlagValueError, ParseResult
from pnsq._goflag.syntax import go_quote, parse_go_float

_LOG_LEVEL_TEXT = {
    "debug": "DEBUG",
    "info": "INFO",
    "warn": "WARNING",
    "error": "ERROR",
    "fatal": "FATAL",
}  # nsqd's LogLevel.String()
_TLS_REQUIRED_TEXT = {"false": "0", "tcp-https": "1", "true": "2"}  # nsqd's TLSRequired ints

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
default-replicator int
    [pnsq] copies of each partition of a topic created through pnsq's nsqlookupd by a publish
    or subscribe (leader and replicas)
replica-lag-max duration
    [pnsq] a follower that has not held a led partition's whole log for this long is reported
    to nsqlookupd as lagging (it then leaves the in-sync set)
replica-move-rate int
    [pnsq] bytes per second a leader sends to a replica outside the in-sync set (a moved,
    new or returning replica catching up)
producer-state-ttl duration
    [pnsq] how long a partition remembers a numbering (idempotent) producer that stopped
    publishing to it; a publish it retries later than that may be stored twice
max-producers int
    [pnsq] numbering (idempotent) producers a partition remembers, HTTP Idempotency-Keys
    included (each key is one); past it the least recently seen is forgotten, also within
    --producer-state-ttl (then logged): a retry of its publish may be stored twice
retention duration
    [pnsq] how long fully consumed segments are kept on disk
max-disk-usage-percent int
    [pnsq] maximum disk usage of the --data-path filesystem, in percent
read-cache-bytes int
    [pnsq] bytes of recently published messages kept in memory for consumers (all partitions
    together; 0 disables the cache)
max-pending-output-bytes int
    [pnsq] bytes of message frames queued in nsqd for one consumer; past it nsqd takes no more
    messages for that consumer until its socket drains
busy-poll duration
    [pnsq] after serving publishes that came close together, keep polling the sockets this long
    before sleeping (lower publish-to-deliver latency at steady rates for a little CPU; 0
    disables it)
max-segment-fds int
    [pnsq] descriptors of open segment files kept at most, idle ones are closed (0: a quarter of
    the open-files limit)
cluster-secret-file string
    [pnsq] path to a file holding the cluster's shared secret: links between pnsq processes
    prove they hold it (required with --auth-http-address or --tls-required)
rack string
    [pnsq] failure domain of this node, registered with nsqlookupd: two copies of a partition
    are placed on different racks while one has room (defaults to the OS hostname)
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
    """Build and validate :class:`Options` from a parse of :func:`nsqd_flagset`, with the
    ``--config`` file's values for the flags not given (:mod:`nsqd.config.file`)."""
    flag_values: Mapping[str, object] = result.values
    path = result.get_str("config")
    if path and not result.get_bool("version"):  # nsqd prints its version before the file
        kinds = {name: kind for name, kind, _ in _FLAGS}
        flag_values = resolve(result, nsqd_flagset(), kinds, load_config(path))
    values: dict[str, Any] = {attribute_name(name): flag_values[name] for name, _, _ in _FLAGS}
    return validate_options(Options(**values))


def parse_nsqd_args(argv: Sequence[str]) -> Options:
    """Parse nsqd's command line (without the program name). Raises
    :class:`~pnsq._goflag.flags.FlagError`, :class:`~pnsq._goflag.flags.HelpRequested` or
    :class:`~nsqd.config.options.OptionsError`.
    Positional arguments are ignored, as nsqd ignores them."""
    return options_from_flags(nsqd_flagset().parse(argv))
