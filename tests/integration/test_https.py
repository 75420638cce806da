"""--https-address and --tls-required on the HTTP side, against Go nsqd 1.3.0 and pnsq."""

from __future__ import annotations

import json
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemons import Daemon, go_nsqd, pnsq_nsqd
from tests.tlscerts import Certs, make_certs

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module", params=["go-nsqd", "pnsq"])
def daemon(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, certs: Certs
) -> Iterator[Daemon]:
    path: Path = tmp_path_factory.mktemp(request.param)
    make = go_nsqd if request.param == "go-nsqd" else pnsq_nsqd
    flags = (
        f"--tls-cert={certs.server_cert}",
        f"--tls-key={certs.server_key}",
        "--tls-required=true",
        "--https-address=127.0.0.1:0",
    )
    d = make(path / "data", *flags).start()
    try:
        yield d
    finally:
        d.stop()


def test_plain_http_is_refused_and_https_serves(daemon: Daemon, certs: Certs) -> None:
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"http://{daemon.http_address}/ping", timeout=5)
    assert refused.value.code == 403
    assert refused.value.headers["X-Nsq-Content-Type"] == "nsq; version=1.0"
    assert refused.value.headers["Content-Type"] == "application/json; charset=utf-8"
    body = refused.value.read()
    reply = json.loads(body)
    assert reply["message"] == "TLS_REQUIRED"
    assert body == b'{"message": "TLS_REQUIRED", "https_port": %d}' % reply["https_port"]
    context = ssl.create_default_context(cafile=str(certs.ca))
    context.check_hostname = False
    url = f"https://127.0.0.1:{reply['https_port']}/ping"
    with urllib.request.urlopen(url, timeout=5, context=context) as r:
        assert r.read() == b"OK"


def test_https_speaks_http_1_1_only(daemon: Daemon, certs: Certs) -> None:
    """A client offering HTTP/2 (curl, browsers) gets HTTP/1.1, as from nsqd."""
    context = ssl.create_default_context(cafile=str(certs.ca))
    context.check_hostname = False
    context.set_alpn_protocols(["h2", "http/1.1"])
    port = json.loads(_refusal(daemon))["https_port"]
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw) as tls,
    ):
        assert tls.selected_alpn_protocol() in (None, "http/1.1")
        tls.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert tls.makefile("rb").readline() == b"HTTP/1.1 200 OK\r\n"


def _refusal(daemon: Daemon) -> bytes:
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"http://{daemon.http_address}/ping", timeout=5)
    body: bytes = refused.value.read()
    return body
