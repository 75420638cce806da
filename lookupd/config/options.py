"""nsqlookupd's options and command line: nsqlookupd 1.3.0's flags (names, defaults, usage as
``nsqlookupd -h`` prints them) in Go flag syntax, plus pnsq's ``--data-path`` and youzan's
``--cluster-id`` / ``--cluster-leadership-addresses`` (HA on etcd, :mod:`lookupd.ha.leadership`).

Durations are float seconds. ``--config`` reads a TOML file whose keys are the option names
(``tcp_address``, ``inactive_producer_timeout = "5m"``); flags given on the command line win.
Errors: :class:`~pnsq._goflag.flags.FlagError` / :class:`~pnsq._goflag.flags.HelpRequested` for the
command
line (exit 2 / 0), :class:`OptionsError` for values refused at start-up (exit 1).
"""

from __future__ import annotations

import socket
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pnsq._goflag.addresses import parse_host_port
from pnsq._goflag.flags import FlagSet, FlagValueError, ParseResult

LOG_LEVELS = ("debug", "info", "warn", "error", "fatal")
_LOG_LEVEL_TEXT = {"debug": "DEBUG", "info": "INFO", "warn": "WARNING", "error": "ERROR"}
_LOG_LEVEL_TEXT["fatal"] = "FATAL"


class OptionsError(ValueError):
    """An option value refused at start-up."""


@dataclass(frozen=True, slots=True)
class Options:
    """nsqlookupd's configuration; ``Options()`` holds nsqlookupd's defaults for this host."""

    show_version: bool = False
    config: str = ""
    log_level: str = "info"
    log_prefix: str = "[nsqlookupd] "
    verbose: bool = False  # deprecated, no effect
    tcp_address: str = "0.0.0.0:4160"
    http_address: str = "0.0.0.0:4161"
    broadcast_address: str = field(default_factory=socket.gethostname)
    inactive_producer_timeout: float = 300.0
    tombstone_lifetime: float = 45.0
    data_path: str = ""  # pnsq: where the topic metadata lives ("": nowhere, kept in memory)
    heartbeat_timeout: float = 2.0  # pnsq: a node silent this long is dead (failover)
    replica_replace_after: float = 300.0  # pnsq: a replica dead this long is placed elsewhere
    auto_balance: bool = True  # pnsq (youzan's behaviour): even out copies and leaderships
    cluster_id: str = ""  # youzan: HA mode (with the next): the cluster's key prefix in etcd
    cluster_leadership_addresses: str = ""  # youzan: etcd v3 endpoints, comma-separated
    cluster_secret_file: str = ""  # pnsq: the cluster credential (pnsq._netio.cluster_secret)

    @property
    def etcd_endpoints(self) -> list[str]:
        """``--cluster-leadership-addresses`` as URLs (``http://`` added when missing); empty
        without HA."""
        found = [a.strip() for a in self.cluster_leadership_addresses.split(",") if a.strip()]
        return [a if "://" in a else f"http://{a}" for a in found]

    def tcp_host_port(self) -> tuple[str, int]:
        """``--tcp-address`` as ``(host, port)``."""
        return parse_host_port(self.tcp_address)

    def http_host_port(self) -> tuple[str, int]:
        """``--http-address`` as ``(host, port)``."""
        return parse_host_port(self.http_address)

    @property
    def data_directory(self) -> Path | None:
        """``--data-path`` resolved; None without one (nothing is written)."""
        return Path(self.data_path).resolve() if self.data_path else None


_FLAGS = (
    # name, kind, usage (nsqlookupd 1.3.0's wording)
    ("config", "string", "path to config file"),
    ("version", "bool", "print version string"),
    ("log-level", "log-level", "set log verbosity: debug, info, warn, error, or fatal"),
    ("log-prefix", "string", "log message prefix"),
    ("verbose", "bool", "[deprecated] has no effect, use --log-level"),
    ("tcp-address", "string", "<addr>:<port> to listen on for TCP clients"),
    ("http-address", "string", "<addr>:<port> to listen on for HTTP clients"),
    (
        "broadcast-address",
        "string",
        "address of this lookupd node, (default to the OS hostname)",
    ),
    (
        "inactive-producer-timeout",
        "duration",
        "duration of time a producer will remain in the active list since its last ping",
    ),
    (
        "tombstone-lifetime",
        "duration",
        "duration of time a producer will remain tombstoned if registration remains",
    ),
    (
        "data-path",
        "string",
        "[pnsq] path to store the topic metadata (partition placement); none: kept in memory",
    ),
    (
        "heartbeat-timeout",
        "duration",
        "[pnsq] a node silent this long is dead: its leaderships move to in-sync replicas",
    ),
    (
        "replica-replace-after",
        "duration",
        "[pnsq] a replica dead this long is replaced by a new one on a live node",
    ),
    (
        "auto-balance",
        "bool",
        "[pnsq] move replicas and leaderships until every node holds and leads within one of "
        "the mean (/cluster/balance switches it at run time)",
    ),
    ("cluster-id", "string", "the cluster id used for separating different nsq cluster"),
    (
        "cluster-leadership-addresses",
        "string",
        "cluster leadership server list (etcd v3 endpoints, comma-separated: "
        "http://127.0.0.1:2379): lookupds elect a leader and keep the metadata there",
    ),
    (
        "cluster-secret-file",
        "string",
        "[pnsq] path to a file holding the cluster's shared secret: nsqd nodes prove they hold"
        " it on lookupd's cluster-control endpoints",
    ),
)


