"""``/config/:opt``: nsqd's options by their config-file names, as nsqd's ``getOptByCfgName``
returns them, and the two that ``PUT`` may change at runtime.

Values have nsqd's JSON types: durations are Go ``time.Duration`` integers (nanoseconds), the
log level is nsqd's ``lg.LogLevel`` number (debug 1 … fatal 5), ``tls_required`` its int
(0 false, 1 tcp-https, 2 true), ``tls_min_version`` the TLS version number (tls1.0 = 769).
Strings are returned as plain text (nsqd's responder sends a string unencoded). pnsq's own
options (``default_partitions``, ``retention``, ``max_disk_usage_percent``, ``read_cache_bytes``,
``max_pending_output_bytes``) and
``auth_http_request_method`` (nsqd master) are readable too.

``PUT`` accepts ``nsqlookupd_tcp_addresses`` (a JSON array of strings; stored, and passed to
``on_lookupd_change`` when set) and ``log_level`` (applied to the root logger), as nsqd does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from .options import Options

LOG_LEVEL_NUMBERS = {"debug": 1, "info": 2, "warn": 3, "error": 4, "fatal": 5}
PYTHON_LOG_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "fatal": logging.CRITICAL,
}
TLS_REQUIRED_NUMBERS = {"false": 0, "tcp-https": 1, "true": 2}
TLS_VERSION_NUMBERS = {"ssl3.0": 0x0300, "tls1.0": 0x0301, "tls1.1": 0x0302, "tls1.2": 0x0303}
TLS_VERSION_NUMBERS["tls1.3"] = 0x0304

# config name -> (Options attribute, kind). nsqd 1.3.0's names: the flag name with - -> _,
# except where its Options struct has a ``cfg`` tag (``id``, the plural list names).
_OPTIONS = """
log_level log_level level
log_prefix log_prefix str
id node_id int
https_address https_address str
http_address http_address str
tcp_address tcp_address str
auth_http_addresses auth_http_addresses list
auth_http_request_method auth_http_request_method str
broadcast_address broadcast_address str
broadcast_tcp_port broadcast_tcp_port tcp_port
broadcast_http_port broadcast_http_port http_port
nsqlookupd_tcp_addresses lookupd_tcp_addresses list
http_client_connect_timeout http_client_connect_timeout duration
http_client_request_timeout http_client_request_timeout duration
data_path data_path str
mem_queue_size mem_queue_size int
max_bytes_per_file max_bytes_per_file int
sync_every sync_every int
sync_timeout sync_timeout duration
queue_scan_worker_pool_max queue_scan_worker_pool_max int
queue_scan_selection_count queue_scan_selection_count int
msg_timeout msg_timeout duration
max_msg_timeout max_msg_timeout duration
max_msg_size max_msg_size int
max_req_timeout max_req_timeout duration
max_body_size max_body_size int
max_heartbeat_interval max_heartbeat_interval duration
max_rdy_count max_rdy_count int
max_output_buffer_size max_output_buffer_size int
max_output_buffer_timeout max_output_buffer_timeout duration
min_output_buffer_timeout min_output_buffer_timeout duration
output_buffer_timeout output_buffer_timeout duration
max_channel_consumers max_channel_consumers int
statsd_address statsd_address str
statsd_interval statsd_interval duration
statsd_mem_stats statsd_mem_stats bool
statsd_prefix statsd_prefix statsd_prefix
statsd_udp_packet_size statsd_udp_packet_size int
statsd_exclude_ephemeral statsd_exclude_ephemeral bool
e2e_processing_latency_percentiles e2e_processing_latency_percentiles floats
e2e_processing_latency_window_time e2e_processing_latency_window_time duration
tls_cert tls_cert str
tls_key tls_key str
tls_client_auth_policy tls_client_auth_policy str
tls_root_ca_file tls_root_ca_file str
tls_required tls_required tls_required
tls_min_version tls_min_version tls_version
deflate deflate bool
max_deflate_level max_deflate_level int
snappy snappy bool
default_partitions default_partitions int
default_replicator default_replicator int
replica_lag_max replica_lag_max duration
replica_move_rate replica_move_rate int
producer_state_ttl producer_state_ttl duration
max_producers max_producers int
retention retention duration
max_disk_usage_percent max_disk_usage_percent int
read_cache_bytes read_cache_bytes int
max_pending_output_bytes max_pending_output_bytes int
busy_poll busy_poll duration
max_segment_fds max_segment_fds int
rack rack str
"""
OPTIONS: dict[str, tuple[str, str]] = {
    name: (attribute, kind)
    for name, attribute, kind in (line.split() for line in _OPTIONS.strip().splitlines())
}


class InvalidOptionError(LookupError):
    """Not an option (GET), or not one PUT may change: ``400 INVALID_OPTION``."""


class InvalidValueError(ValueError):
    """A value PUT cannot use: ``400 INVALID_VALUE``."""


def _go_number(value: float) -> float | int:
    """Go's JSON writes ``1.0`` as ``1``."""
    return int(value) if value.is_integer() and abs(value) < 1e21 else value


