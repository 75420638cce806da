"""``--cluster-secret-file`` at start: both daemons read it once; a missing, unreadable or empty
file is one ``FATAL:`` line naming the path and exit 1; nsqd with a client-facing protection
(``--auth-http-address``, ``--tls-required``) and no credential refuses to start; without any
of these a daemon runs and says once, as a WARNING, that its cluster links are
unauthenticated."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from protocol.replication import MAGIC
from tests.daemons import cluster_secret_flag, pnsq_lookupd, pnsq_nsqd
from tests.integration.test_cli_errors import fatal_line, loopback, run

pytestmark = pytest.mark.integration

DAEMONS = ("nsqd", "lookupd")
#: a lookupd nobody listens on: enough to make an nsqd a cluster node
LOOKUPD = "--lookupd-tcp-address=127.0.0.1:1"
UNAUTHENTICATED = "cluster links are unauthenticated"


@pytest.mark.parametrize("module", DAEMONS)
def test_missing_secret_file_one_fatal_line_naming_it(module: str, tmp_path: Path) -> None:
    path = tmp_path / "no-such-secret"
    status, stderr = run(module, *loopback(tmp_path), f"--cluster-secret-file={path}")
    assert status == 1
    line = fatal_line(stderr)
    assert f"--cluster-secret-file={path} unreadable" in line
    assert "No such file or directory" in line


@pytest.mark.parametrize("module", DAEMONS)
def test_unreadable_secret_file_one_fatal_line_naming_it(module: str, tmp_path: Path) -> None:
    path = tmp_path / "a-directory"
    path.mkdir()
    status, stderr = run(module, *loopback(tmp_path), f"--cluster-secret-file={path}")
    assert status == 1
    assert f"--cluster-secret-file={path} unreadable" in fatal_line(stderr)


@pytest.mark.parametrize("module", DAEMONS)
@pytest.mark.parametrize("content", ["", "\n", "  \n\t\n"])
def test_empty_secret_file_one_fatal_line_naming_it(
    module: str, content: str, tmp_path: Path
) -> None:
    path = tmp_path / "secret"
    path.write_text(content)
    status, stderr = run(module, *loopback(tmp_path), f"--cluster-secret-file={path}")
    assert status == 1
    assert f"--cluster-secret-file={path} is empty" in fatal_line(stderr)


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--auth-http-address=127.0.0.1:1"], "--auth-http-address needs --cluster-secret-file"),
        (
            ["--tls-cert=c.pem", "--tls-key=k.pem", "--tls-required=tcp-https"],
            "--tls-required needs --cluster-secret-file",
        ),
        (
            ["--auth-http-address=127.0.0.1:1", "--tls-cert=c", "--tls-key=k", "--tls-required"],
            "--auth-http-address and --tls-required needs --cluster-secret-file",
        ),
    ],
)
def test_nsqd_protection_without_credential_refuses_to_start(
    flags: list[str], named: str, tmp_path: Path
) -> None:
    """A cluster node (one given a lookupd) serves replication: without the credential its
    replication link would be a way around AUTH and TLS."""
    status, stderr = run("nsqd", *loopback(tmp_path), LOOKUPD, *flags)
    assert status == 1
    line = fatal_line(stderr)
    assert "failed to instantiate nsqd" in line
    assert named in line
    assert UNAUTHENTICATED not in stderr


def test_nsqd_without_credential_warns_once(tmp_path: Path) -> None:
    node = pnsq_nsqd(tmp_path / "data", LOOKUPD).start()
    try:
        warnings = [line for line in node.log_text().splitlines() if UNAUTHENTICATED in line]
    finally:
        node.stop()
    assert len(warnings) == 1
    assert "WARNING" in warnings[0]
    assert "--cluster-secret-file" in warnings[0]


def test_a_standalone_nsqd_runs_as_go_nsqd_and_serves_no_replication(tmp_path: Path) -> None:
    """Standalone (no lookupd) there are no cluster links: AUTH needs no credential, nothing is
    warned, and the replication magic is refused like any unknown one (E_BAD_PROTOCOL), so
    a stranger's HELLO cannot read around AUTH."""
    node = pnsq_nsqd(tmp_path / "data", "--auth-http-address=127.0.0.1:1").start()
    try:
        assert UNAUTHENTICATED not in node.log_text()
        with socket.create_connection(("127.0.0.1", node.tcp_port), timeout=5) as peer:
            peer.sendall(MAGIC)
            reply = peer.recv(1024)
        assert b"E_BAD_PROTOCOL" in reply
    finally:
        node.stop()


def test_lookupd_without_credential_warns_once(tmp_path: Path) -> None:
    lookupd = pnsq_lookupd(tmp_path / "lookupd").start()
    try:
        warnings = [line for line in lookupd.log_text().splitlines() if UNAUTHENTICATED in line]
    finally:
        lookupd.stop()
    assert len(warnings) == 1
    assert "WARNING" in warnings[0]


def test_with_a_credential_both_start_without_the_warning(tmp_path: Path) -> None:
    secret = cluster_secret_flag(tmp_path / "secret")
    lookupd = pnsq_lookupd(tmp_path / "lookupd", secret).start()
    node = pnsq_nsqd(
        tmp_path / "data", secret, "--auth-http-address=127.0.0.1:1", "--tls-required=false"
    ).start()
    try:
        assert node.proc is not None
        assert node.proc.poll() is None
        assert UNAUTHENTICATED not in node.log_text()
        assert UNAUTHENTICATED not in lookupd.log_text()
    finally:
        node.stop()
        lookupd.stop()
