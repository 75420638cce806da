"""Partitioned topics and youzan's other extensions on the wire: ``/topic/create`` with
``partition_num``, partitioned SUB/PUB, SUB_ADVANCED consume starts, ``/channel/setoffset``,
PUB_TRACE, ext topics (PUB_EXT / MPUB_EXT, ``extend_support``), and stock pynsq / go-nsq
consumers on a 4-partition topic."""

from __future__ import annotations

import json
import struct
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsqd.broker import BrokerConfig, open_broker
from nsqd.broker.subscriptions import resolve_start
from nsqd.core.errors import ConsumeStartUnsupportedError
from nsqd.storage.record import NewRecord
from protocol.consume import ConsumeStart, StartKind
from tests.daemons import Daemon, pnsq_nsqd
from tests.interop.drivers import CLIENTS, Driver
from tests.rawclient import RawClient
from tests.youzan import (
    create_topic,
    decode,
    ext_body,
    fin,
    get_json,
    next_message,
    post,
    pub_line,
    sized,
)

pytestmark = pytest.mark.integration


def _publish(address: str, *lines: bytes) -> list[bytes]:
    client = RawClient(address)
    client.send(*lines)
    replies = [client.read().data for _ in lines]
    client.close()
    return replies


def _sub(address: str, line: bytes, rdy: int = 100, **identify: object) -> RawClient:
    client = RawClient(address)
    if identify:
        client.identify(**identify)
    client.send(line, b"RDY %d\n" % rdy)
    reply = client.read()
    assert reply.data == b"OK", reply
    return client


# ---------------------------------------------------------------------------- topic/create


def test_topic_create_with_partition_num_and_flags(tmp_path: Path) -> None:
    data = tmp_path / "nsqd"
    d = pnsq_nsqd(data, "--default-partitions=2").start()
    try:
        create_topic(d.http_address, "four", 4)
        create_topic(d.http_address, "four", 4)  # the same again: fine
        assert post(d.http_address, "/topic/create?topic=four") == (200, b"")  # nsqd's form
        assert post(d.http_address, "/topic/create?topic=four&partition_num=2") == (
            400,
            b'{"message":"TOPIC_ALREADY_EXIST"}',
        )
        assert post(d.http_address, "/topic/create?topic=four&orderedmulti=true")[0] == 400
        for bad in ("0", "x", "1024", "-1"):
            assert post(d.http_address, f"/topic/create?topic=b&partition_num={bad}") == (
                400,
                b'{"message":"INVALID_ARG_TOPIC_PARTITION_NUM"}',
            )
        assert post(d.http_address, "/topic/create?topic=dflt") == (200, b"")
        create_topic(d.http_address, "ord", 3, orderedmulti="true", extend="true")
        stats = get_json(d.http_address, "/stats?format=json")
        assert isinstance(stats, dict)
        parts = {t["topic_name"]: len(t["partitions"]) for t in stats["topics"]}
        assert parts == {"four": 4, "dflt": 2, "ord": 3}
        d.kill()  # the flags are on disk before the reply
        meta = json.loads((data / "pnsq.dat").read_text())
        flags = {t["name"]: (t["partitions"], t["ordered"], t["ext"]) for t in meta["topics"]}
        assert flags == {
            "four": (4, False, False),
            "dflt": (2, False, False),
            "ord": (3, True, True),
        }
        d.start()
        client = RawClient(d.tcp_address)
        client.send(b"SUB ord c\n")
        assert client.read().data.startswith(b"E_SUB_ORDER_IS_MUST")
    finally:
        d.stop()


# ---------------------------------------------------------------------------- SUB / PUB


