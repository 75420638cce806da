"""AUTH with an auth server the test runs: error texts and auth-server requests checked against
the Go nsqd 1.3.0 and pnsq alike, TTL expiry, and the real clients with a secret.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from pnsq.client import BlockingClient, NsqHTTPError
from tests.authserver import AuthServer
from tests.daemons import Daemon, go_nsqd, pnsq_nsqd
from tests.interop.drivers import Driver
from tests.tlscerts import make_certs
from tests.upgradeclient import ERROR, OK, RESPONSE, UpgradingClient, command, identify

pytestmark = pytest.mark.integration

KINDS = ["nsqd-1.3.0", "pnsq"]
BOTH = {"topic": "^allowed", "channels": [".*"], "permissions": ["subscribe", "publish"]}
REPLIES = {
    "pub-sub": (
        200,
        {"ttl": 3600, "identity": "user", "identity_url": "http://id/u", "authorizations": [BOTH]},
    ),
    # pynsq's own auth test reply (no identity_url)
    "sub-only": (
        200,
        {
            "ttl": 30,
            "identity": "username",
            "authorizations": [
                {"permissions": ["subscribe"], "topic": "authtopic", "channels": ["ch"]}
            ],
        },
    ),
    "publish-unanchored": (
        200,
        {
            "ttl": 30,
            "authorizations": [{"topic": "llow", "channels": ["^$"], "permissions": ["publish"]}],
        },
    ),
    "empty": (200, {"ttl": 30, "identity": "nobody", "authorizations": []}),
    "bad-permission": (
        200,
        {"ttl": 30, "authorizations": [{"topic": ".*", "channels": [], "permissions": ["admin"]}]},
    ),
    "zero-ttl": (200, {"ttl": 0, "authorizations": [BOTH]}),
    "bad-regex": (
        200,
        {"ttl": 30, "authorizations": [{"topic": "(", "channels": [], "permissions": []}]},
    ),
    "wrong-type": (200, {"ttl": "30", "authorizations": [BOTH]}),
    "server-error": (500, {"message": "oops"}),
    "not-json": (200, b"nope"),
}


def make_daemon(kind: str, path: Path, *flags: str) -> Daemon:
    return (go_nsqd if kind == "nsqd-1.3.0" else pnsq_nsqd)(path, *flags)


@pytest.fixture(scope="module")
def auth_server() -> Iterator[AuthServer]:
    server = AuthServer(dict(REPLIES)).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module", params=KINDS)
def daemon(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    auth_server: AuthServer,
) -> Iterator[Daemon]:
    path = tmp_path_factory.mktemp(request.param) / "data"
    made = make_daemon(request.param, path, f"--auth-http-address={auth_server.address}")
    made.start()
    try:
        yield made
    finally:
        made.stop()


def auth(secret: str) -> bytes:
    return command(b"AUTH", secret.encode())


def pub(topic: bytes, body: bytes = b"m") -> bytes:
    return command(b"PUB " + topic, body)


def mpub(topic: bytes) -> bytes:
    return command(b"MPUB " + topic, b"\x00\x00\x00\x01\x00\x00\x00\x01m")


def reply_for(secret: str) -> bytes:
    """nsqd's AUTH reply for a secret of REPLIES (Go's json.Marshal, keys in struct order)."""
    body = REPLIES[secret][1]
    assert isinstance(body, dict)
    reply = {
        "identity": body.get("identity", ""),
        "identity_url": body.get("identity_url", ""),
        "permission_count": len(body["authorizations"]),
    }
    return json.dumps(reply, separators=(",", ":")).encode()


# --------------------------------------------------------------------------- the error table

CASES = [
    pytest.param((), b"SUB allowed ch\n", b"E_AUTH_FIRST AUTH required before SUB", id="sub-first"),
    pytest.param((), pub(b"allowed"), b"E_AUTH_FIRST AUTH required before PUB", id="pub-first"),
    pytest.param((), mpub(b"allowed"), b"E_AUTH_FIRST AUTH required before MPUB", id="mpub-first"),
    pytest.param(  # refused before its body is read: the 5 MB never come
        (),
        b"MPUB allowed\n" + (5_000_000).to_bytes(4, "big") + bytes(1000),
        b"E_AUTH_FIRST AUTH required before MPUB",
        id="mpub-first-before-its-body",
    ),
    pytest.param(
        (),
        command(b"DPUB allowed 10", b"m"),
        b"E_AUTH_FIRST AUTH required before DPUB",
        id="dpub-first",
    ),
    pytest.param((), auth("unknown"), b"E_AUTH_FAILED AUTH failed", id="server-403"),
    pytest.param((), auth("server-error"), b"E_AUTH_FAILED AUTH failed", id="server-500"),
    pytest.param((), auth("not-json"), b"E_AUTH_FAILED AUTH failed", id="not-json"),
    pytest.param((), auth("wrong-type"), b"E_AUTH_FAILED AUTH failed", id="wrong-json-type"),
    pytest.param((), auth("bad-permission"), b"E_AUTH_FAILED AUTH failed", id="bad-permission"),
    pytest.param((), auth("zero-ttl"), b"E_AUTH_FAILED AUTH failed", id="ttl-0"),
    pytest.param((), auth("bad-regex"), b"E_AUTH_FAILED AUTH failed", id="bad-regex"),
    pytest.param(
        (), auth("empty"), b"E_UNAUTHORIZED AUTH no authorizations found", id="no-authorizations"
    ),
    pytest.param(
        (), command(b"AUTH", b"\xff\xfe"), b"E_AUTH_FAILED AUTH failed", id="secret-not-utf-8"
    ),
    pytest.param(
        (), command(b"AUTH", b"s" * 66_000), b"E_AUTH_FAILED AUTH failed", id="secret-of-66-kb"
    ),
    pytest.param(
        ((auth("pub-sub"), reply_for("pub-sub")),),
        auth("pub-sub"),
        b"E_INVALID AUTH already set",
        id="auth-twice",
    ),
    pytest.param(
        ((auth("sub-only"), reply_for("sub-only")),),
        b"SUB authtopic other\n",
        b'E_UNAUTHORIZED AUTH failed for SUB on "authtopic" "other"',
        id="sub-wrong-channel",
    ),
    pytest.param(
        ((auth("sub-only"), reply_for("sub-only")),),
        pub(b"authtopic"),
        b'E_UNAUTHORIZED AUTH failed for PUB on "authtopic" ""',
        id="pub-without-publish",
    ),
    pytest.param(
        ((auth("pub-sub"), reply_for("pub-sub")),),
        pub(b"other"),
        b'E_UNAUTHORIZED AUTH failed for PUB on "other" ""',
        id="pub-wrong-topic",
    ),
    pytest.param(
        ((auth("pub-sub"), reply_for("pub-sub")),),
        mpub(b"other"),
        b'E_UNAUTHORIZED AUTH failed for MPUB on "other" ""',
        id="mpub-wrong-topic",
    ),
    pytest.param(
        ((auth("pub-sub"), reply_for("pub-sub")),),
        b"MPUB other\n" + (5_000_000).to_bytes(4, "big") + bytes(1000),
        b'E_UNAUTHORIZED AUTH failed for MPUB on "other" ""',
        id="mpub-wrong-topic-before-its-body",
    ),
    pytest.param(
        ((auth("pub-sub"), reply_for("pub-sub")), (pub(b"allowed-1"), b"OK")),
        command(b"DPUB not-allowed 10", b"m"),
        b'E_UNAUTHORIZED AUTH failed for DPUB on "not-allowed" ""',
        id="dpub-wrong-topic",
    ),
    pytest.param(
        ((auth("pub-sub"), reply_for("pub-sub")),),
        b"SUB xallowed ch\n",
        b'E_UNAUTHORIZED AUTH failed for SUB on "xallowed" "ch"',
        id="anchored-topic-regex",
    ),
]


@pytest.mark.parametrize(("setup", "send", "error"), CASES)
def test_auth_errors(
    daemon: Daemon, setup: tuple[tuple[bytes, bytes], ...], send: bytes, error: bytes
) -> None:
    with UpgradingClient(daemon.tcp_port) as c:
        for request, reply in setup:
            c.send(request)
            assert c.read_frame() == (RESPONSE, reply)
        c.send(send)
        assert c.read_frame() == (ERROR, error)
        assert c.closed_by_server()


def test_authorized_client_publishes_and_subscribes(daemon: Daemon) -> None:
    with UpgradingClient(daemon.tcp_port) as c:
        c.send(identify())
        frame = c.read_frame()
        assert json.loads(frame[1])["auth_required"] is True
        c.send(auth("pub-sub"))
        assert c.read_frame() == (
            RESPONSE,
            b'{"identity":"user","identity_url":"http://id/u","permission_count":1}',
        )
        c.send(pub(b"allowed-topic", b"one") + pub(b"allowed", b"two"))
        assert c.read_frame() == OK
        assert c.read_frame() == OK
        c.send(b"SUB allowed-topic anything\nRDY 1\n")
        assert c.read_frame() == OK
        kind, data = c.read_frame()
        assert (kind, data[26:]) == (2, b"one")


def test_regexes_are_unanchored(daemon: Daemon) -> None:
    with UpgradingClient(daemon.tcp_port) as c:
        c.send(auth("publish-unanchored"))
        assert c.read_frame() == (RESPONSE, reply_for("publish-unanchored"))
        c.send(pub(b"my-allowed-topic"))
        assert c.read_frame() == OK
        c.send(b"SUB my-allowed-topic ch\n")  # no subscribe permission, "^$" misses "ch"
        assert c.read_frame() == (
            ERROR,
            b'E_UNAUTHORIZED AUTH failed for SUB on "my-allowed-topic" "ch"',
        )


def test_what_the_auth_server_is_asked(daemon: Daemon, auth_server: AuthServer) -> None:
    secret = "s p&c=d/é"
    auth_server.replies[secret] = REPLIES["pub-sub"]
    before = len(auth_server.requests)
    with UpgradingClient(daemon.tcp_port) as c:
        c.send(auth(secret))
        assert c.read_frame() == (RESPONSE, reply_for("pub-sub"))
    (request,) = auth_server.requests[before:]
    assert (request.method, request.path) == ("GET", "/auth")
    assert request.raw_query == (
        "common_name=&remote_ip=127.0.0.1&secret=s+p%26c%3Dd%2F%C3%A9&tls=false"
    )
    assert request.headers["Accept"] == "application/vnd.nsq; version=1.0"


def test_a_secret_that_is_not_utf_8_is_sent_as_its_bytes(
    daemon: Daemon, auth_server: AuthServer
) -> None:
    before = len(auth_server.requests)
    with UpgradingClient(daemon.tcp_port) as c:
        c.send(command(b"AUTH", b"a\xffb"))
        assert c.read_frame() == (ERROR, b"E_AUTH_FAILED AUTH failed")  # (403: unknown)
    (request,) = auth_server.requests[before:]
    assert "&secret=a%FFb&" in request.raw_query


def test_expired_authorization_is_asked_again(daemon: Daemon, auth_server: AuthServer) -> None:
    secret = f"short-{daemon.tcp_port}"
    auth_server.replies[secret] = (200, {"ttl": 1, "authorizations": [BOTH]})
    with UpgradingClient(daemon.tcp_port) as c:
        c.send(auth(secret))
        assert c.read_frame()[0] == RESPONSE
        c.send(pub(b"allowed-ttl"))
        assert c.read_frame() == OK
        asked = [r for r in auth_server.requests if r.query.get("secret") == secret]
        assert len(asked) == 1
        time.sleep(1.2)
        c.send(pub(b"allowed-ttl"))  # expired: asked again, still allowed
        assert c.read_frame() == OK
        asked = [r for r in auth_server.requests if r.query.get("secret") == secret]
        assert len(asked) == 2
        auth_server.replies[secret] = (403, {})
        time.sleep(1.2)
        c.send(pub(b"allowed-ttl"))
        assert c.read_frame() == (ERROR, b"E_AUTH_FAILED AUTH failed")
        assert c.closed_by_server()


def test_http_pub_needs_no_auth(daemon: Daemon) -> None:
    request = urllib.request.Request(
        f"http://{daemon.http_address}/pub?topic=http-topic", data=b"body", method="POST"
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert (response.status, response.read()) == (200, b"OK")


# --------------------------------------------------------------------------- configurations


@pytest.mark.parametrize("kind", KINDS)
def test_addresses_tried_in_turn_and_full_urls(
    tmp_path: Path, auth_server: AuthServer, kind: str
) -> None:
    """A dead address is skipped; an address with "://" is the whole URL."""
    url = f"http://{auth_server.address}/custom/auth"
    flags = ("--auth-http-address=127.0.0.1:1", f"--auth-http-address={url}")
    made = make_daemon(kind, tmp_path / "data", *flags).start()
    try:
        for _ in range(4):  # nsqd starts at a random address
            before = len(auth_server.requests)
            with UpgradingClient(made.tcp_port) as c:
                c.send(auth("pub-sub"))
                assert c.read_frame() == (RESPONSE, reply_for("pub-sub"))
            (request,) = auth_server.requests[before:]
            assert request.path == "/custom/auth"
    finally:
        made.stop()


def test_post_method(tmp_path: Path, auth_server: AuthServer) -> None:
    """--auth-http-request-method=post (nsqd master; not in 1.3.0): the values as JSON."""
    flags = (f"--auth-http-address={auth_server.address}", "--auth-http-request-method=post")
    made = pnsq_nsqd(tmp_path / "data", *flags).start()
    try:
        before = len(auth_server.requests)
        with UpgradingClient(made.tcp_port) as c:
            c.send(auth("pub-sub"))
            assert c.read_frame() == (RESPONSE, reply_for("pub-sub"))
        (request,) = auth_server.requests[before:]
        assert (request.method, request.path, request.raw_query) == ("POST", "/auth", "")
        assert request.values == {
            "common_name": "",
            "remote_ip": "127.0.0.1",
            "secret": "pub-sub",
            "tls": "false",
        }
    finally:
        made.stop()


@pytest.mark.parametrize("kind", KINDS)
def test_tls_client_certificate_reaches_the_auth_server(
    tmp_path: Path, auth_server: AuthServer, kind: str
) -> None:
    certs = make_certs(tmp_path / "certs")
    made = make_daemon(
        kind,
        tmp_path / "data",
        f"--auth-http-address={auth_server.address}",
        f"--tls-cert={certs.server_cert}",
        f"--tls-key={certs.server_key}",
        "--https-address=127.0.0.1:0",
        "--tls-client-auth-policy=require-verify",
        f"--tls-root-ca-file={certs.ca}",
        "--tls-required=tcp-https",  # keep plain HTTP open for the readiness check
    ).start()
    try:
        before = len(auth_server.requests)
        with UpgradingClient(made.tcp_port) as c:
            c.send(identify(tls_v1=True))
            assert json.loads(c.read_frame()[1])["auth_required"] is True
            c.start_tls(str(certs.client_cert), str(certs.client_key), cafile=str(certs.ca))
            assert c.read_frame() == OK
            c.send(auth("pub-sub"))
            assert c.read_frame() == (RESPONSE, reply_for("pub-sub"))
        (request,) = auth_server.requests[before:]
        assert request.query["tls"] == "true"
        assert request.query["common_name"] == "pnsq-test-client"
    finally:
        made.stop()


# --------------------------------------------------------------------------- real clients


@pytest.fixture(scope="module")
def pnsq_auth(
    tmp_path_factory: pytest.TempPathFactory, auth_server: AuthServer
) -> Iterator[Daemon]:
    path = tmp_path_factory.mktemp("pnsq-auth") / "data"
    made = pnsq_nsqd(path, f"--auth-http-address={auth_server.address}").start()
    try:
        yield made
    finally:
        made.stop()


@pytest.mark.interop
@pytest.mark.parametrize("client", ["pynsq", "go-nsq"])
def test_clients_with_a_secret(pnsq_auth: Daemon, client: str) -> None:
    driver = Driver(client)
    flags = driver.conn_flags(auth_secret="pub-sub")
    topic = f"allowed-{client}"
    published = driver.run(driver.pub_argv(pnsq_auth.tcp_address, topic, 50, extra=flags))
    assert published.returncode == 0, published.stderr
    consumed = driver.run(
        driver.sub_argv(pnsq_auth.tcp_address, topic, "ch", 50, timeout=20, extra=flags)
    )
    assert consumed.returncode == 0, consumed.stderr
    assert {d["body"] for d in consumed.deliveries} == {f"msg-{i}" for i in range(50)}
    if client == "pynsq":
        for run in (published, consumed):
            granted = run.first("connected")["connected"]
            assert isinstance(granted, dict)
            assert granted["auth"] == json.loads(reply_for("pub-sub"))
            identify_reply = granted["identify"]
            assert isinstance(identify_reply, dict)
            assert identify_reply["auth_required"] is True


@pytest.mark.interop
def test_pynsq_refused_without_permission(pnsq_auth: Daemon) -> None:
    """pynsq's own auth test: a subscribe-only secret cannot publish."""
    driver = Driver("pynsq")
    flags = driver.conn_flags(auth_secret="sub-only")
    argv = [*driver.pub_argv(pnsq_auth.tcp_address, "authtopic", 1, extra=flags), "--timeout", "5"]
    published = driver.run(argv)
    assert published.returncode == 1
    assert published.summary["published"] == 0
    errors = published.summary["errors"]
    assert isinstance(errors, list)
    assert any("E_UNAUTHORIZED" in str(e) for e in errors), published.lines