def statsd_host_key(host: str, port: int) -> str:
    """nsqd's ``statsd.HostKey(net.JoinHostPort(host, port))``."""
    joined = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return joined.replace(".", "_").replace(":", "_")


def expand_statsd_prefix(template: str, host: str, port: int) -> str:
    """``--statsd-prefix`` as nsqd uses it: every ``%s`` replaced by the host key of the
    broadcast address and HTTP port, and a ``.`` appended if missing ("" stays "")."""
    if not template:
        return ""
    prefix = template.replace("%s", statsd_host_key(host, port))
    return prefix if prefix.endswith(".") else prefix + "."


class RuntimeConfig:
    """The options of a running nsqd, with what ``PUT /config`` changed."""

    def __init__(
        self,
        options: Options,
        ports: Callable[[], tuple[int, int]],
        on_lookupd_change: Callable[[list[str]], None] | None = None,
    ) -> None:
        self.options = options
        self._ports = ports  # (tcp, http) as bound, known only once both listen
        self._changed: dict[str, object] = {}
        self.on_lookupd_change = on_lookupd_change

    def get(self, name: str) -> object:
        """The value of option ``name`` (a ``str`` is sent as plain text, anything else as
        JSON); InvalidOptionError if there is none."""
        if name in self._changed:
            return self._changed[name]
        entry = OPTIONS.get(name)
        if entry is None:
            raise InvalidOptionError(name)
        attribute, kind = entry
        value: Any = getattr(self.options, attribute)
        tcp_port, http_port = self._ports()
        match kind:
            case "duration":
                return round(value * 1_000_000_000)
            case "list":
                return list(value)
            case "floats":
                return [_go_number(v) for v in value]
            case "level":
                return LOG_LEVEL_NUMBERS.get(value, 0)
            case "tls_required":
                return TLS_REQUIRED_NUMBERS.get(value, 0)
            case "tls_version":
                return TLS_VERSION_NUMBERS.get(value, 0)
            case "tcp_port":
                return value or tcp_port
            case "http_port":
                return value or http_port
            case "statsd_prefix":
                return expand_statsd_prefix(str(value), self.options.broadcast_address, http_port)
            case _:
                return value

    def put(self, name: str, body: bytes) -> object:
        """Change option ``name`` from a PUT body; returns the new value.

        Raises:
            InvalidOptionError: not one nsqd changes at runtime.
            InvalidValueError: a body the option cannot take.
        """
        if name == "nsqlookupd_tcp_addresses":
            try:
                value = json.loads(body)
            except (ValueError, RecursionError) as exc:  # also bad UTF-8, too deep nesting
                raise InvalidValueError(name) from exc
            if value is not None and not (
                isinstance(value, list) and all(isinstance(v, str) for v in value)
            ):
                raise InvalidValueError(name)
            self._changed[name] = value  # JSON null stays null, as Go's nil slice
            if self.on_lookupd_change is not None:
                self.on_lookupd_change(list(value or []))
        elif name == "log_level":
            level = body.decode("utf-8", "replace").lower()
            if level not in LOG_LEVEL_NUMBERS:
                raise InvalidValueError(name)
            self._changed[name] = LOG_LEVEL_NUMBERS[level]
            logging.getLogger().setLevel(PYTHON_LOG_LEVELS[level])
        else:
            raise InvalidOptionError(name)
        return self.get(name)