def test_partitioned_sub_pub_and_plain_sub_over_all_partitions(nsqd: Daemon) -> None:
    create_topic(nsqd.http_address, "p4", 4)
    for channel in ("two", "all"):  # channels see what is published after they exist
        assert post(nsqd.http_address, f"/channel/create?topic=p4&channel={channel}")[0] == 200
    lines = [pub_line("p4", b"%d-%d" % (p, i), p) for p in range(4) for i in range(5)]
    assert _publish(nsqd.tcp_address, *lines) == [b"OK"] * 20
    only2 = _sub(nsqd.tcp_address, b"SUB p4 two 2\n")
    got = [decode(next_message(only2)) for _ in range(5)]
    assert [m.body for m in got] == [b"2-%d" % i for i in range(5)]
    assert {m.partition for m in got} == {2}
    only2.sock.settimeout(0.5)
    with pytest.raises(TimeoutError):
        next_message(only2)  # nothing of the other partitions
    every = _sub(nsqd.tcp_address, b"SUB p4 all\n")
    bodies = []
    for _ in range(20):
        m = decode(next_message(every))
        bodies.append(m.body)
        fin(every, m.message_id)
    assert sorted(bodies) == sorted(b"%d-%d" % (p, i) for p in range(4) for i in range(5))
    # PUB without partition round-robins over the node's partitions (per group-commit batch:
    # here one PUB at a time)
    producer = RawClient(nsqd.tcp_address)
    for _ in range(8):
        producer.send(pub_line("p4", b"rr"))
        assert producer.read().data == b"OK"
    seen = Counter(decode(next_message(every)).partition for _ in range(8))
    assert seen == {0: 2, 1: 2, 2: 2, 3: 2}
    for line in (b"SUB p4 c 4\n", pub_line("p4", b"x", 9), pub_line("new", b"x", 3)):
        client = RawClient(nsqd.tcp_address)
        client.send(line)
        assert client.read().data == b"E_TOPIC_NOT_EXIST "  # youzan: fatal, empty description
        assert client.closed_by_server()
    topics = get_json(nsqd.http_address, "/stats?format=json")
    assert isinstance(topics, dict)
    assert "new" not in {t["topic_name"] for t in topics["topics"]}  # nothing created


def test_pub_trace_id_is_the_second_half_of_the_message_id(nsqd: Daemon) -> None:
    trace = 0x1122334455667788
    line = pub_line("tr", struct.pack(">Q", trace) + b"body", 0, cmd="PUB_TRACE")
    reply = _publish(nsqd.tcp_address, line)[0]
    assert len(reply) == 30
    assert reply[:2] == b"OK"
    internal, trace_id, offset, raw_size = struct.unpack(">QQQI", reply[2:])
    assert (internal, trace_id, offset, raw_size) == (1, trace, 0, 4 + 4)
    consumer = _sub(nsqd.tcp_address, b"SUB tr c\n")
    m = decode(next_message(consumer))
    assert m.message_id == reply[2:18]
    assert (m.trace_id, m.body) == (trace, b"body")
    mpub = sized(struct.pack(">I", 2) + sized(struct.pack(">Q", 7) + b"a") + sized(bytes(8) + b"b"))
    traced = _publish(nsqd.tcp_address, b"MPUB_TRACE tr\n" + mpub)[0]
    assert struct.unpack(">QQQI", traced[2:]) == (2, 0, 1, 2 * 4 + 2)  # trace 0 for MPUB_TRACE


# ---------------------------------------------------------------------------- SUB_ADVANCED


def _two_phases(address: str, topic: str, count: int) -> int:
    """``count`` messages ``a<i>``, a whole-second boundary T, ``count`` messages ``b<i>``;
    returns T (unix seconds)."""
    assert (
        _publish(address, *(pub_line(topic, b"a%d" % i, 0) for i in range(count)))
        == [b"OK"] * count
    )
    now = time.time()
    boundary = int(now) + 1
    time.sleep(boundary - now + 0.05)
    assert (
        _publish(address, *(pub_line(topic, b"b%d" % i, 0) for i in range(count)))
        == [b"OK"] * count
    )
    return boundary