# --------------------------------------------------------------------------- pnsq's HTTP reads


def _http(
    daemon: Daemon, method: str, path: str, secret: str | None = None, body: bytes | None = None
) -> tuple[int, bytes]:
    headers = {} if secret is None else {"Authorization": f"Bearer {secret}"}
    request = urllib.request.Request(
        f"http://{daemon.http_address}{path}", data=body, method=method, headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


READS = [
    ("POST", "/consume?topic={topic}&channel=ch&max=10", None),
    ("GET", "/partition/read?topic={topic}&partition=0&offset=0&format=ndjson", None),
    ("GET", "/message/get?topic={topic}&partition=0&search_mode=count&search_pos=0", None),
    ("POST", "/message/finish?topic={topic}&channel=ch&msgid=1", None),
    ("POST", "/channel/setoffset?topic={topic}&channel=ch&partition=0", b"special:-1"),
]


def test_http_reads_ask_the_auth_server(pnsq_auth: Daemon, auth_server: AuthServer) -> None:
    """pnsq's HTTP endpoints that hand out messages or move a channel ask what the TCP SUB asks
    (nsqd's own HTTP API reads no messages): no secret, a refused one, or one without
    ``subscribe`` on the topic gets nothing; the secret that may subscribe reads."""
    topic = "allowed-http"
    auth_server.replies["http-reader"] = REPLIES["pub-sub"]
    auth_server.replies["narrow"] = (
        200,
        {"ttl": 30, "authorizations": [{"topic": "^allowed", "channels": ["^ch$"],
                                        "permissions": ["subscribe"]}]},
    )  # fmt: skip
    assert _http(pnsq_auth, "POST", f"/pub?topic={topic}", body=b"secret body") == (200, b"OK")
    assert _http(pnsq_auth, "POST", f"/channel/create?topic={topic}&channel=ch")[0] == 200
    for method, path, body in READS:
        url = path.format(topic=topic)
        assert _http(pnsq_auth, method, url, body=body) == (401, b'{"message":"AUTH_REQUIRED"}')
        assert _http(pnsq_auth, method, url, "unknown", body) == (
            401,
            b'{"message":"AUTH_FAILED"}',
        )
        for secret in ("publish-unanchored", "sub-only"):  # no subscribe here, or not this topic
            assert _http(pnsq_auth, method, url, secret, body) == (
                403,
                b'{"message":"UNAUTHORIZED"}',
            )
        other = path.format(topic="other-http")
        assert _http(pnsq_auth, method, other, "http-reader", body)[0] == 403
    # a channel pattern that names one channel: that channel's endpoints, not the whole topic
    read = READS[1][1].format(topic=topic)
    assert _http(pnsq_auth, "GET", read, "narrow")[0] == 403
    status, got = _http(pnsq_auth, "GET", read, "http-reader")
    assert status == 200
    assert b"c2VjcmV0IGJvZHk=" in got  # base64 of the body
    status, got = _http(pnsq_auth, "POST", READS[0][1].format(topic=topic), "narrow")
    assert status == 200
    assert json.loads(got)["messages"][0]["body"] == "c2VjcmV0IGJvZHk="
    asked = [r for r in auth_server.requests if r.query.get("secret") == "narrow"]
    assert len(asked) == 1  # kept for its ttl
    # pnsq's blocking client (and with it the Spark source's range reads) sends its secret
    with BlockingClient(http_address=pnsq_auth.http_address, http_auth_secret="http-reader") as c:
        assert [r.body for r in c.read_range(topic, 0, 0, 10).records] == [b"secret body"]
    with BlockingClient(http_address=pnsq_auth.http_address) as c, pytest.raises(NsqHTTPError):
        c.read_range(topic, 0, 0, 10)


def test_http_reads_need_no_secret_without_an_auth_server(tmp_path: Path) -> None:
    made = pnsq_nsqd(tmp_path / "data").start()
    try:
        assert _http(made, "POST", "/pub?topic=open", body=b"x") == (200, b"OK")
        status, _ = _http(made, "GET", "/partition/read?topic=open&partition=0&offset=0")
        assert status == 200
    finally:
        made.stop()
