"""Every way nsqd and nsqlookupd fail at start tells the user why in one line and exits non-zero,
without a Python traceback: bad flags and flag values (Go's flag package: the cause, then the
usage, status 2), a port in use, an unusable data directory, a data directory held by another
nsqd. An unreachable lookupd is not fatal (nsqd retries, as Go's does): it says so in a line naming
the address and keeps serving."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemons import pnsq_nsqd

pytestmark = pytest.mark.integration

DAEMONS = ("nsqd", "lookupd")


def run(module: str, *flags: str, timeout: float = 20.0) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", module, *flags],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done.returncode, done.stderr


def fatal_line(stderr: str) -> str:
    """The one line that names the cause (log lines before it are the daemon's INFO)."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if "FATAL" in line]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def loopback(tmp_path: Path) -> list[str]:
    return [
        "--tcp-address=127.0.0.1:0",
        "--http-address=127.0.0.1:0",
        f"--data-path={tmp_path / 'data'}",
    ]


@pytest.mark.parametrize("module", DAEMONS)
def test_unknown_flag_names_it_then_usage_and_exits_2(module: str) -> None:
    status, stderr = run(module, "--no-such-flag=1")
    assert status == 2
    assert "Traceback" not in stderr
    assert stderr.splitlines()[0] == "flag provided but not defined: -no-such-flag"
    assert stderr.splitlines()[1].startswith("Usage of ")


@pytest.mark.parametrize(
    ("module", "flag", "first_line"),
    [
        (
            "nsqd",
            "--mem-queue-size=lots",
            'invalid value "lots" for flag -mem-queue-size: parse error',
        ),
        ("nsqd", "--msg-timeout=soon", 'invalid value "soon" for flag -msg-timeout: parse error'),
        (
            "lookupd",
            "--inactive-producer-timeout=x",
            'invalid value "x" for flag -inactive-producer-timeout: parse error',
        ),
    ],
)
def test_bad_flag_value_names_flag_and_value_and_exits_2(
    module: str, flag: str, first_line: str
) -> None:
    status, stderr = run(module, flag)
    assert status == 2
    assert "Traceback" not in stderr
    assert stderr.splitlines()[0] == first_line


def test_nsqd_inconsistent_options_one_fatal_line(tmp_path: Path) -> None:
    status, stderr = run("nsqd", *loopback(tmp_path), "--max-deflate-level=0")
    assert status == 1
    assert "max-deflate-level" in fatal_line(stderr)


@pytest.mark.parametrize("module", DAEMONS)
@pytest.mark.parametrize("which", ["tcp", "http"])
def test_port_in_use_one_fatal_line_naming_the_address(
    module: str, which: str, taken_port: int, tmp_path: Path
) -> None:
    flags = [*loopback(tmp_path), f"--{which}-address=127.0.0.1:{taken_port}"]
    status, stderr = run(module, *flags)
    assert status == 1
    line = fatal_line(stderr)
    assert f"listen (127.0.0.1:{taken_port}) failed - Address already in use" in line


@pytest.mark.parametrize("module", DAEMONS)
def test_data_path_that_is_a_file_one_fatal_line(module: str, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    status, stderr = run(module, *loopback(tmp_path), f"--data-path={blocker}")
    assert status == 1
    assert str(blocker) in fatal_line(stderr)


@pytest.mark.parametrize("module", DAEMONS)
def test_data_path_below_a_file_one_fatal_line(module: str, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    status, stderr = run(module, *loopback(tmp_path), f"--data-path={blocker / 'data'}")
    assert status == 1
    line = fatal_line(stderr)
    assert str(blocker) in line
    assert "Not a directory" in line


def test_lookupd_unreadable_metadata_one_fatal_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "nsqlookupd.meta.json").write_text("{not json")
    status, stderr = run("lookupd", *loopback(tmp_path))
    assert status == 1
    assert "not a valid metadata file" in fatal_line(stderr)


def test_nsqd_data_path_in_use_one_fatal_line(tmp_path: Path) -> None:
    first = pnsq_nsqd(tmp_path / "data").start()
    try:
        status, stderr = run("nsqd", *loopback(tmp_path))
    finally:
        first.stop()
    assert status == 1
    assert "in use (possibly by another nsqd)" in fatal_line(stderr)


def test_a_lookupd_address_set_at_runtime_without_a_port_is_one_error_line(
    tmp_path: Path,
) -> None:
    """PUT /config/nsqlookupd_tcp_addresses takes any strings, as nsqd's does; one that is no
    address is logged as nsqd logs a failed dial (ERROR, naming it), with no traceback."""
    node = pnsq_nsqd(tmp_path / "data").start()
    try:
        url = f"http://{node.http_address}/config/nsqlookupd_tcp_addresses"
        put = urllib.request.Request(url, b'["notanaddr"]', method="PUT")
        with urllib.request.urlopen(put, timeout=5) as reply:
            assert reply.read() == b'["notanaddr"]'
        deadline = time.monotonic() + 10
        while "LOOKUPD(notanaddr)" not in node.log_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        said = node.log_text()
        assert "ERROR: LOOKUPD(notanaddr): address notanaddr: missing port in address" in said
        assert "Traceback" not in said
    finally:
        node.stop()


def test_nsqd_lookupd_unreachable_logs_the_address_and_keeps_serving(tmp_path: Path) -> None:
    """Go's nsqd only retries an unreachable lookupd; so does pnsq's: an ERROR line naming the
    address, and the daemon stays up and answers."""
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{sock.getsockname()[1]}"
    node = pnsq_nsqd(tmp_path / "data", f"--lookupd-tcp-address={dead}").start()
    try:
        deadline = time.monotonic() + 10
        while f"LOOKUPD({dead})" not in node.log_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        errors = [line for line in node.log_text().splitlines() if f"LOOKUPD({dead})" in line]
        assert errors, node.log_text()
        assert "ERROR" in errors[0]
        assert "Traceback" not in node.log_text()
        assert node.proc is not None
        assert node.proc.poll() is None
        with urllib.request.urlopen(f"http://{node.http_address}/ping", timeout=5) as reply:
            assert reply.read() == b"OK"
    finally:
        assert node.stop() == 0