def test_sub_advanced_consume_starts(nsqd: Daemon) -> None:
    boundary = _two_phases(nsqd.tcp_address, "adv", 5)
    # SUB_ADVANCED always gets the detail block; go-nsq sends the partition with the start
    # (youzan's server ignores it there: pnsq does not copy that bug)
    by_time = _sub(nsqd.tcp_address, b"SUB_ADVANCED adv ts 0 timestamp:%d\n" % boundary)
    m = decode(next_message(by_time), detail=True)
    assert (m.body, m.offset, m.raw_size) == (b"b0", 5, 2 + 4)
    by_count = _sub(nsqd.tcp_address, b"SUB_ADVANCED adv cnt 0 msgcount:3\n", rdy=1)
    assert decode(next_message(by_count), detail=True).body == b"a3"
    by_offset = _sub(nsqd.tcp_address, b"SUB_ADVANCED adv off 0 virtual_queue:8\n")
    assert decode(next_message(by_offset), detail=True).body == b"b3"
    at_end = _sub(nsqd.tcp_address, b"SUB_ADVANCED adv end 0 special:-1\n")
    at_end.sock.settimeout(0.5)
    with pytest.raises(TimeoutError):
        next_message(at_end)
    at_end.sock.settimeout(5)
    # first-client rule: a second client on "cnt" does not move its cursor
    second = _sub(nsqd.tcp_address, b"SUB_ADVANCED adv cnt 0 msgcount:0\n")
    assert decode(next_message(second), detail=True).body == b"a4"
    assert _publish(nsqd.tcp_address, pub_line("adv", b"new", 0)) == [b"OK"]
    assert decode(next_message(at_end), detail=True).body == b"new"
    bad = RawClient(nsqd.tcp_address)
    bad.send(b"SUB_ADVANCED adv x 0 special:5\n")
    assert bad.read().data == b"E_INVALID not supported offset type"
    assert bad.closed_by_server()


# ---------------------------------------------------------------------------- setoffset


def test_setoffset_by_msgcount_and_timestamp_after_consuming_1000(nsqd: Daemon) -> None:
    http = nsqd.http_address
    boundary = _two_phases(nsqd.tcp_address, "so", 1000)
    consumer = _sub(nsqd.tcp_address, b"SUB so c\n", rdy=100)
    held = []
    for i in range(1000):
        m = decode(next_message(consumer))
        assert m.body == b"a%d" % i
        fin(consumer, m.message_id)
    consumer.send(b"RDY 0\n")
    consumer.sock.settimeout(0.5)
    try:
        while True:
            held.append(decode(next_message(consumer)))  # in flight, never FINed
    except TimeoutError:
        pass
    consumer.sock.settimeout(5)
    assert held  # the seek drops them and gives their RDY room back
    path = "/channel/setoffset?topic=so&channel=c&partition=0"
    assert post(http, path, b"msgcount:500") == (200, b"")
    consumer.send(b"RDY 1\n")
    again = decode(next_message(consumer))
    assert again.body == b"a500"
    assert post(http, path, b"timestamp:%d" % boundary) == (200, b"")
    assert decode(next_message(consumer)).body == b"b0"  # a500 was dropped, its room released
    consumer.send(b"FIN " + again.message_id + b"\n")  # dropped by the seek: not in flight
    assert consumer.read().data.startswith(b"E_FIN_FAILED")
    base = "/channel/setoffset?topic=so&channel=c"
    errors = [
        (base, b"", 406, "MSG_EMPTY"),
        (base, b"offset:1", 400, "invalid consume offset:offset:1"),
        (base, b"msgcount:x", 400, 'strconv.ParseInt: parsing "x": invalid syntax'),
        (base, b"special:5", 500, "not supported offset type"),
        (base + "nope", b"special:-1", 404, "CHANNEL_NOT_FOUND"),
        ("/channel/setoffset?topic=none&channel=c", b"special:-1", 404, "E_TOPIC_NOT_EXIST"),
        (base + "&partition=3", b"special:-1", 404, "E_TOPIC_NOT_EXIST"),
        (base + "&partition=x", b"special:-1", 400, 'strconv.Atoi: parsing "x": invalid syntax'),
        ("/channel/setoffset?channel=c", b"special:-1", 400, "MISSING_ARG_TOPIC"),
    ]
    for query, body, status, message in errors:
        expected = json.dumps({"message": message}, separators=(",", ":")).encode()
        assert post(http, query, body) == (status, expected)


# ---------------------------------------------------------------------------- ext topics


