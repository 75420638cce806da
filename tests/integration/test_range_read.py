"""pnsq's range read for pipelines: GET /partitions and GET /partition/read against a real
daemon (records published over TCP, read back over HTTP in both formats)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from email.message import Message
from pathlib import Path

import pytest

from pnsq.client.blocking import BlockingClient
from pnsq.client.errors import NsqHTTPError
from protocol.commands import Mpub, Pub, PubTrace
from protocol.range_read import (
    NDJSON_CONTENT_TYPE,
    RangeBatch,
    decode_binary,
    decode_ndjson,
)
from tests.daemons import Daemon, pnsq_nsqd
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration

PARTITIONS = 2


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    path: Path = tmp_path_factory.mktemp("range")
    d = pnsq_nsqd(path / "data", f"--default-partitions={PARTITIONS}").start()
    try:
        yield d
    finally:
        d.stop()


def http(
    daemon: Daemon, path: str, method: str = "GET", **params: object
) -> tuple[int, bytes, Message]:
    query = urllib.parse.urlencode(params)
    url = f"http://{daemon.http_address}{path}" + (f"?{query}" if query else "")
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def publish(daemon: Daemon, *commands: Pub | Mpub | PubTrace) -> None:
    """Publish over a raw TCP connection, each command answered before the next."""
    raw = RawClient(daemon.tcp_address)
    try:
        raw.identify()
        for command in commands:
            raw.send(command)
            frame = raw.read(skip_heartbeats=True)
            assert frame.data.startswith(b"OK"), frame
    finally:
        raw.close()


def read(daemon: Daemon, topic: str, partition: int, offset: int, **params: object) -> bytes:
    status, body, _ = http(
        daemon, "/partition/read", topic=topic, partition=partition, offset=offset, **params
    )
    assert status == 200, body
    return body


def test_partitions_describe_offsets_and_leader(daemon: Daemon) -> None:
    publish(daemon, Mpub("rr-meta", [b"a", b"b", b"c"], 0), Pub("rr-meta", b"d", 1))
    status, body, headers = http(daemon, "/partitions", topic="rr-meta")
    assert status == 200
    assert headers["Content-Type"] == "application/json; charset=utf-8"
    doc = json.loads(body)
    node = {
        "broadcast_address": "127.0.0.1",
        "tcp_port": daemon.tcp_port,
        "http_port": daemon.http_port,
    }
    assert doc == {
        "topic": "rr-meta",
        "partition_num": PARTITIONS,
        "ordered": False,
        "ext": False,
        "ephemeral": False,
        "node": node,
        "partitions": [
            {"partition": 0, "earliest": 0, "latest": 3, "leader": node},
            {"partition": 1, "earliest": 0, "latest": 1, "leader": node},
        ],
        "replicas": [],  # standalone: this node leads every partition it has
    }


def test_read_returns_the_records_and_the_same_bytes_twice(daemon: Daemon) -> None:
    bodies = [f"message {i}".encode() * (i + 1) for i in range(20)]
    publish(daemon, Mpub("rr-same", bodies[:10], 1), PubTrace("rr-same", 77, bodies[10], 1))
    publish(daemon, Mpub("rr-same", bodies[11:], 1))
    first = read(daemon, "rr-same", 1, 0, max=100)
    assert read(daemon, "rr-same", 1, 0, max=100) == first
    batch = decode_binary(first)
    assert (batch.partition, batch.first_offset, batch.next_offset) == (1, 0, 20)
    assert [r.body for r in batch.records] == bodies
    assert [r.offset for r in batch.records] == list(range(20))
    assert [r.internal_id for r in batch.records] == [(1 << 50) | (o + 1) for o in range(20)]
    assert [r.trace_id for r in batch.records] == [0] * 10 + [77] + [0] * 9
    assert len({r.timestamp_ns for r in batch.records}) >= 1
    # pages of 7 give the same records
    offset, paged = 0, []
    while True:
        page = decode_binary(read(daemon, "rr-same", 1, offset, max=7))
        if not page.records:
            assert page.next_offset == offset == 20
            break
        assert len(page.records) <= 7
        paged.extend(page.records)
        offset = page.next_offset
    assert paged == list(batch.records)


def test_ndjson_carries_the_same_records(daemon: Daemon) -> None:
    publish(daemon, Mpub("rr-ndjson", [b"\x00\n\xff", b"two", b"{}"], 0))
    status, body, headers = http(
        daemon, "/partition/read", topic="rr-ndjson", partition=0, offset=1, format="ndjson"
    )
    assert status == 200
    assert headers["Content-Type"] == NDJSON_CONTENT_TYPE
    assert read(daemon, "rr-ndjson", 0, 1, format="ndjson") == body
    lines = [json.loads(line) for line in body.splitlines()]
    assert [line["offset"] for line in lines] == [1, 2]
    assert lines[0]["body"] == "dHdv"  # base64 of b"two"
    binary = decode_binary(read(daemon, "rr-ndjson", 0, 1, format="binary"))
    assert decode_ndjson(body, 0, 1) == binary


def test_empty_range_at_latest(daemon: Daemon) -> None:
    publish(daemon, Pub("rr-end", b"x", 0))
    assert decode_binary(read(daemon, "rr-end", 0, 1)) == RangeBatch(0, 1, 1, ())
    assert read(daemon, "rr-end", 0, 1, format="ndjson") == b""
    assert decode_binary(read(daemon, "rr-end", 1, 0)) == RangeBatch(1, 0, 0, ())


def test_byte_cap_bounds_a_reply(daemon: Daemon) -> None:
    big = [bytes([i]) * 1_000_000 for i in range(10)]
    publish(daemon, *(Pub("rr-big", b, 0) for b in big))
    batch = decode_binary(read(daemon, "rr-big", 0, 0, max=100))
    assert [r.body for r in batch.records] == big[:8]  # 8 MiB cap: 8 records of ~1 MB
    assert batch.next_offset == 8
    rest = decode_binary(read(daemon, "rr-big", 0, 8, max=100))
    assert [r.body for r in rest.records] == big[8:]


def test_max_is_clamped_and_defaulted(daemon: Daemon) -> None:
    publish(daemon, Mpub("rr-max", [b"%d" % i for i in range(1500)], 0))
    assert len(decode_binary(read(daemon, "rr-max", 0, 0)).records) == 1000
    assert len(decode_binary(read(daemon, "rr-max", 0, 0, max=99_999)).records) == 1500


def test_ephemeral_topic_reads_from_memory(daemon: Daemon) -> None:
    publish(daemon, Mpub("rr-eph#ephemeral", [b"m1", b"m2"], 0))
    raw = RawClient(daemon.tcp_address)  # keep the ephemeral topic alive with a channel
    try:
        batch = decode_binary(read(daemon, "rr-eph#ephemeral", 0, 0))
        assert [r.body for r in batch.records] == [b"m1", b"m2"]
        _, body, _ = http(daemon, "/partitions", topic="rr-eph#ephemeral")
        assert json.loads(body)["ephemeral"] is True
    finally:
        raw.close()


@pytest.mark.parametrize(
    ("path", "params", "status", "message"),
    [
        ("/partitions", {}, 400, "MISSING_ARG_TOPIC"),
        ("/partitions", {"topic": "bad!"}, 400, "INVALID_TOPIC"),
        ("/partitions", {"topic": "rr-nope"}, 404, "TOPIC_NOT_FOUND"),
        (
            "/partition/read",
            {"topic": "rr-nope", "partition": 0, "offset": 0},
            404,
            "TOPIC_NOT_FOUND",
        ),
        ("/partition/read", {"topic": "rr-err", "offset": 0}, 400, "MISSING_ARG_PARTITION"),
        (
            "/partition/read",
            {"topic": "rr-err", "partition": "x", "offset": 0},
            400,
            "INVALID_PARTITION",
        ),
        (
            "/partition/read",
            {"topic": "rr-err", "partition": -1, "offset": 0},
            400,
            "INVALID_PARTITION",
        ),
        (
            "/partition/read",
            {"topic": "rr-err", "partition": 9, "offset": 0},
            404,
            "PARTITION_NOT_FOUND",
        ),
        ("/partition/read", {"topic": "rr-err", "partition": 0}, 400, "MISSING_ARG_OFFSET"),
        (
            "/partition/read",
            {"topic": "rr-err", "partition": 0, "offset": "1e3"},
            400,
            "INVALID_OFFSET",
        ),
        (
            "/partition/read",
            {"topic": "rr-err", "partition": 0, "offset": 10**6},
            400,
            "OFFSET_OUT_OF_RANGE",
        ),
        (
            "/partition/read",
            {"topic": "rr-err", "partition": 0, "offset": 0, "max": 0},
            400,
            "INVALID_MAX",
        ),
        (
            "/partition/read",
            {"topic": "rr-err", "partition": 0, "offset": 0, "max": "a"},
            400,
            "INVALID_MAX",
        ),
        (
            "/partition/read",
            {"topic": "rr-err", "partition": 0, "offset": 0, "format": "xml"},
            400,
            "INVALID_FORMAT",
        ),
    ],
)
def test_errors(
    daemon: Daemon, path: str, params: dict[str, object], status: int, message: str
) -> None:
    publish(daemon, Pub("rr-err", b"only", 0))
    got, body, headers = http(daemon, path, **params)
    assert (got, json.loads(body)) == (status, {"message": message})
    assert headers["X-Nsq-Content-Type"] == "nsq; version=1.0"


def test_read_is_get_only(daemon: Daemon) -> None:
    status, body, headers = http(daemon, "/partition/read", method="POST", topic="t")
    assert (status, json.loads(body)) == (405, {"message": "METHOD_NOT_ALLOWED"})
    assert headers["Allow"] == "GET, OPTIONS"


def test_same_bytes_after_a_restart_from_disk(tmp_path: Path) -> None:
    """The tail cache is gone after a restart: the same range read from the segment files."""
    d = pnsq_nsqd(tmp_path / "data").start()
    try:
        publish(d, Mpub("rr-disk", [b"r%d" % i for i in range(300)]), PubTrace("rr-disk", 5, b"t"))
        before = read(d, "rr-disk", 0, 0, max=1000)
        d.stop()
        d.start()
        assert read(d, "rr-disk", 0, 0, max=1000) == before
        assert read(d, "rr-disk", 0, 250, max=10) == read(d, "rr-disk", 0, 250, max=10)
        _, body, _ = http(d, "/partitions", topic="rr-disk")
        assert json.loads(body)["partitions"][0]["latest"] == 301
    finally:
        d.stop()


def test_blocking_client_reads_ranges(daemon: Daemon) -> None:
    publish(daemon, Mpub("rr-blocking", [b"b%d" % i for i in range(30)], 1))
    with BlockingClient(daemon.tcp_address, daemon.http_address) as nsq:
        route = nsq.partitions("rr-blocking")
        assert route.partition_num == PARTITIONS
        info = route.get(1)
        assert info is not None
        assert (info.earliest, info.latest) == (0, 30)
        assert (info.tcp_address, info.http_address) == (daemon.tcp_address, daemon.http_address)
        batch = nsq.read_range("rr-blocking", 1, 10, 5)
        assert [r.body for r in batch.records] == [b"b%d" % i for i in range(10, 15)]
        assert batch.next_offset == 15
        with pytest.raises(NsqHTTPError) as info_error:
            nsq.read_range("rr-blocking", 1, 31)
        assert (info_error.value.status, info_error.value.message) == (400, "OFFSET_OUT_OF_RANGE")
        with pytest.raises(NsqHTTPError) as missing:
            nsq.partitions("rr-missing")
        assert missing.value.status == 404
