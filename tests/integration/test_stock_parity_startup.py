"""``--version`` and the start-up log lines as Go nsqd / nsqlookupd 1.3.0 print them, checked
side by side with the real binaries (the lines' text after the log prefix; pnsq keeps its own
prefix, ``[nsqd] <date> INFO: ``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from nsqd import __version__ as nsqd_version
from tests.daemons import GO_NSQD, NSQLOOKUPD, Daemon, go_lookupd, go_nsqd, pnsq_lookupd, pnsq_nsqd
from tests.tlscerts import make_certs

pytestmark = pytest.mark.integration

_PREFIX = re.compile(r"^\[(nsqd|nsqlookupd)\] \S+ \S+ INFO: ")


def messages(daemon: Daemon) -> list[str]:
    """The INFO lines' text, without the prefix."""
    return [_PREFIX.sub("", line) for line in daemon.log_text().splitlines() if _PREFIX.match(line)]


@pytest.mark.parametrize(
    ("name", "go", "module"), [("nsqd", GO_NSQD, "nsqd"), ("nsqlookupd", NSQLOOKUPD, "lookupd")]
)
def test_version_is_gos_shape(name: str, go: Path, module: str) -> None:
    def version(argv: list[str]) -> str:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
        return done.stdout

    assert re.fullmatch(
        rf"{name} v1\.3\.0 \(built w/go[0-9.]+\)\n", version([str(go), "--version"])
    )
    ours = version([sys.executable, "-m", module, "--version"])
    assert ours == f"{name} v1.3.0 (built w/pnsq-{nsqd_version})\n"


@pytest.mark.parametrize("which", ["go-nsqd", "pnsq"])
def test_nsqd_start_up_lines(tmp_path: Path, which: str) -> None:
    certs = make_certs(tmp_path / "tls")
    make = go_nsqd if which == "go-nsqd" else pnsq_nsqd
    daemon = make(
        tmp_path / "nsqd",
        f"--tls-cert={certs.server_cert}",
        f"--tls-key={certs.server_key}",
        "--https-address=127.0.0.1:0",
    ).start()
    try:
        lines = messages(daemon)
    finally:
        daemon.stop()
    assert re.fullmatch(r"nsqd v1\.3\.0 \(built w/(go[0-9.]+|pnsq-\S+)\)", lines[0]), lines
    listening = sorted(line for line in lines if ": listening on " in line)
    assert [re.sub(r":\d+$", ":PORT", line) for line in listening] == [
        "HTTP: listening on 127.0.0.1:PORT",
        "HTTPS: listening on 127.0.0.1:PORT",
        "TCP: listening on 127.0.0.1:PORT",
    ]
    assert f"TCP: listening on {daemon.tcp_address}" in listening
    assert f"HTTP: listening on {daemon.http_address}" in listening


@pytest.mark.parametrize("which", ["go-nsqlookupd", "pnsq"])
def test_nsqlookupd_start_up_lines(tmp_path: Path, which: str) -> None:
    make = go_lookupd if which == "go-nsqlookupd" else pnsq_lookupd
    daemon = make(tmp_path / "lookupd").start()
    try:
        lines = messages(daemon)
    finally:
        daemon.stop()
    assert re.fullmatch(r"nsqlookupd v1\.3\.0 \(built w/(go[0-9.]+|pnsq-\S+)\)", lines[0]), lines
    listening = sorted(line for line in lines if ": listening on " in line)
    assert listening == sorted(
        [f"TCP: listening on {daemon.tcp_address}", f"HTTP: listening on {daemon.http_address}"]
    )