def test_ext_topic_publish_and_consume(nsqd: Daemon) -> None:
    create_topic(nsqd.http_address, "ext", 1, extend="true")
    header = {"k": "v", "##trace_id": "42"}
    m1 = sized(ext_body({"a": "b"}, b"m1"))
    replies = _publish(
        nsqd.tcp_address,
        pub_line("ext", ext_body(header, b"one"), cmd="PUB_EXT"),
        pub_line("ext", ext_body({"k": "v"}, b"two"), cmd="PUB_EXT"),
        pub_line("ext", b"plain"),
        b"MPUB_EXT ext\n" + sized(struct.pack(">I", 2) + sized(ext_body(b"", b"m0")) + m1),
    )
    traced = replies[0]
    assert len(traced) == 30
    internal, trace_id, offset, _ = struct.unpack(">QQQI", traced[2:])
    assert (internal, trace_id, offset) == (1, 42, 0)
    assert replies[1:] == [b"OK", b"OK", b"OK"]
    no_ext = RawClient(nsqd.tcp_address)
    no_ext.send(b"SUB ext c\n")
    assert no_ext.read().data == (
        b"E_SUB_EXTEND_NEED this topic is extended and should identify as extend support."
    )
    assert no_ext.closed_by_server()
    consumer = _sub(nsqd.tcp_address, b"SUB ext c\n", extend_support=True)
    got = [decode(next_message(consumer), ext=True) for _ in range(5)]
    assert [(m.ext_version, m.ext, m.body) for m in got] == [
        (4, json.dumps(header).encode(), b"one"),
        (4, b'{"k": "v"}', b"two"),
        (0, b"", b"plain"),
        (0, b"", b"m0"),
        (4, b'{"a": "b"}', b"m1"),
    ]
    assert got[0].trace_id == 42
    advanced = _sub(nsqd.tcp_address, b"SUB_ADVANCED ext adv 0 msgcount:0\n", extend_support=True)
    m = decode(next_message(advanced), ext=True, detail=True)  # ext block, then detail block
    assert (m.ext_version, m.offset, m.body) == (4, 0, b"one")


def test_ext_headers_on_a_plain_topic(nsqd: Daemon) -> None:
    def pub_ext(header: dict[str, str] | bytes, cmd: str = "PUB_EXT") -> bytes:
        line = pub_line("plain", ext_body(header, b"x"), cmd=cmd)
        if cmd == "MPUB_EXT":
            line = b"MPUB_EXT plain\n" + sized(struct.pack(">I", 1) + sized(ext_body(header, b"x")))
        return line

    client = RawClient(nsqd.tcp_address)
    not_supported = b"E_EXT_NOT_SUPPORT ext content not supported in topic plain"
    bad_json = b"E_INVALID_JSON_HEADER fail to parse json header"
    cases = [
        (pub_ext({"##trace_id": "7", "##client_dispatch_tag": "t"}), None),  # only ## keys
        (pub_ext({"zan_test": "false"}), b"OK"),
        (pub_ext({"custom": "1"}), not_supported),
        (pub_ext({"custom": "1"}, "MPUB_EXT"), not_supported),
        (pub_ext(b"{not json"), bad_json),
        (pub_ext(b""), bad_json),
        (pub_ext(b'{"##trace_id":7}'), b"INVALID_TRACE_ID passin trace id should be string"),
        (pub_ext({"##trace_id": "-1"}), b"INVALID_TRACE_ID invalid trace id"),
        (pub_ext(b"", "MPUB_EXT"), b"OK"),  # an empty MPUB_EXT header is a plain message
    ]
    for line, expected in cases:
        client.send(line)
        reply = client.read().data
        if expected is None:
            assert len(reply) == 30  # traced: ##trace_id
            assert reply[:2] == b"OK"
            assert struct.unpack_from(">Q", reply, 10)[0] == 7
        else:
            assert reply == expected  # none of them is fatal
    client.send(pub_line("plain", b"still open"))
    assert client.read().data == b"OK"
    forbidden = RawClient(nsqd.tcp_address)
    forbidden.identify(extend_support=True)
    forbidden.send(b"SUB plain c\n")
    assert forbidden.read().data == (
        b"E_SUB_EXTEND_FORBIDDON this topic is not extended and should not identify as "
        b"extend support."
    )
    assert forbidden.closed_by_server()
    consumer = _sub(nsqd.tcp_address, b"SUB plain c\n")
    bodies = [decode(next_message(consumer)).body for _ in range(4)]
    assert bodies == [b"x", b"x", b"x", b"still open"]  # stored plain, headers dropped


# ---------------------------------------------------------------------------- stock clients


@pytest.fixture(params=CLIENTS)
def driver(request: pytest.FixtureRequest) -> Iterator[Driver]:
    d = Driver(request.param)
    try:
        yield d
    finally:
        d.cleanup()


