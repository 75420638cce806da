"""nsqd's full HTTP API: one table of requests per endpoint (status, exact body, headers),
/stats shape and filters, and what the admin endpoints do (pause stops delivery, empty drops
depth and in-flight, delete disconnects consumers and removes data). Every test runs against the
Go nsqd 1.3.0 (proving each expectation) and against pnsq; where pnsq differs by design (it
keeps everything on disk, so ``backend_depth`` equals ``depth``) the test says so.
"""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from email.message import Message
from pathlib import Path
from typing import Any

import pytest

from protocol import Fin, Nop, Pub, Rdy, Sub
from tests.daemons import Daemon, go_nsqd, pnsq_nsqd
from tests.rawclient import Frame, RawClient

pytestmark = pytest.mark.integration

LIMITS = ("--max-msg-size=100", "--max-body-size=1000")
NSQ = "nsq; version=1.0"
JSON_TYPE = "application/json; charset=utf-8"
TEXT_TYPE = "text/plain; charset=utf-8"


@pytest.fixture(scope="module", params=["go-nsqd", "pnsq"])
def daemon(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Daemon]:
    path: Path = tmp_path_factory.mktemp(request.param)
    make = go_nsqd if request.param == "go-nsqd" else pnsq_nsqd
    d = make(path / "data", *LIMITS).start()
    try:
        yield d
    finally:
        d.stop()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def http(
    daemon: Daemon, method: str, path: str, body: bytes | None = None
) -> tuple[int, bytes, Message]:
    """Status, body and headers (redirects are not followed)."""
    req = urllib.request.Request(f"http://{daemon.http_address}{path}", body, method=method)
    try:
        with _OPENER.open(req, timeout=5) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def ok(daemon: Daemon, method: str, path: str, body: bytes | None = None) -> bytes:
    status, reply, _ = http(daemon, method, path, body)
    assert status == 200, (path, status, reply)
    return reply


def stats(daemon: Daemon, query: str = "") -> dict[str, Any]:
    reply = ok(daemon, "GET", f"/stats?format=json{query}")
    doc = json.loads(reply)
    assert isinstance(doc, dict)
    return doc


def err(text: str) -> bytes:
    return b'{"message":"%s"}' % text.encode()


# ---------------------------------------------------------------------- the endpoint table

