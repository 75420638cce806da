"""TLS, snappy and deflate negotiated in IDENTIFY: the real clients through every mode, and the
exact upgrade sequence checked frame by frame against the Go nsqd 1.3.0 and pnsq alike.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemons import Daemon, go_nsqd, pnsq_nsqd
from tests.interop.drivers import Driver
from tests.tlscerts import Certs, make_certs
from tests.upgradeclient import ERROR, MESSAGE, OK, RESPONSE, UpgradingClient, command, identify

pytestmark = pytest.mark.integration

STREAM_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"
SYNC_FLUSH = b"\x00\x00\xff\xff"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def tls_flags(certs: Certs) -> tuple[str, ...]:
    """A certificate; nsqd then also serves HTTPS, on a free port here."""
    return (
        f"--tls-cert={certs.server_cert}",
        f"--tls-key={certs.server_key}",
        "--https-address=127.0.0.1:0",
    )


class TCPReadyDaemon(Daemon):
    """Ready when the TCP port accepts: with --tls-required=true nsqd's plain HTTP answers 403
    (so /ping cannot tell)."""

    def _ping(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.tcp_port), timeout=1).close()
        except OSError:
            return False
        return True


def _daemon(kind: str, path: Path, *flags: str) -> Daemon:
    made = (go_nsqd if kind == "nsqd-1.3.0" else pnsq_nsqd)(path, *flags)
    return TCPReadyDaemon(made.argv, made.data_path, made.log_path)


@pytest.fixture(scope="module", params=["nsqd-1.3.0", "pnsq"])
def tls_daemon(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, certs: Certs
) -> Iterator[Daemon]:
    """nsqd with a certificate and the default --snappy / --deflate (both on)."""
    path = tmp_path_factory.mktemp(request.param) / "data"
    daemon = _daemon(request.param, path, *tls_flags(certs)).start()
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture(scope="module")
def pnsq_tls(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[Daemon]:
    daemon = pnsq_nsqd(tmp_path_factory.mktemp("pnsq-tls") / "data", *tls_flags(certs)).start()
    try:
        yield daemon
    finally:
        daemon.stop()


def reply_json(frame: tuple[int, bytes]) -> dict[str, object]:
    kind, data = frame
    assert kind == RESPONSE, data
    result: dict[str, object] = json.loads(data)
    return result


def pub(topic: bytes, body: bytes) -> bytes:
    return command(b"PUB " + topic, body)


# --------------------------------------------------------------------------- real clients

MODES: dict[str, dict[str, bool]] = {
    "tls": {"tls": True},
    "snappy": {"snappy": True},
    "deflate": {"deflate": True},
    "tls+snappy": {"tls": True, "snappy": True},
    "tls+deflate": {"tls": True, "deflate": True},
}
UPGRADE_LOG = {
    "tls": "upgrading connection to TLS",
    "snappy": "upgrading connection to snappy",
    "deflate": "upgrading connection to deflate",
}


@pytest.mark.interop
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("client", ["pynsq", "go-nsq"])
def test_messages_flow_both_ways(pnsq_tls: Daemon, client: str, mode: str) -> None:
    driver = Driver(client)
    flags = driver.conn_flags(**MODES[mode])
    topic = f"up-{client}-{mode}".replace("+", "-")
    log_start = len(pnsq_tls.log_text())
    publish_mode = "mpub" if client == "go-nsq" else "pub"
    published = driver.run(
        driver.pub_argv(pnsq_tls.tcp_address, topic, 300, publish_mode, extra=flags)
    )
    assert published.returncode == 0, published.stderr
    assert published.summary["published"] == 300
    consumed = driver.run(
        driver.sub_argv(pnsq_tls.tcp_address, topic, "ch", 300, timeout=30, extra=flags)
    )
    assert consumed.returncode == 0, consumed.stderr
    assert {d["body"] for d in consumed.deliveries} == {f"msg-{i}" for i in range(300)}
    assert len(consumed.deliveries) == 300
    if client == "pynsq":  # what the IDENTIFY reply granted, as pynsq saw it
        for run in (published, consumed):
            granted = run.first("connected")["connected"]
            assert isinstance(granted, dict)
            features = MODES[mode]
            assert granted["identify"] == {
                "tls_v1": features.get("tls", False),
                "snappy": features.get("snappy", False),
                "deflate": features.get("deflate", False),
                "deflate_level": 6,
                "auth_required": False,
            }
    log = pnsq_tls.log_text()[log_start:]
    for feature in mode.split("+"):  # one upgrade per connection: producer and consumer
        assert log.count(UPGRADE_LOG[feature]) == 2, log


@pytest.mark.interop
@pytest.mark.parametrize("mode", ["snappy", "deflate", "tls+snappy"])
def test_bodies_larger_than_a_snappy_block(pnsq_tls: Daemon, mode: str) -> None:
    """Bodies over 64 KiB span several snappy chunks (and many TLS records) both ways."""
    driver = Driver("go-nsq")
    flags = driver.conn_flags(**MODES[mode])
    topic = f"big-{mode}".replace("+", "-")
    prefix = "x" * 70_000
    argv = driver.pub_argv(pnsq_tls.tcp_address, topic, 20, "mpub", extra=flags)
    published = driver.run([*argv, "-prefix", prefix])
    assert published.returncode == 0, published.stderr
    consumed = driver.run(
        driver.sub_argv(pnsq_tls.tcp_address, topic, "ch", 20, timeout=30, extra=flags)
    )
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(d["body"] for d in consumed.deliveries) == sorted(
        f"{prefix}{i}" for i in range(20)
    )


@pytest.mark.interop
@pytest.mark.parametrize("client", ["pynsq", "go-nsq"])
def test_heartbeats_through_tls_and_compression(pnsq_tls: Daemon, client: str) -> None:
    """Heartbeats go out compressed and the client's NOPs come back decoded: an idle consumer
    on TLS + snappy stays connected, then still gets its message."""
    driver = Driver(client)
    flags = driver.conn_flags(tls=True, snappy=True)
    topic = f"hb-{client}"
    consumer = driver.start(
        driver.sub_argv(
            pnsq_tls.tcp_address, topic, "ch", 1, heartbeat=1, idle=3.5, timeout=20, extra=flags
        )
    )
    try:
        time.sleep(4.0)
        published = driver.run(driver.pub_argv(pnsq_tls.tcp_address, topic, 1, extra=flags))
        assert published.returncode == 0, published.stderr
        consumed = Driver.finish(consumer)
    finally:
        driver.cleanup()
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.first("idle_ok")["idle_ok"] is True, consumed.lines
    assert [d["body"] for d in consumed.deliveries] == ["msg-0"]


# --------------------------------------------------------------------------- exact sequences


def test_tls_then_snappy(tls_daemon: Daemon) -> None:
    with UpgradingClient(tls_daemon.tcp_port) as c:
        c.send(identify(tls_v1=True, snappy=True))
        reply = reply_json(c.read_frame())  # plain
        assert (reply["tls_v1"], reply["snappy"], reply["deflate"]) == (True, True, False)
        c.start_tls()
        assert c.read_frame() == OK  # over TLS
        c.start_snappy()
        assert c.read_frame() == OK  # over TLS, snappy-compressed
        assert c.raw_received.startswith(STREAM_IDENTIFIER)
        c.send(pub(b"tls-snappy", b"hello") + pub(b"tls-snappy", b"x" * 100_000))
        assert c.read_frame() == OK
        assert c.read_frame() == OK
        c.send(command(b"SUB tls-snappy ch") + command(b"RDY 5"))
        assert c.read_frame() == OK
        bodies = {c.read_frame()[1][26:] for _ in range(2)}
        assert bodies == {b"hello", b"x" * 100_000}


def test_deflate_level_is_clamped_and_every_flush_is_a_sync_flush(tls_daemon: Daemon) -> None:
    with UpgradingClient(tls_daemon.tcp_port) as c:
        c.send(identify(deflate=True, deflate_level=9))
        reply = reply_json(c.read_frame())
        assert (reply["deflate"], reply["deflate_level"], reply["max_deflate_level"]) == (
            True,
            6,
            6,
        )
        c.start_deflate()
        assert c.read_frame() == OK
        c.wait_raw_suffix(SYNC_FLUSH)  # times out if the OK is not followed by a sync flush
        c.send(pub(b"deflated", b"y" * 5000))
        assert c.read_frame() == OK
        c.send(command(b"SUB deflated ch") + command(b"RDY 1"))
        assert c.read_frame() == OK
        kind, data = c.read_frame()
        assert (kind, data[26:]) == (MESSAGE, b"y" * 5000)


def test_tls_then_deflate(tls_daemon: Daemon) -> None:
    with UpgradingClient(tls_daemon.tcp_port) as c:
        c.send(identify(tls_v1=True, deflate=True, deflate_level=1))
        reply = reply_json(c.read_frame())
        assert (reply["tls_v1"], reply["deflate"], reply["deflate_level"]) == (True, True, 1)
        c.start_tls()
        assert c.read_frame() == OK
        c.start_deflate(level=1)
        assert c.read_frame() == OK
        c.send(pub(b"tls-deflate", b"z"))
        assert c.read_frame() == OK


def test_bytes_pipelined_after_identify_are_dropped(tls_daemon: Daemon) -> None:
    """nsqd builds a new reader for the upgraded stream: what was buffered is lost."""
    with UpgradingClient(tls_daemon.tcp_port) as c:
        c.send(identify(deflate=True) + pub(b"pipelined", b"lost"))
        assert reply_json(c.read_frame())["deflate"] is True
        c.start_deflate()
        assert c.read_frame() == OK
        c.send(command(b"NOP") + pub(b"pipelined", b"kept"))
        assert c.read_frame() == OK
        c.send(command(b"SUB pipelined ch") + command(b"RDY 5"))
        assert c.read_frame() == OK
        kind, data = c.read_frame()
        assert (kind, data[26:]) == (MESSAGE, b"kept")
        assert not c.closed_by_server(0.3)


def test_snappy_and_deflate_together_are_refused(tls_daemon: Daemon) -> None:
    with UpgradingClient(tls_daemon.tcp_port) as c:
        c.send(identify(snappy=True, deflate=True))
        assert c.read_frame() == (
            ERROR,
            b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression",
        )
        assert c.closed_by_server()


def test_no_upgrade_without_feature_negotiation(tls_daemon: Daemon) -> None:
    with UpgradingClient(tls_daemon.tcp_port) as c:
        c.send(command(b"IDENTIFY", json.dumps({"tls_v1": True, "snappy": True}).encode()))
        assert c.read_frame() == OK
        c.send(pub(b"plain", b"p"))
        assert c.read_frame() == OK


# --------------------------------------------------------------------------- options


@pytest.mark.parametrize("kind", ["nsqd-1.3.0", "pnsq"])
def test_compression_can_be_switched_off(tmp_path: Path, kind: str) -> None:
    daemon = _daemon(kind, tmp_path / "data", "--snappy=false", "--deflate=false").start()
    try:
        with UpgradingClient(daemon.tcp_port) as c:
            c.send(identify(snappy=True))
            reply = reply_json(c.read_frame())
            assert (reply["snappy"], reply["deflate"], reply["tls_v1"]) == (False, False, False)
            c.send(pub(b"off", b"plain"))  # no upgrade happened
            assert c.read_frame() == OK
    finally:
        daemon.stop()


@pytest.mark.parametrize("required", ["true", "tcp-https"])
@pytest.mark.parametrize("kind", ["nsqd-1.3.0", "pnsq"])
def test_tls_required(tmp_path: Path, certs: Certs, kind: str, required: str) -> None:
    """Both values require TLS on TCP: "tcp-https" spares only the HTTP API (nsqd 1.3.0)."""
    daemon = _daemon(kind, tmp_path / "data", *tls_flags(certs), f"--tls-required={required}")
    daemon.start()
    try:
        with UpgradingClient(daemon.tcp_port) as c:
            c.send(pub(b"secure", b"no"))
            assert c.read_frame() == (
                ERROR,
                b"E_INVALID cannot PUB in current state (TLS required)",
            )
            assert c.closed_by_server()
        with UpgradingClient(daemon.tcp_port) as c:
            c.send(identify())  # IDENTIFY is always allowed, without TLS it changes nothing
            assert reply_json(c.read_frame())["tls_v1"] is False
            c.send(command(b"NOP"))
            assert c.read_frame() == (
                ERROR,
                b"E_INVALID cannot NOP in current state (TLS required)",
            )
        with UpgradingClient(daemon.tcp_port) as c:
            c.send(identify(tls_v1=True))
            assert reply_json(c.read_frame())["tls_v1"] is True
            c.start_tls()
            assert c.read_frame() == OK
            c.send(pub(b"secure", b"yes"))
            assert c.read_frame() == OK
    finally:
        daemon.stop()


def _handshake_and_read(c: UpgradingClient) -> None:
    c.start_tls()  # TLS 1.3: the server's refusal may only show on the first read
    c.read_frame()


@pytest.mark.parametrize("kind", ["nsqd-1.3.0", "pnsq"])
def test_client_certificate_required(tmp_path: Path, certs: Certs, kind: str) -> None:
    daemon = _daemon(
        kind,
        tmp_path / "data",
        *tls_flags(certs),
        "--tls-client-auth-policy=require-verify",
        f"--tls-root-ca-file={certs.ca}",
    ).start()
    try:
        with UpgradingClient(daemon.tcp_port) as c:
            c.send(identify(tls_v1=True))
            reply_json(c.read_frame())
            with pytest.raises((ssl.SSLError, EOFError, ConnectionError)):
                _handshake_and_read(c)
        with UpgradingClient(daemon.tcp_port) as c:
            c.send(identify(tls_v1=True))
            reply_json(c.read_frame())
            c.start_tls(str(certs.client_cert), str(certs.client_key), cafile=str(certs.ca))
            assert c.read_frame() == OK
            c.send(pub(b"mutual", b"ok"))
            assert c.read_frame() == OK
    finally:
        daemon.stop()


@pytest.mark.parametrize("kind", ["nsqd-1.3.0", "pnsq"])
def test_unreadable_certificate_is_fatal_at_start(tmp_path: Path, kind: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    missing = tmp_path / "missing.pem"
    argv = _daemon(kind, data, f"--tls-cert={missing}", f"--tls-key={missing}").argv
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=data, check=False)
    assert proc.returncode == 1, proc.stderr
    assert "failed to build TLS config" in proc.stderr
