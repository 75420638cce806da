"""nsqlookupd's command line: Go flag syntax, nsqlookupd 1.3.0's flags and usage text (checked
against the real binary when scripts/setup built it), --config, and start-up checks."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from lookupd.config.options import Options, OptionsError, lookupd_flagset, parse_lookupd_args
from pnsq._goflag.flags import FlagError, HelpRequested
from tests.daemons import NSQLOOKUPD


def test_defaults_are_nsqlookupds() -> None:
    options = parse_lookupd_args([])
    assert options == Options()
    assert (options.tcp_address, options.http_address) == ("0.0.0.0:4160", "0.0.0.0:4161")
    assert (options.inactive_producer_timeout, options.tombstone_lifetime) == (300.0, 45.0)
    assert options.broadcast_address == socket.gethostname()
    assert options.log_prefix == "[nsqlookupd] "


def test_go_flag_syntax() -> None:
    options = parse_lookupd_args(
        [
            "-tcp-address=127.0.0.1:0",
            "--http-address",
            "127.0.0.1:0",
            "--verbose",
            "-inactive-producer-timeout=1m30s",
            "--tombstone-lifetime=500ms",
            "--log-level=WARN",
            "--data-path=/tmp/x",
        ]
    )
    assert options.tcp_host_port() == ("127.0.0.1", 0)
    assert options.http_host_port() == ("127.0.0.1", 0)
    assert options.verbose is True
    assert options.inactive_producer_timeout == 90.0
    assert options.tombstone_lifetime == 0.5
    assert options.log_level == "warn"
    assert options.data_directory == Path("/tmp/x")
    assert parse_lookupd_args([]).data_directory is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nope"], "flag provided but not defined: -nope"),
        (["--tombstone-lifetime=5"], 'invalid value "5" for flag -tombstone-lifetime: parse error'),
        (
            ["--log-level=loud"],
            "invalid value \"loud\" for flag -log-level: "
            "invalid log level 'loud' (debug, info, warn, error, fatal)",
        ),
        (["--tcp-address"], "flag needs an argument: -tcp-address"),
    ],
)  # fmt: skip
def test_bad_flags(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError) as caught:
        parse_lookupd_args(argv)
    assert str(caught.value) == message


def test_help() -> None:
    with pytest.raises(HelpRequested):
        parse_lookupd_args(["-h"])


def test_bad_address_is_refused_at_start_up() -> None:
    with pytest.raises(OptionsError, match="--tcp-address"):
        parse_lookupd_args(["--tcp-address=nope"])


def test_config_file_then_flags(tmp_path: Path) -> None:
    config = tmp_path / "nsqlookupd.cfg"
    config.write_text(
        'tcp_address = "127.0.0.1:4260"\ninactive_producer_timeout = "10s"\nverbose = true\n'
    )
    options = parse_lookupd_args([f"--config={config}", "--inactive-producer-timeout=20s"])
    assert options.tcp_address == "127.0.0.1:4260"
    assert options.inactive_producer_timeout == 20.0  # the flag wins
    assert options.verbose is True
    config.write_text("tcp_address = [")
    with pytest.raises(OptionsError, match="failed to load config file"):
        parse_lookupd_args([f"--config={config}"])


def test_usage_matches_go_nsqlookupd() -> None:
    assert NSQLOOKUPD.exists(), f"{NSQLOOKUPD} missing: scripts/setup builds Go nsqlookupd"
    go = subprocess.run(
        [str(NSQLOOKUPD), "-h"], capture_output=True, text=True, timeout=10, check=False
    ).stderr
    ours = lookupd_flagset().usage()
    data_path = (
        "  -data-path string\n    \t[pnsq] path to store the topic metadata (partition placement);"
        " none: kept in memory\n"
    )
    pnsq_only = [
        data_path,
        "  -heartbeat-timeout duration\n    \t[pnsq] a node silent this long is dead: its"
        " leaderships move to in-sync replicas (default 2s)\n",
        "  -replica-replace-after duration\n    \t[pnsq] a replica dead this long is replaced by"
        " a new one on a live node (default 5m0s)\n",
        "  -auto-balance\n    \t[pnsq] move replicas and leaderships until every node holds and"
        " leads within one of the mean (/cluster/balance switches it at run time) (default"
        " true)\n",
        # youzan's HA flags (lookupd/ha/leadership.py)
        "  -cluster-id string\n    \tthe cluster id used for separating different nsq cluster\n",
        "  -cluster-leadership-addresses string\n    \tcluster leadership server list (etcd v3"
        " endpoints, comma-separated: http://127.0.0.1:2379): lookupds elect a leader and keep"
        " the metadata there\n",
        "  -cluster-secret-file string\n    \t[pnsq] path to a file holding the cluster's shared"
        " secret: nsqd nodes prove they hold it on lookupd's cluster-control endpoints\n",
    ]
    for line in pnsq_only:
        assert line in ours
        ours = ours.replace(line, "")
    assert ours == go