E = err
# (setup requests, method, path, body, status, reply); the setup requests must answer 200.
CASES: list[tuple[list[str], str, str, bytes | None, int, bytes]] = [
    # /topic/create: getTopicFromQuery (INVALID_TOPIC)
    ([], "POST", "/topic/create?topic=tc", None, 200, b""),
    ([], "POST", "/topic/create?topic=tc", None, 200, b""),  # again: no error
    ([], "POST", "/topic/create", None, 400, E("MISSING_ARG_TOPIC")),
    ([], "POST", "/topic/create?topic=", None, 400, E("INVALID_TOPIC")),
    ([], "POST", "/topic/create?topic=bad!", None, 400, E("INVALID_TOPIC")),
    ([], "POST", "/topic/create?topic=a;b", None, 400, E("INVALID_REQUEST")),
    ([], "POST", "/topic/create?topic=a%zz", None, 400, E("INVALID_REQUEST")),
    ([], "GET", "/topic/create?topic=tc", None, 405, E("METHOD_NOT_ALLOWED")),
    # /topic/delete: the name is not validated
    (["/topic/create?topic=td"], "POST", "/topic/delete?topic=td", None, 200, b""),
    ([], "POST", "/topic/delete?topic=td_none", None, 404, E("TOPIC_NOT_FOUND")),
    ([], "POST", "/topic/delete?topic=bad!", None, 404, E("TOPIC_NOT_FOUND")),
    ([], "POST", "/topic/delete", None, 400, E("MISSING_ARG_TOPIC")),
    # /topic/empty
    (["/topic/create?topic=te"], "POST", "/topic/empty?topic=te", None, 200, b""),
    ([], "POST", "/topic/empty?topic=te_none", None, 404, E("TOPIC_NOT_FOUND")),
    ([], "POST", "/topic/empty?topic=bad!", None, 400, E("INVALID_TOPIC")),
    ([], "POST", "/topic/empty", None, 400, E("MISSING_ARG_TOPIC")),
    # /topic/pause, /topic/unpause: the name is not validated
    (["/topic/create?topic=tp"], "POST", "/topic/pause?topic=tp", None, 200, b""),
    (["/topic/create?topic=tp"], "POST", "/topic/unpause?topic=tp", None, 200, b""),
    ([], "POST", "/topic/pause?topic=tp_none", None, 404, E("TOPIC_NOT_FOUND")),
    ([], "POST", "/topic/unpause?topic=bad!", None, 404, E("TOPIC_NOT_FOUND")),
    ([], "POST", "/topic/pause", None, 400, E("MISSING_ARG_TOPIC")),
    # /channel/*: GetTopicChannelArgs (INVALID_ARG_TOPIC), and the topic must exist
    (["/topic/create?topic=ch"], "POST", "/channel/create?topic=ch&channel=c", None, 200, b""),
    ([], "POST", "/channel/create?topic=ch_none&channel=c", None, 404, E("TOPIC_NOT_FOUND")),
    ([], "POST", "/channel/create", None, 400, E("MISSING_ARG_TOPIC")),
    ([], "POST", "/channel/create?topic=bad!&channel=c", None, 400, E("INVALID_ARG_TOPIC")),
    ([], "POST", "/channel/create?topic=ch", None, 400, E("MISSING_ARG_CHANNEL")),
    ([], "POST", "/channel/create?topic=ch&channel=", None, 400, E("INVALID_ARG_CHANNEL")),
    ([], "POST", "/channel/create?topic=ch&channel=b!", None, 400, E("INVALID_ARG_CHANNEL")),
    ([], "POST", "/channel/create?topic=ch&channel=c;d", None, 400, E("INVALID_REQUEST")),
    (
        ["/topic/create?topic=ch", "/channel/create?topic=ch&channel=d"],
        "POST",
        "/channel/delete?topic=ch&channel=d",
        None,
        200,
        b"",
    ),
    (
        ["/topic/create?topic=ch"],
        "POST",
        "/channel/delete?topic=ch&channel=zz",
        None,
        404,
        E("CHANNEL_NOT_FOUND"),
    ),
    ([], "POST", "/channel/delete?topic=ch_none&channel=c", None, 404, E("TOPIC_NOT_FOUND")),
    ([], "POST", "/channel/delete?topic=ch", None, 400, E("MISSING_ARG_CHANNEL")),
    (
        ["/topic/create?topic=ch", "/channel/create?topic=ch&channel=c"],
        "POST",
        "/channel/empty?topic=ch&channel=c",
        None,
        200,
        b"",
    ),
    (
        ["/topic/create?topic=ch"],
        "POST",
        "/channel/empty?topic=ch&channel=zz",
        None,
        404,
        E("CHANNEL_NOT_FOUND"),
    ),
    ([], "POST", "/channel/empty?topic=bad!&channel=c", None, 400, E("INVALID_ARG_TOPIC")),
    (
        ["/topic/create?topic=ch", "/channel/create?topic=ch&channel=c"],
        "POST",
        "/channel/pause?topic=ch&channel=c",
        None,
        200,
        b"",
    ),
    (
        ["/topic/create?topic=ch", "/channel/create?topic=ch&channel=c"],
        "POST",
        "/channel/unpause?topic=ch&channel=c",
        None,
        200,
        b"",
    ),
    (
        ["/topic/create?topic=ch"],
        "POST",
        "/channel/pause?topic=ch&channel=zz",
        None,
        404,
        E("CHANNEL_NOT_FOUND"),
    ),
    ([], "POST", "/channel/unpause?topic=ch_none&channel=c", None, 404, E("TOPIC_NOT_FOUND")),
    ([], "GET", "/channel/pause?topic=ch&channel=c", None, 405, E("METHOD_NOT_ALLOWED")),
    # /config/:opt
    ([], "GET", "/config/max_msg_size", None, 200, b"100"),
    ([], "GET", "/config/msg_timeout", None, 200, b"60000000000"),  # a Duration: ns
    ([], "GET", "/config/max_req_timeout", None, 200, b"3600000000000"),
    ([], "GET", "/config/output_buffer_timeout", None, 200, b"250000000"),
    ([], "GET", "/config/mem_queue_size", None, 200, b"10000"),
    ([], "GET", "/config/deflate", None, 200, b"true"),
    ([], "GET", "/config/statsd_exclude_ephemeral", None, 200, b"false"),
    ([], "GET", "/config/auth_http_addresses", None, 200, b"[]"),
    ([], "GET", "/config/e2e_processing_latency_percentiles", None, 200, b"[]"),
    ([], "GET", "/config/tls_required", None, 200, b"0"),
    ([], "GET", "/config/tls_min_version", None, 200, b"769"),
    ([], "GET", "/config/log_prefix", None, 200, b"[nsqd] "),  # a string: plain text
    ([], "GET", "/config/broadcast_address", None, 200, b"127.0.0.1"),
    ([], "GET", "/config/statsd_address", None, 200, b""),
    ([], "GET", "/config/node_id", None, 400, E("INVALID_OPTION")),  # nsqd's name is "id"
    ([], "GET", "/config/lookupd_tcp_address", None, 400, E("INVALID_OPTION")),
    ([], "GET", "/config/verbose", None, 400, E("INVALID_OPTION")),
    ([], "GET", "/config/nope", None, 400, E("INVALID_OPTION")),
    ([], "GET", "/config/", None, 404, E("NOT_FOUND")),
    ([], "GET", "/config/log_level/x", None, 404, E("NOT_FOUND")),
    ([], "POST", "/config/log_level", b"debug", 405, E("METHOD_NOT_ALLOWED")),
    ([], "PUT", "/config/log_level", b"warn", 200, b"3"),
    ([], "PUT", "/config/log_level", b"INFO", 200, b"2"),
    ([], "GET", "/config/log_level", None, 200, b"2"),
    ([], "PUT", "/config/log_level", b"loud", 400, E("INVALID_VALUE")),
    ([], "PUT", "/config/log_level", b"", 413, E("INVALID_VALUE")),
    ([], "PUT", "/config/log_level", b"x" * 101, 413, E("INVALID_VALUE")),
    ([], "PUT", "/config/nsqlookupd_tcp_addresses", b'["127.0.0.1:1"]', 200, b'["127.0.0.1:1"]'),
    ([], "GET", "/config/nsqlookupd_tcp_addresses", None, 200, b'["127.0.0.1:1"]'),
    ([], "PUT", "/config/nsqlookupd_tcp_addresses", b"[]", 200, b"[]"),
    ([], "PUT", "/config/nsqlookupd_tcp_addresses", b'"x"', 400, E("INVALID_VALUE")),
    ([], "PUT", "/config/nsqlookupd_tcp_addresses", b"[1]", 400, E("INVALID_VALUE")),
    ([], "PUT", "/config/max_msg_size", b"5", 400, E("INVALID_OPTION")),
    ([], "PUT", "/config/nope", b"", 413, E("INVALID_VALUE")),  # the body is checked first
    # /stats and /info errors; /info does not parse its query
    ([], "GET", "/stats?format=json&topic=a;b", None, 400, E("INVALID_REQUEST")),
    ([], "POST", "/stats", None, 405, E("METHOD_NOT_ALLOWED")),
    ([], "POST", "/info", None, 405, E("METHOD_NOT_ALLOWED")),
    ([], "GET", "/topic/nope", None, 404, E("NOT_FOUND")),
]


