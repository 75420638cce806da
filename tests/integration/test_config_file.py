"""``nsqd --config``: one TOML file given to the real Go nsqd 1.3.0 and to pnsq's nsqd; every
option in it reads the same from both (``GET /config/<name>``), flags given on the command line
win over the file, and a file nsqd cannot use stops both with status 1."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemons import GO_NSQD, Daemon, cluster_secret_flag, go_nsqd, pnsq_nsqd

# Every kind of option and every kind of value nsqd coerces: strings read as their flag reads
# them, integers counting milliseconds for durations, an integer for a boolean (true when 0),
# arrays for the repeatable options. tcp_address and deflate are given as flags too: the flag
# wins.
CONFIG = """
id = 77
tcp_address = "127.0.0.1:1"
nsqlookupd_tcp_addresses = ["127.0.0.1:9", "127.0.0.1:10"]
auth_http_addresses = "127.0.0.1:11,127.0.0.1:12"
msg_timeout = "90s"
max_req_timeout = 5000
sync_timeout = "3s"
mem_queue_size = "123"
max_output_buffer_size = 32768
snappy = 1
deflate = false
statsd_mem_stats = "false"
statsd_prefix = "test.%s"
tls_required = false
tls_min_version = "tls1.2"
log_level = "debug"
e2e_processing_latency_percentiles = [0.99, 0.95]
e2e_processing_latency_window_time = "2m"
not_an_option = 5
busy_poll = "50us"
"""

COMPARED = [
    "id",
    "tcp_address",
    "nsqlookupd_tcp_addresses",
    "auth_http_addresses",
    "msg_timeout",
    "max_req_timeout",
    "sync_timeout",
    "mem_queue_size",
    "max_output_buffer_size",
    "snappy",
    "deflate",
    "statsd_mem_stats",
    "tls_required",
    "tls_min_version",
    "log_level",
    "e2e_processing_latency_percentiles",
    "e2e_processing_latency_window_time",
]


def _config(daemon: Daemon, name: str) -> str:
    """``GET /config/<name>``: JSON, except a string option's text (as nsqd answers it)."""
    url = f"http://{daemon.http_address}/config/{name}"
    with urllib.request.urlopen(url, timeout=5) as reply:
        return str(reply.read().decode())


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Daemon]]:
    work = tmp_path_factory.mktemp("config")
    path = work / "nsqd.cfg"
    path.write_text(CONFIG)
    started: dict[str, Daemon] = {}
    try:
        for name, make in (("pnsq", pnsq_nsqd), ("go", go_nsqd)):
            flags = [f"--config={path}", "--deflate=true"]
            if name == "pnsq":  # auth_http_addresses in the file needs a cluster credential
                flags.append(cluster_secret_flag(work / "cluster.secret"))
            daemon = make(work / name, *flags)
            started[name] = daemon.start()
        yield started
    finally:
        for daemon in started.values():
            daemon.stop()


@pytest.mark.parametrize("name", COMPARED)
def test_an_option_from_the_file_reads_as_go_nsqds(daemons: dict[str, Daemon], name: str) -> None:
    assert _config(daemons["pnsq"], name) == _config(daemons["go"], name)


def test_the_file_sets_what_the_command_line_does_not(daemons: dict[str, Daemon]) -> None:
    pnsq = daemons["pnsq"]
    assert json.loads(_config(pnsq, "id")) == 77
    assert json.loads(_config(pnsq, "msg_timeout")) == 90 * 10**9
    assert json.loads(_config(pnsq, "max_req_timeout")) == 5 * 10**9  # an integer: ms
    assert json.loads(_config(pnsq, "mem_queue_size")) == 123
    assert json.loads(_config(pnsq, "snappy")) is False  # nsqd's reading of snappy = 1
    assert json.loads(_config(pnsq, "deflate")) is True  # --deflate=true on the command line
    assert _config(pnsq, "tcp_address") == "127.0.0.1:0"  # so does --tcp-address
    lookupds = json.loads(_config(pnsq, "nsqlookupd_tcp_addresses"))
    assert lookupds == ["127.0.0.1:9", "127.0.0.1:10"]
    assert _config(pnsq, "statsd_prefix").startswith("test.127_0_0_1_")  # %s: host_port
    assert json.loads(_config(pnsq, "busy_poll")) == 50_000  # pnsq's own; Go nsqd ignores it


def _start_fails(argv: list[str]) -> tuple[int, str]:
    done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
    return done.returncode, done.stderr.decode(errors="replace")


@pytest.mark.parametrize(
    ("text", "go_says", "pnsq_says"),
    [
        ("msg_timeout = [", "failed to load config file", "failed to load config file"),
        ("mem_queue_size = 1.5", "failed to coerce", "mem_queue_size"),
        ("msg_timeout = 1.5", "failed to coerce", "msg_timeout"),
    ],
)
def test_a_file_nsqd_cannot_use_stops_both(
    tmp_path: Path, text: str, go_says: str, pnsq_says: str
) -> None:
    path = tmp_path / "nsqd.cfg"
    path.write_text(text + "\n")
    common = [f"--config={path}", f"--data-path={tmp_path}", "--tcp-address=127.0.0.1:0"]
    status, said = _start_fails([str(GO_NSQD), *common, "--http-address=127.0.0.1:0"])
    assert status == 1
    assert go_says in said
    status, said = _start_fails(
        [sys.executable, "-m", "nsqd", *common, "--http-address=127.0.0.1:0"]
    )
    assert status == 1
    assert said.startswith("FATAL: ")
    assert pnsq_says in said
    assert "Traceback" not in said
