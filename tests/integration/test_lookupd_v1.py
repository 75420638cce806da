"""nsqlookupd's TCP protocol V1 and its stock HTTP API: the same tables run against the real Go
nsqlookupd 1.3.0 (proving each expectation) and against pnsq's lookupd."""

from __future__ import annotations

import json
import struct
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from email.message import Message
from pathlib import Path

import pytest

from tests.daemons import Daemon, go_lookupd, pnsq_lookupd
from tests.v1client import V1Client

pytestmark = pytest.mark.integration

ACCEPT = {"Accept": "application/vnd.nsq; version=1.0"}


@pytest.fixture(scope="module", params=["go-nsqlookupd", "pnsq"])
def lookupd(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Daemon]:
    path: Path = tmp_path_factory.mktemp(request.param)
    make = go_lookupd if request.param == "go-nsqlookupd" else pnsq_lookupd
    daemon = make(path / "data").start()
    try:
        yield daemon
    finally:
        daemon.stop()


def http(
    daemon: Daemon, method: str, path: str, headers: dict[str, str] | None = None
) -> tuple[int, bytes, Message]:
    req = urllib.request.Request(
        f"http://{daemon.http_address}{path}", method=method, headers=headers or ACCEPT
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def get_json(daemon: Daemon, path: str) -> dict[str, object]:
    status, body, headers = http(daemon, "GET", path)
    assert status == 200, body
    assert headers["X-Nsq-Content-Type"] == "nsq; version=1.0"
    data = json.loads(body)
    assert isinstance(data, dict)
    return data


NODE = {
    "version": "1.3.0",
    "tcp_port": 4150,
    "http_port": 4151,
    "hostname": "h",
    "broadcast_address": "127.0.0.1",
}


def body(value: object) -> bytes:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return b"IDENTIFY\n" + struct.pack(">i", len(raw)) + raw


# (id, bytes after the magic, expected replies, closed afterwards)
V1_CASES = [
    ("ping", b"PING\n", [b"OK"], False),
    ("ping-trimmed", b"  PING \t\r\n", [b"OK"], False),
    ("ping-args", b"PING x y\n", [b"OK"], False),
    ("unknown", b"FOO bar\n", [b"E_INVALID invalid command FOO"], True),
    ("lowercase", b"ping\n", [b"E_INVALID invalid command ping"], True),
    ("empty-line", b"\n", [b"E_INVALID invalid command "], True),
    ("register-first", b"REGISTER t\n", [b"E_INVALID client must IDENTIFY"], True),
    ("unregister-first", b"UNREGISTER t c\n", [b"E_INVALID client must IDENTIFY"], True),
    ("identify-empty", body({}), [b"E_BAD_BODY IDENTIFY missing fields"], True),
    ("identify-null", body(b"null"), [b"E_BAD_BODY IDENTIFY missing fields"], True),
    (
        "identify-not-json",
        body(b"{nope"),
        [b"E_BAD_BODY IDENTIFY failed to decode JSON body"],
        True,
    ),
    ("identify-array", body(b"[1]"), [b"E_BAD_BODY IDENTIFY failed to decode JSON body"], True),
    (
        "identify-port-string",
        body({**NODE, "tcp_port": "4150"}),
        [b"E_BAD_BODY IDENTIFY failed to decode JSON body"],
        True,
    ),
    (
        "identify-port-float",
        body(b'{"version":"1","tcp_port":4150.5,"http_port":1,"broadcast_address":"a"}'),
        [b"E_BAD_BODY IDENTIFY failed to decode JSON body"],
        True,
    ),
    (
        "identify-port-exponent",
        body(b'{"version":"1","tcp_port":1e3,"http_port":1,"broadcast_address":"a"}'),
        [b"E_BAD_BODY IDENTIFY failed to decode JSON body"],
        True,
    ),
    (
        "identify-version-number",
        body({**NODE, "version": 1}),
        [b"E_BAD_BODY IDENTIFY failed to decode JSON body"],
        True,
    ),
    (
        "identify-missing-port",
        body({k: v for k, v in NODE.items() if k != "http_port"}),
        [b"E_BAD_BODY IDENTIFY missing fields"],
        True,
    ),
    (
        "identify-missing-address",
        body({**NODE, "broadcast_address": ""}),
        [b"E_BAD_BODY IDENTIFY missing fields"],
        True,
    ),
    (
        "identify-twice",
        body(NODE) + b"IDENTIFY\n",
        [None, b"E_INVALID cannot IDENTIFY again"],
        True,
    ),
    (
        "register-no-params",
        body(NODE) + b"REGISTER\n",
        [None, b"E_INVALID REGISTER insufficient number of params"],
        True,
    ),
    (
        "unregister-no-params",
        body(NODE) + b"UNREGISTER \n",
        [None, b"E_INVALID UNREGISTER insufficient number of params"],
        True,
    ),
    (
        "register-bad-topic",
        body(NODE) + b"REGISTER a!b\n",
        [None, b"E_BAD_TOPIC REGISTER topic name 'a!b' is not valid"],
        True,
    ),
    (
        "register-empty-topic",
        body(NODE) + b"REGISTER  t\n",
        [None, b"E_BAD_TOPIC REGISTER topic name '' is not valid"],
        True,
    ),
    (
        "register-bad-channel",
        body(NODE) + b"REGISTER t c!d\n",
        [None, b"E_BAD_CHANNEL REGISTER channel name 'c!d' is not valid"],
        True,
    ),
    (
        "unregister-bad-channel",
        body(NODE) + b"UNREGISTER t " + b"c" * 65 + b"\n",
        [None, b"E_BAD_CHANNEL UNREGISTER channel name '" + b"c" * 65 + b"' is not valid"],
        True,
    ),
    (
        "register-unregister",
        body(NODE) + b"REGISTER t c\nREGISTER t\nUNREGISTER t c\nUNREGISTER t\nPING\n",
        [None, b"OK", b"OK", b"OK", b"OK", b"OK"],
        False,
    ),
    (
        "uppercase-keys",
        body({k.upper(): v for k, v in NODE.items()}) + b"PING\n",
        [None, b"OK"],
        False,
    ),
]


@pytest.mark.parametrize(
    ("case", "data", "replies", "closed"), V1_CASES, ids=[c[0] for c in V1_CASES]
)
def test_v1_table(
    lookupd: Daemon, case: str, data: bytes, replies: list[bytes | None], closed: bool
) -> None:
    client = V1Client(lookupd.tcp_address)
    try:
        client.send(data)
        for expected in replies:
            reply = client.read()
            if expected is None:  # an IDENTIFY reply: JSON
                assert json.loads(reply)["version"] == "1.3.0"
            else:
                assert reply == expected
        assert client.closed_by_server(wait=3.0 if closed else 0.5) is closed
    finally:
        client.close()


def test_bad_magic(lookupd: Daemon) -> None:
    client = V1Client(lookupd.tcp_address, magic=b"  V2")
    try:
        assert client.read() == b"E_BAD_PROTOCOL"
        assert client.closed_by_server()
    finally:
        client.close()


@pytest.mark.parametrize(
    ("data", "reply"),
    [
        (b"IDENTIFY\n", b"E_BAD_BODY IDENTIFY failed to read body size"),
        (b"IDENTIFY\n\x00\x00", b"E_BAD_BODY IDENTIFY failed to read body size"),
        (b"IDENTIFY\n\x00\x00\x00\x10{}", b"E_BAD_BODY IDENTIFY failed to read body"),
    ],
    ids=["no-size", "half-size", "short-body"],
)
def test_identify_cut_short(lookupd: Daemon, data: bytes, reply: bytes) -> None:
    client = V1Client(lookupd.tcp_address)
    try:
        client.send(data)
        client.half_close()
        assert client.read() == reply
        assert client.closed_by_server()
    finally:
        client.close()


def test_identify_reply_is_the_lookupds_own(lookupd: Daemon) -> None:
    client = V1Client(lookupd.tcp_address)
    try:
        reply = client.identify(**NODE)
        assert list(json.loads(reply)) == [
            "broadcast_address", "hostname", "http_port", "tcp_port", "version",
        ]  # fmt: skip
        info = json.loads(reply)
        assert (info["tcp_port"], info["http_port"]) == (lookupd.tcp_port, lookupd.http_port)
        assert info["broadcast_address"] == "127.0.0.1"
        assert reply.startswith(b'{"broadcast_address":"127.0.0.1","hostname":')  # compact
    finally:
        client.close()


def test_extension_request_is_harmless(lookupd: Daemon) -> None:
    """pnsq's nsqd asks for "partitions" in IDENTIFY: Go ignores the key; pnsq grants it."""
    client = V1Client(lookupd.tcp_address)
    try:
        info = json.loads(client.identify(**NODE, pnsq_extensions=["partitions"]))
        granted = info.get("pnsq_extensions")
        is_go = lookupd.argv[0].endswith("nsqlookupd")
        assert granted == (None if is_go else ["partitions"])
        assert client.command("PING") == b"OK"
    finally:
        client.close()


# ---------------------------------------------------------------- HTTP (stock behaviour)

HTTP_CASES = [
    ("GET", "/lookup", 400, {"message": "MISSING_ARG_TOPIC"}),
    ("GET", "/lookup?topic=never_seen", 404, {"message": "TOPIC_NOT_FOUND"}),
    ("GET", "/channels", 400, {"message": "MISSING_ARG_TOPIC"}),
    ("GET", "/channels?topic=never_seen", 200, {"channels": []}),
    ("GET", "/lookup?topic=a;b", 400, {"message": "INVALID_REQUEST"}),
    ("POST", "/topic/create", 400, {"message": "MISSING_ARG_TOPIC"}),
    ("POST", "/topic/create?topic=a!b", 400, {"message": "INVALID_ARG_TOPIC"}),
    ("POST", "/topic/delete", 400, {"message": "MISSING_ARG_TOPIC"}),
    ("POST", "/channel/create?topic=t", 400, {"message": "MISSING_ARG_CHANNEL"}),
    ("POST", "/channel/create?channel=c", 400, {"message": "MISSING_ARG_TOPIC"}),
    ("POST", "/channel/create?topic=t&channel=c!", 400, {"message": "INVALID_ARG_CHANNEL"}),
    ("POST", "/channel/delete?topic=t&channel=nope", 404, {"message": "CHANNEL_NOT_FOUND"}),
    ("POST", "/topic/tombstone?topic=t", 400, {"message": "MISSING_ARG_NODE"}),
    ("POST", "/topic/tombstone", 400, {"message": "MISSING_ARG_TOPIC"}),
    ("GET", "/topic/create?topic=t", 405, {"message": "METHOD_NOT_ALLOWED"}),
    ("GET", "/nope", 404, {"message": "NOT_FOUND"}),
    ("GET", "/info", 200, {"version": "1.3.0"}),
]


@pytest.mark.parametrize(
    ("method", "path", "status", "reply"), HTTP_CASES, ids=[f"{c[0]} {c[1]}" for c in HTTP_CASES]
)
def test_http_table(
    lookupd: Daemon, method: str, path: str, status: int, reply: dict[str, object]
) -> None:
    got, raw, headers = http(lookupd, method, path)
    assert (got, json.loads(raw)) == (status, reply)
    assert headers["X-Nsq-Content-Type"] == "nsq; version=1.0"


def test_ping(lookupd: Daemon) -> None:
    status, raw, headers = http(lookupd, "GET", "/ping")
    assert (status, raw) == (200, b"OK")
    assert "X-Nsq-Content-Type" not in headers


def test_admin_keys_and_registrations(lookupd: Daemon) -> None:
    assert http(lookupd, "POST", "/topic/create?topic=adm")[:2] == (200, b"")
    assert http(lookupd, "POST", "/channel/create?topic=adm&channel=c1")[:2] == (200, b"")
    assert "adm" in get_json(lookupd, "/topics")["topics"]  # type: ignore[operator]
    assert get_json(lookupd, "/channels?topic=adm") == {"channels": ["c1"]}
    assert get_json(lookupd, "/lookup?topic=adm")["producers"] == []
    assert http(lookupd, "POST", "/channel/delete?topic=adm&channel=c1")[0] == 200
    assert get_json(lookupd, "/channels?topic=adm") == {"channels": []}
    assert http(lookupd, "POST", "/topic/delete?topic=adm")[0] == 200
    assert "adm" not in get_json(lookupd, "/topics")["topics"]  # type: ignore[operator]
    assert http(lookupd, "GET", "/lookup?topic=adm")[0] == 404


def test_keys_outlive_the_producer(lookupd: Daemon) -> None:
    client = V1Client(lookupd.tcp_address)
    client.identify(**{**NODE, "tcp_port": 5150, "http_port": 5151})
    assert client.command("REGISTER kept ch") == b"OK"
    assert client.command("REGISTER kept eph#ephemeral") == b"OK"
    assert client.command("REGISTER kept  ignored") == b"OK"  # empty channel: the topic only
    lookup = get_json(lookupd, "/lookup?topic=kept")
    assert sorted(lookup["channels"]) == ["ch", "eph#ephemeral"]  # type: ignore[arg-type]
    producers = lookup["producers"]
    assert isinstance(producers, list)
    assert len(producers) == 1
    stock = {"remote_address", "hostname", "broadcast_address", "tcp_port", "http_port", "version"}
    assert stock <= set(producers[0])
    assert producers[0]["tcp_port"] == 5150
    assert client.command("UNREGISTER kept eph#ephemeral") == b"OK"  # last producer: key goes
    assert get_json(lookupd, "/channels?topic=kept") == {"channels": ["ch"]}
    client.close()
    deadline = time.monotonic() + 5
    while get_json(lookupd, "/lookup?topic=kept")["producers"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert get_json(lookupd, "/lookup?topic=kept") == {
        **get_json(lookupd, "/lookup?topic=kept"),
        "channels": ["ch"],
        "producers": [],
    }
    assert "kept" in get_json(lookupd, "/topics")["topics"]  # type: ignore[operator]


def test_tombstone_hides_the_producer_from_lookup_only(lookupd: Daemon) -> None:
    client = V1Client(lookupd.tcp_address)
    try:
        client.identify(**{**NODE, "tcp_port": 6150, "http_port": 6151})
        assert client.command("REGISTER tomb") == b"OK"
        assert len(get_json(lookupd, "/lookup?topic=tomb")["producers"]) == 1  # type: ignore[arg-type]
        status, _, _ = http(lookupd, "POST", "/topic/tombstone?topic=tomb&node=127.0.0.1:6151")
        assert status == 200
        assert get_json(lookupd, "/lookup?topic=tomb")["producers"] == []
        nodes = get_json(lookupd, "/nodes")["producers"]
        assert isinstance(nodes, list)
        mine = [n for n in nodes if n["tcp_port"] == 6150]
        assert len(mine) == 1
        assert dict(zip(mine[0]["topics"], mine[0]["tombstones"], strict=True)) == {"tomb": True}
        stock = {"remote_address", "hostname", "broadcast_address", "tcp_port", "http_port",
                 "version", "tombstones", "topics"}  # fmt: skip
        assert stock <= set(mine[0])
    finally:
        client.close()