def _case_id(case: tuple[list[str], str, str, bytes | None, int, bytes]) -> str:
    return f"{case[1]} {case[2]} {case[3]!r}"[:80]


def _is_json(body: bytes) -> bool:
    try:
        json.loads(body)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_endpoint_table(
    daemon: Daemon, case: tuple[list[str], str, str, bytes | None, int, bytes]
) -> None:
    setup, method, path, body, status, reply = case
    for step in setup:
        ok(daemon, "POST", step)
    got_status, got_body, headers = http(daemon, method, path, body)
    assert (got_status, got_body) == (status, reply)
    assert headers.get("X-Nsq-Content-Type") == NSQ
    if _is_json(got_body):
        assert headers.get("Content-Type") == JSON_TYPE
    elif got_body:
        assert headers.get("Content-Type") == TEXT_TYPE
    else:
        assert headers.get("Content-Type") is None  # Go sends no type for an empty body


def test_method_not_allowed_lists_the_methods(daemon: Daemon) -> None:
    for path, allow in [
        ("/pub", "OPTIONS, POST"),
        ("/stats", "GET, OPTIONS"),
        ("/config/log_level", "GET, OPTIONS, PUT"),
    ]:
        status, _, headers = http(daemon, "DELETE", path)
        assert (status, headers.get("Allow")) == (405, allow)