@pytest.mark.interop
def test_stock_consumers_get_every_partition(nsqd: Daemon, driver: Driver) -> None:
    """pynsq and go-nsq send a plain ``SUB t c``: one connection gets all four partitions."""
    assert post(nsqd.http_address, "/topic/create?topic=multi&partition_num=4") == (200, b"")
    lines = [pub_line("multi", b"msg-%d" % (p * 25 + i), p) for p in range(4) for i in range(25)]
    assert _publish(nsqd.tcp_address, *lines) == [b"OK"] * 100
    sub = driver.run(driver.sub_argv(nsqd.tcp_address, "multi", "ch", 100, timeout=30))
    assert sub.returncode == 0, sub.stderr
    bodies = [d["body"] for d in sub.deliveries]
    assert sorted(bodies) == sorted(f"msg-{i}" for i in range(100))
    partitions = {int(str(d["id_hex"])[:16], 16) >> 50 for d in sub.deliveries}
    assert partitions == {0, 1, 2, 3}


@pytest.mark.interop
def test_stock_consumers_are_refused_on_an_ordered_topic(nsqd: Daemon, driver: Driver) -> None:
    """A plain ``SUB t c`` from pynsq or go-nsq on an ordered topic gets E_SUB_ORDER_IS_MUST."""
    path = "/topic/create?topic=strict&partition_num=4&orderedmulti=true"
    assert post(nsqd.http_address, path) == (200, b"")
    sub = driver.run(driver.sub_argv(nsqd.tcp_address, "strict", "ch", 1, timeout=3))
    assert sub.returncode != 0
    assert "E_SUB_ORDER_IS_MUST" in sub.stderr
    assert not sub.deliveries


# ---------------------------------------------------------------------------- consume starts


async def test_resolve_start_on_disk_and_in_memory(tmp_path: Path) -> None:
    """The same consume starts on a partition log (time index) and an #ephemeral one (scan)."""
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        for name in ("disk", "mem#ephemeral"):
            entries = [NewRecord(timestamp_ns=(1000 + i) * 10**9, body=b"x") for i in range(10)]
            broker.publish(name, entries)
            part = broker.get_topic(name).partitions[0]
            cases = [
                (StartKind.TIMESTAMP, 1004, 4),
                (StartKind.TIMESTAMP, 999, 0),
                (StartKind.TIMESTAMP, 2000, 10),
                (StartKind.MSGCOUNT, 3, 3),
                (StartKind.MSGCOUNT, 99, 10),  # clamped to the end
                (StartKind.VIRTUAL_QUEUE, -5, 0),  # clamped to the start
                (StartKind.VIRTUAL_QUEUE, 7, 7),
                (StartKind.SPECIAL, -1, 10),
            ]
            for kind, value, offset in cases:
                assert resolve_start(part, ConsumeStart(kind, value)) == offset, (name, kind)
            with pytest.raises(ConsumeStartUnsupportedError):
                resolve_start(part, ConsumeStart(StartKind.SPECIAL, 0))


def test_http_pub_takes_a_partition_and_answers_partition_errors_like_youzan(
    tmp_path: Path,
) -> None:
    import urllib.error
    import urllib.request

    daemon = pnsq_nsqd(tmp_path / "hp").start()
    base = f"http://{daemon.http_address}"

    def post(path: str, body: bytes = b"x") -> tuple[int, bytes]:
        req = urllib.request.Request(base + path, body, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    try:
        assert post("/topic/create?topic=ho&partition_num=2&orderedmulti=true", b"")[0] == 200
        assert post("/pub?topic=ho") == (400, b'{"message":"E_BAD_PARTITION"}')
        assert post("/pub?topic=ho&partition=5") == (404, b'{"message":"E_TOPIC_NOT_EXIST"}')
        assert post("/pub?topic=ho&partition=x") == (400, b'{"message":"E_BAD_PARTITION"}')
        assert post("/pub?topic=ho&partition=1", b"one") == (200, b"OK")
        assert post("/mpub?topic=ho&partition=1", b"two\nthree") == (200, b"OK")
        with urllib.request.urlopen(f"{base}/partitions?topic=ho", timeout=5) as r:
            latest = {p["partition"]: p["latest"] for p in json.loads(r.read())["partitions"]}
        assert latest == {0: 0, 1: 3}
    finally:
        daemon.stop()