def attribute_name(flag: str) -> str:
    """The :class:`Options` attribute of ``--flag``."""
    return "show_version" if flag == "version" else flag.replace("-", "_")


def _set_log_level(text: str, _current: str) -> str:
    level = text.lower()
    if level not in LOG_LEVELS:
        raise FlagValueError(f"invalid log level '{text}' (debug, info, warn, error, fatal)")
    return level


def lookupd_flagset(defaults: Options | None = None) -> FlagSet:
    """nsqlookupd's flags, with defaults from ``defaults`` (nsqlookupd's own when None)."""
    base = Options() if defaults is None else defaults
    flags = FlagSet("nsqlookupd")
    for name, kind, usage in _FLAGS:
        default = getattr(base, attribute_name(name))
        if kind == "string":
            flags.add_string(name, default, usage)
        elif kind == "bool":
            flags.add_bool(name, default, usage)
        elif kind == "duration":
            flags.add_duration(name, default, usage)
        else:
            text = _LOG_LEVEL_TEXT.__getitem__
            flags.add_var(name, default, usage, _set_log_level, text=text, zero_text="invalid")
    return flags


def _from_config(path: str) -> Options:
    """Defaults overridden by a TOML config file (each value read as its flag would read it)."""
    try:
        with Path(path).open("rb") as handle:
            document = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise OptionsError(f"failed to load config file {path} - {exc}") from exc
    flags = lookupd_flagset()
    values: dict[str, Any] = dict(flags.defaults())
    for key, value in document.items():
        name = key.replace("_", "-")
        flag = flags.lookup(name)
        if flag is None or name in ("config", "version"):
            continue
        text = str(value).lower() if isinstance(value, bool) else str(value)
        try:
            values[name] = flag.setter(text, values[name])
        except FlagValueError as exc:
            raise OptionsError(f"config file {path}: {key}: {exc}") from None
    return Options(**{attribute_name(name): values[name] for name, _, _ in _FLAGS})


def options_from_flags(result: ParseResult) -> Options:
    """Build and check :class:`Options` from a parse of :func:`lookupd_flagset`."""
    config = result.get_str("config")
    if config:
        base = _from_config(config)
        result = lookupd_flagset(base).parse(
            [f"-{name}={_flag_text(result.values[name])}" for name in sorted(result.explicit)]
        )
    values: dict[str, Any] = {attribute_name(name): result.values[name] for name, _, _ in _FLAGS}
    options = Options(**values)
    return validate_options(options)


def _flag_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value!r}s"
    return str(value)


def validate_options(options: Options) -> Options:
    """Start-up checks: the listen addresses must be ``host:port``."""
    if options.show_version:
        return options
    for flag in ("tcp-address", "http-address"):
        try:
            parse_host_port(getattr(options, attribute_name(flag)))
        except ValueError as exc:
            raise OptionsError(f"--{flag}: {exc}") from None
    if options.inactive_producer_timeout <= 0:
        raise OptionsError("--inactive-producer-timeout must be positive")
    if options.heartbeat_timeout <= 0:
        raise OptionsError("--heartbeat-timeout must be positive")
    if options.replica_replace_after <= 0:
        raise OptionsError("--replica-replace-after must be positive")
    if bool(options.cluster_id) != bool(options.etcd_endpoints):
        raise OptionsError(
            "--cluster-id and --cluster-leadership-addresses go together (HA on etcd)"
        )
    if options.cluster_id and not all(c.isalnum() or c in "-_." for c in options.cluster_id):
        raise OptionsError("--cluster-id: letters, digits, '-', '_' and '.' only")
    return options


def parse_lookupd_args(argv: Sequence[str]) -> Options:
    """Parse nsqlookupd's command line (without the program name)."""
    return options_from_flags(lookupd_flagset().parse(argv))