def test_options_answers_allow_without_a_body(daemon: Daemon) -> None:
    status, body, headers = http(daemon, "OPTIONS", "/topic/create")
    assert (status, body, headers.get("Allow")) == (200, b"", "OPTIONS, POST")
    status, _, headers = http(daemon, "OPTIONS", "/nope")
    assert status == 404


def test_trailing_slash_redirects(daemon: Daemon) -> None:
    status, _, headers = http(daemon, "POST", "/topic/create/?topic=r")
    assert (status, headers.get("Location")) == (307, "/topic/create?topic=r")
    status, _, headers = http(daemon, "GET", "/stats/")
    assert (status, headers.get("Location")) == (301, "/stats")
    assert http(daemon, "GET", "/topic/create/")[0] == 404  # no GET route there


@pytest.mark.parametrize(
    ("method", "path", "status", "location"),
    [
        ("POST", "//pub?topic=r", 307, "/pub?topic=r"),
        ("GET", "/./ping", 301, "/ping"),
        ("GET", "/x/../ping", 301, "/ping"),
        ("GET", "/stats//?format=json", 301, "/stats?format=json"),
        ("GET", "/PING", 301, "/ping"),
        ("POST", "/Topic/Create/?topic=r", 307, "/topic/create?topic=r"),
        ("GET", "/CONFIG/log_level", 301, "/config/log_level"),
        ("GET", "//topic/create", 404, None),  # no GET route there
        ("GET", "/nope/../nope", 404, None),
    ],
)
def test_untidy_paths_redirect_to_their_route(
    daemon: Daemon, method: str, path: str, status: int, location: str | None
) -> None:
    """httprouter's RedirectFixedPath: cleaned, in any case, with or without a trailing
    slash; 301 for GET, 307 (method and body kept) for any other method."""
    got, _, headers = http(daemon, method, path)
    assert (got, headers.get("Location")) == (status, location)


def _raw_exchange(daemon: Daemon, data: bytes) -> bytes:
    """What the daemon answers to ``data`` sent on a fresh connection, until it closes it or
    says nothing more for a moment."""
    with socket.create_connection(("127.0.0.1", daemon.http_port), timeout=5) as sock:
        sock.sendall(data)
        sock.settimeout(0.5)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except TimeoutError:
            pass
        return received


def test_status_lines_have_go_s_reason_phrase(daemon: Daemon) -> None:
    request = b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
    lines = re.findall(rb"HTTP/1\.1 [^\r]*", _raw_exchange(daemon, request))
    assert lines == [b"HTTP/1.1 200 OK", b"HTTP/1.1 404 Not Found"]


def test_an_absolute_form_request_line_names_its_url_s_path(daemon: Daemon) -> None:
    url = f"http://{daemon.http_address}/ping".encode()
    reply = _raw_exchange(daemon, b"GET " + url + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200 OK\r\n")
    assert reply.endswith(b"\r\n\r\nOK")


def test_a_keep_alive_client_is_answered_after_a_refusal_before_the_body(daemon: Daemon) -> None:
    """A 413 given on the declared length, the body unread: Go reads a small body and keeps
    the connection; pnsq closes it and says so (Connection: close). Either way a keep-alive
    client's next request is answered, on this connection or, told, on a new one."""
    head = b"POST /pub?topic=big HTTP/1.1\r\nHost: x\r\nContent-Length: 300\r\n\r\n"
    then = b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"
    reply = _raw_exchange(daemon, head + b"a" * 300 + then)
    assert reply.startswith(b"HTTP/1.1 413 Request Entity Too Large\r\n")
    first, _, rest = reply.partition(b'{"message":"MSG_TOO_BIG"}')
    if b"\r\nConnection: close\r\n" in first:
        assert rest == b""  # closed, as said
    else:
        assert rest.startswith(b"HTTP/1.1 200 OK\r\n")
        assert rest.endswith(b"OK")


def test_info_ignores_a_malformed_query(daemon: Daemon) -> None:
    assert http(daemon, "GET", "/info?x=%zz")[0] == 200


def test_config_ports_are_the_bound_ones(daemon: Daemon) -> None:
    assert ok(daemon, "GET", "/config/broadcast_tcp_port") == str(daemon.tcp_port).encode()
    assert ok(daemon, "GET", "/config/broadcast_http_port") == str(daemon.http_port).encode()
    prefix = f"nsq.127_0_0_1_{daemon.http_port}.".encode()
    assert ok(daemon, "GET", "/config/statsd_prefix") == prefix


# ---------------------------------------------------------------------- /stats


def consumer(daemon: Daemon, topic: str, channel: str, rdy: int, **identify: object) -> RawClient:
    c = RawClient(daemon.tcp_address)
    c.identify(**identify)
    c.send(Sub(topic, channel), Rdy(rdy))
    assert c.read().data == b"OK"
    return c


def workload(daemon: Daemon, topic: str) -> tuple[RawClient, RawClient, Frame]:
    """3 messages over HTTP and 1 over TCP before any channel, then a consumer with RDY 1:
    channel depth 3, one in flight, message_count 4, one producer."""
    ok(daemon, "POST", f"/mpub?topic={topic}", b"a\nb\nc")
    producer = RawClient(daemon.tcp_address)
    producer.identify(client_id="prod", hostname="prod.local", user_agent="probe/1")
    producer.send(Pub(topic, b"d"))
    assert producer.read().data == b"OK"
    c = consumer(daemon, topic, "ch", 1, client_id="cons", hostname="cons.local", user_agent="p/2")
    message = c.read(skip_heartbeats=True)
    assert message.is_message
    return producer, c, message


def wait_for(check: Any, timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def test_stats_document_values(daemon: Daemon) -> None:
    producer, c, _ = workload(daemon, "sv")
    try:
        doc = stats(daemon, "&topic=sv")
        assert (doc["version"], doc["health"]) == ("1.3.0", "OK")
        [topic] = doc["topics"]
        assert (topic["topic_name"], topic["depth"], topic["message_count"]) == ("sv", 0, 4)
        assert (topic["message_bytes"], topic["paused"]) == (4, False)
        assert topic["e2e_processing_latency"] == {"count": 0, "percentiles": None}
        [channel] = topic["channels"]
        assert channel["channel_name"] == "ch"
        counts = [channel[k] for k in ("depth", "in_flight_count", "message_count")]
        assert counts == [3, 1, 4]
        assert (channel["client_count"], channel["paused"]) == (1, False)
        [client] = channel["clients"]
        assert (client["client_id"], client["hostname"], client["user_agent"]) == (
            "cons",
            "cons.local",
            "p/2",
        )
        assert (client["state"], client["version"], client["ready_count"]) == (3, "V2", 1)
        assert (client["in_flight_count"], client["message_count"]) == (1, 1)
        assert client["remote_address"].startswith("127.0.0.1:")
        [prod] = [p for p in doc["producers"] if p["client_id"] == "prod"]
        assert prod["pub_counts"] == [{"topic": "sv", "count": 1}]
        assert prod["state"] == 0
    finally:
        producer.close()
        c.close()


def test_stats_filters(daemon: Daemon) -> None:
    producer, c, _ = workload(daemon, "sf")
    try:
        missing = stats(daemon, "&topic=sf_none")
        assert (missing["topics"], missing["producers"]) == (None, None)
        no_channel = stats(daemon, "&topic=sf&channel=none")
        assert no_channel["topics"] == []
        [topic] = stats(daemon, "&topic=sf&channel=ch")["topics"]
        assert [c["channel_name"] for c in topic["channels"]] == ["ch"]
        quiet = stats(daemon, "&topic=sf&include_clients=false&include_mem=0")
        assert "memory" not in quiet
        assert quiet["producers"] is None
        assert quiet["topics"][0]["channels"][0]["clients"] is None
        assert quiet["topics"][0]["channels"][0]["client_count"] == 1
        assert "memory" in stats(daemon, "&topic=sf&include_mem=maybe")  # not a bool: default
    finally:
        producer.close()
        c.close()


def test_stats_text_format(daemon: Daemon) -> None:
    producer, c, _ = workload(daemon, "stxt")
    try:
        status, body, headers = http(daemon, "GET", "/stats?topic=stxt")
        assert status == 200
        assert headers.get("Content-Type") == TEXT_TYPE
        assert headers.get("X-Nsq-Content-Type") == NSQ
        text = body.decode()
        assert re.match(r"nsqd v1\.3\.0 \(built w/.+\)\nstart_time \S+\nuptime \S+\n", text)
        assert "\nHealth: OK\n\nMemory:\n   heap_objects             \t" in text
        topic_line = (
            "\nTopics:\n   [stxt           ] depth: 0     be-depth: 0     msgs: 4        e2e%: \n"
        )
        assert topic_line in text
        line = re.search(r"\n      \[ch +\] depth: 3 +be-depth: \d+ +inflt: 1 +def: 0 ", text)
        assert line, text
        assert re.search(
            r"\n        \[V2 cons\.local:\d+ p/2 *\] state: 3 inflt: 1    rdy: 1    fin: 0 ", text
        )
        assert re.search(r"\nProducers:\n   \[V2 prod\.local:\d+ probe/1 *\] msgs: 1 ", text)
        _, empty, _ = http(daemon, "GET", "/stats?format=text&topic=nope&include_mem=false")
        assert empty.decode().endswith("\nHealth: OK\n\nTopics: None\n\nProducers: None\n")
    finally:
        producer.close()
        c.close()


def _shape(value: Any) -> Any:
    """Keys and JSON types, recursively; lists by their first element."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items() if k != "partitions"}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    return type(value).__name__


def test_stats_shape_matches_go_nsqd(tmp_path: Path) -> None:
    """Same workload on both: the JSON documents have the same keys and types everywhere
    (pnsq's extra ``partitions`` lists aside) and the same counts."""
    docs = []
    for make, name in ((go_nsqd, "go"), (pnsq_nsqd, "pnsq")):
        d = make(tmp_path / name).start()
        try:
            producer, c, _ = workload(d, "shape")
            docs.append(stats(d))
            producer.close()
            c.close()
        finally:
            d.stop()
    go, pnsq = docs
    assert _shape(pnsq) == _shape(go)
    assert list(pnsq) == list(go)  # key order too
    for g, p in zip(go["topics"], pnsq["topics"], strict=True):
        assert list(p)[: len(g)] == list(g)
        for key in ("topic_name", "depth", "message_count", "message_bytes", "paused"):
            assert p[key] == g[key], key
        for gc, pc in zip(g["channels"], p["channels"], strict=True):
            keys = ("depth", "in_flight_count", "deferred_count", "message_count")
            assert [pc[k] for k in keys] == [gc[k] for k in keys]
            assert pc["client_count"] == gc["client_count"]
            assert _shape(pc["clients"]) == _shape(gc["clients"])


# ---------------------------------------------------------------------- behaviour


def nothing_arrives(c: RawClient, wait: float = 0.5) -> bool:
    """True if no message frame arrives within ``wait`` (heartbeats are answered)."""
    c.sock.settimeout(wait)
    try:
        frame = c.read(skip_heartbeats=True)
    except TimeoutError:
        return True
    finally:
        c.sock.settimeout(5.0)
    return not frame.is_message


def channel_of(daemon: Daemon, topic: str, channel: str = "ch") -> dict[str, Any]:
    [t] = stats(daemon, f"&topic={topic}&channel={channel}")["topics"]
    [c] = t["channels"]
    return dict(c)


def test_pause_topic_stops_delivery(daemon: Daemon) -> None:
    c = consumer(daemon, "ptopic", "ch", 10)
    try:
        ok(daemon, "POST", "/topic/pause?topic=ptopic")
        assert stats(daemon, "&topic=ptopic")["topics"][0]["paused"] is True
        ok(daemon, "POST", "/pub?topic=ptopic", b"held")
        assert nothing_arrives(c)
        ok(daemon, "POST", "/topic/unpause?topic=ptopic")
        frame = c.read(skip_heartbeats=True)
        assert (frame.is_message, frame.body) == (True, b"held")
    finally:
        c.close()


def test_pause_channel_stops_delivery(daemon: Daemon) -> None:
    c = consumer(daemon, "pchan", "ch", 10)
    try:
        ok(daemon, "POST", "/channel/pause?topic=pchan&channel=ch")
        assert channel_of(daemon, "pchan")["paused"] is True
        ok(daemon, "POST", "/pub?topic=pchan", b"held")
        assert nothing_arrives(c)
        assert wait_for(lambda: channel_of(daemon, "pchan")["depth"] == 1)
        ok(daemon, "POST", "/channel/unpause?topic=pchan&channel=ch")
        frame = c.read(skip_heartbeats=True)
        assert (frame.is_message, frame.body) == (True, b"held")
    finally:
        c.close()


def test_empty_channel_drops_depth_and_in_flight(daemon: Daemon) -> None:
    c = consumer(daemon, "echan", "ch", 2)
    try:
        ok(daemon, "POST", "/mpub?topic=echan", b"1\n2\n3\n4\n5")
        held = [c.read(skip_heartbeats=True) for _ in range(2)]
        assert wait_for(lambda: channel_of(daemon, "echan")["depth"] == 3)
        assert channel_of(daemon, "echan")["in_flight_count"] == 2
        ok(daemon, "POST", "/channel/empty?topic=echan&channel=ch")
        after = channel_of(daemon, "echan")
        assert (after["depth"], after["in_flight_count"], after["deferred_count"]) == (0, 0, 0)
        assert after["clients"][0]["in_flight_count"] == 0
        c.send(Fin(held[0].message_id))  # no longer in flight: a non-fatal error
        frame = c.read(skip_heartbeats=True)
        assert frame.type == 1
        assert frame.data.startswith(b"E_FIN_FAILED")
        ok(daemon, "POST", "/pub?topic=echan", b"fresh")  # RDY room is back
        frame = c.read(skip_heartbeats=True)
        assert (frame.is_message, frame.body) == (True, b"fresh")
    finally:
        c.close()


def test_empty_topic_drops_the_backlog(daemon: Daemon) -> None:
    ok(daemon, "POST", "/mpub?topic=etopic", b"1\n2\n3")
    assert stats(daemon, "&topic=etopic")["topics"][0]["depth"] == 3
    ok(daemon, "POST", "/topic/empty?topic=etopic")
    assert stats(daemon, "&topic=etopic")["topics"][0]["depth"] == 0
    ok(daemon, "POST", "/channel/create?topic=etopic&channel=ch")
    assert channel_of(daemon, "etopic")["depth"] == 0


def test_delete_channel_disconnects_its_consumers(daemon: Daemon) -> None:
    c = consumer(daemon, "dchan", "ch", 1)
    try:
        ok(daemon, "POST", "/channel/delete?topic=dchan&channel=ch")
        assert c.closed_by_server()
        assert stats(daemon, "&topic=dchan")["topics"][0]["channels"] == []
    finally:
        c.close()


def test_delete_topic_disconnects_and_forgets(daemon: Daemon) -> None:
    c = consumer(daemon, "dtopic", "ch", 1)
    try:
        ok(daemon, "POST", "/pub?topic=dtopic", b"x")
        ok(daemon, "POST", "/topic/delete?topic=dtopic")
        assert c.closed_by_server()
        assert stats(daemon, "&topic=dtopic")["topics"] is None
        keep = RawClient(daemon.tcp_address)  # the daemon still works
        keep.send(Nop(), Pub("dtopic", b"y"))
        assert keep.read().data == b"OK"
        keep.close()
        assert stats(daemon, "&topic=dtopic")["topics"][0]["message_count"] == 1
    finally:
        c.close()


# ---------------------------------------------------------------------- pnsq only


def test_delete_topic_removes_its_data(nsqd: Daemon) -> None:
    ok(nsqd, "POST", "/mpub?topic=gone", b"1\n2")
    directory = nsqd.data_path / "topics" / "t-gone"
    assert directory.is_dir()
    ok(nsqd, "POST", "/topic/delete?topic=gone")
    assert not directory.exists()


def test_paused_flags_survive_a_restart(nsqd: Daemon) -> None:
    ok(nsqd, "POST", "/topic/create?topic=keep")
    ok(nsqd, "POST", "/channel/create?topic=keep&channel=ch")
    ok(nsqd, "POST", "/topic/pause?topic=keep")
    ok(nsqd, "POST", "/channel/pause?topic=keep&channel=ch")
    nsqd.kill()  # the flags were saved before the replies
    nsqd.start()
    [topic] = stats(nsqd, "&topic=keep")["topics"]
    assert (topic["paused"], topic["channels"][0]["paused"]) == (True, True)


def test_stats_partitions_addition(tmp_path: Path) -> None:
    d = pnsq_nsqd(tmp_path / "p", "--default-partitions=2").start()
    try:
        producer, c, _ = workload(d, "parts")
        [topic] = stats(d, "&topic=parts")["topics"]
        parts = topic["partitions"]
        assert [p["partition"] for p in parts] == [0, 1]
        assert sum(p["message_count"] for p in parts) == topic["message_count"] == 4
        assert sum(p["end_offset"] for p in parts) == 4
        [channel] = topic["channels"]
        cparts = channel["partitions"]
        for key in ("depth", "in_flight_count", "message_count"):
            assert sum(p[key] for p in cparts) == channel[key], key
        for p in cparts:
            assert p["lag"] == p["end_offset"] - p["confirmed_offset"]
        producer.close()
        c.close()
    finally:
        d.stop()


def test_ephemeral_topics_have_no_backend_depth(nsqd: Daemon) -> None:
    ok(nsqd, "POST", "/pub?topic=eph%23ephemeral", b"x")
    [topic] = stats(nsqd, "&topic=eph%23ephemeral")["topics"]
    assert (topic["depth"], topic["backend_depth"]) == (1, 0)
    ok(nsqd, "POST", "/pub?topic=durable", b"x")
    [topic] = stats(nsqd, "&topic=durable")["topics"]
    assert (topic["depth"], topic["backend_depth"]) == (1, 1)  # everything is on disk
