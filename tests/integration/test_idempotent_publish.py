"""Numbered publishes (pnsq's idempotent publishing) on the wire, against a real pnsq nsqd: a
producer names itself in IDENTIFY (``pnsq_producer``) and numbers its publishes
(``PUB <topic> <partition> <sequence>``); a retry of stored numbers is acknowledged again
(``DUPLICATE``) and stored once, across a restart and a kill -9 too; numbers that skip ahead
are refused, not stored, and the connection stays open; a stock client sees no change."""

from __future__ import annotations

import base64
import json
import struct
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from protocol.identify import producer_id
from tests.daemons import Daemon, pnsq_nsqd
from tests.rawclient import RawClient
from tests.youzan import create_topic, decode, ext_body, next_message, sized

pytestmark = pytest.mark.integration

NAME = "orders-writer-1"
DUP = b"DUPLICATE 1"  # the reply to a retry of one stored message


def producer(address: str, name: str = NAME) -> RawClient:
    client = RawClient(address)
    reply = json.loads(client.identify(pnsq_producer=name).data)
    assert reply["pnsq_producer"] == f"{producer_id(name):016x}"
    return client


def numbered(topic: str, partition: int, sequence: int, body: bytes, cmd: str = "PUB") -> bytes:
    return f"{cmd} {topic} {partition} {sequence}\n".encode() + sized(body)


def mpub(topic: str, partition: int, sequence: int, *bodies: bytes) -> bytes:
    elements = struct.pack(">I", len(bodies)) + b"".join(sized(b) for b in bodies)
    return f"MPUB {topic} {partition} {sequence}\n".encode() + sized(elements)


def mpub_plain(topic: str) -> bytes:
    """An unnumbered MPUB of one message."""
    return f"MPUB {topic}\n".encode() + sized(struct.pack(">I", 1) + sized(b"plain"))


def replies(client: RawClient, *commands: bytes) -> list[bytes]:
    client.send(*commands)
    return [client.read(skip_heartbeats=True).data for _ in commands]


def consume(address: str, topic: str, count: int, **identify: object) -> list[bytes]:
    client = RawClient(address)
    if identify:
        client.identify(**identify)
    client.send(f"SUB {topic} c\n".encode(), b"RDY 100\n")
    assert client.read().data == b"OK"
    bodies = []
    for _ in range(count):
        frame = next_message(client)
        bodies.append(frame.body)
        client.send(b"FIN " + frame.message_id + b"\n")
    client.send(b"NOP\n")
    client.sock.settimeout(1.0)
    try:  # nothing more: each number was stored once
        extra = client.read(skip_heartbeats=True)
        raise AssertionError(f"more than {count} message(s): {extra}")
    except TimeoutError:
        pass
    client.close()
    return bodies


def test_a_retried_publish_is_acknowledged_and_stored_once(nsqd: Daemon) -> None:
    client = producer(nsqd.tcp_address)
    first = [numbered("t", 0, 0, b"a"), numbered("t", 0, 1, b"b"), mpub("t", 0, 2, b"c", b"d")]
    assert replies(client, *first) == [b"OK"] * 3
    client.close()
    again = producer(nsqd.tcp_address)  # a reconnect: every one of them sent again
    assert replies(again, *first, numbered("t", 0, 4, b"e")) == [DUP, DUP, b"DUPLICATE 2", b"OK"]
    # refused, not fatal; the commands sent right behind it (in the same write) still get
    # their own replies, in order
    gap, right_after, plain = replies(
        again, numbered("t", 0, 9, b"z"), numbered("t", 0, 5, b"f"), b"NOP\n" + mpub_plain("u")
    )
    assert gap.startswith(b"E_PUB_SEQUENCE_GAP PUB producer "), gap
    assert b"expected sequence 5, got 9" in gap
    assert (right_after, plain) == (b"OK", b"OK")
    # partly stored: only the new one is appended (a re-run batching differently)
    assert replies(again, mpub("t", 0, 5, b"f", b"g")) == [b"DUPLICATE 1"]
    again.close()
    assert consume(nsqd.tcp_address, "t", 7) == [b"a", b"b", b"c", b"d", b"e", b"f", b"g"]
    url = f"http://{nsqd.http_address}/stats?format=json&topic=t"
    with urllib.request.urlopen(url, timeout=5) as answer:
        [topic] = json.loads(answer.read())["topics"]
    assert [p["producers"] for p in topic["partitions"]] == [1]  # its numbers are kept


def test_a_number_without_a_named_producer_is_refused(nsqd: Daemon) -> None:
    client = RawClient(nsqd.tcp_address)
    reply = replies(client, numbered("t", 0, 0, b"a"))[0]
    assert reply == b"E_INVALID PUB a numbered publish needs pnsq_producer in IDENTIFY"
    assert client.closed_by_server()
    stock = RawClient(nsqd.tcp_address)  # a stock client's IDENTIFY reply has no pnsq key
    assert "pnsq_producer" not in json.loads(stock.identify().data)
    bad = RawClient(nsqd.tcp_address)
    assert bad.identify(pnsq_producer="").data.startswith(b"E_BAD_BODY IDENTIFY pnsq_producer")


def test_traced_and_ext_retries_answer_the_stored_message(nsqd: Daemon) -> None:
    create_topic(nsqd.http_address, "ext", 1, extend="true")
    client = producer(nsqd.tcp_address)
    traced = numbered("tr", 0, 0, struct.pack(">Q", 77) + b"x", cmd="PUB_TRACE")
    first, retry = replies(client, traced, traced)
    assert first == retry  # the same id, trace id, offset and size
    header = {"k": "v"}
    ext = numbered("ext", 0, 0, ext_body(header, b"one"), cmd="PUB_EXT")
    assert replies(client, ext, ext) == [b"OK", DUP]
    client.close()
    reader = RawClient(nsqd.tcp_address)
    reader.identify(extend_support=True)
    reader.send(b"SUB ext c\n", b"RDY 10\n")
    assert reader.read().data == b"OK"
    got = decode(next_message(reader), ext=True)
    assert (got.ext, got.body) == (json.dumps(header).encode(), b"one")  # no stamp seen
    url = f"http://{nsqd.http_address}/partition/read?topic=ext&partition=0&offset=0"
    with urllib.request.urlopen(url + "&format=ndjson", timeout=5) as answer:
        read = json.loads(answer.read())
    assert base64.b64decode(read["ext"]) == json.dumps(header).encode()


@pytest.mark.parametrize("stop", ["sigterm", "kill_9"])
def test_numbers_survive_a_restart(tmp_path: Path, stop: str) -> None:
    daemon = pnsq_nsqd(tmp_path / "nsqd", "--sync-every=1").start()
    try:
        client = producer(daemon.tcp_address)
        sent = [numbered("r", 0, n, b"m%d" % n) for n in range(5)]
        assert replies(client, *sent) == [b"OK"] * 5
        client.close()
        if stop == "kill_9":  # no checkpoint since: the stamps are read back from the log
            daemon.kill()
        else:
            daemon.stop()
        daemon.start()
        again = producer(daemon.tcp_address)
        assert replies(again, *sent, numbered("r", 0, 5, b"m5")) == [DUP] * 5 + [b"OK"]
        again.close()
        assert consume(daemon.tcp_address, "r", 6) == [b"m%d" % n for n in range(6)]
    finally:
        daemon.stop()


def http_pub(address: str, path: str, body: bytes, key: str | None, **params: str) -> bytes:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    headers = {} if key is None else {"Idempotency-Key": key}
    request = urllib.request.Request(
        f"http://{address}{path}?{query}", data=body, headers=headers, method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return bytes(answer.read())


def test_an_http_idempotency_key_stores_a_publish_once(nsqd: Daemon) -> None:
    address = nsqd.http_address
    create_topic(address, "keyed", 3)
    assert http_pub(address, "/pub", b"one", "order-17/paid", topic="keyed") == b"OK"
    assert http_pub(address, "/pub", b"one", "order-17/paid", topic="keyed") == b"OK"
    assert http_pub(address, "/mpub", b"a\nb", "batch-9", topic="keyed") == b"OK"
    assert http_pub(address, "/mpub", b"a\nb", "batch-9", topic="keyed") == b"OK"
    assert http_pub(address, "/pub", b"two", "order-18/paid", topic="keyed") == b"OK"
    assert http_pub(address, "/pub", b"plain", None, topic="keyed") == b"OK"
    assert http_pub(address, "/pub", b"plain", None, topic="keyed") == b"OK"  # no key: twice
    bad = urllib.request.Request(
        f"http://{address}/pub?topic=keyed", data=b"x", headers={"Idempotency-Key": "a b"}
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(bad, timeout=10)
    assert refused.value.code == 400
    assert b"INVALID_IDEMPOTENCY_KEY" in refused.value.read()
    stored = sorted(consume(nsqd.tcp_address, "keyed", 6))
    assert stored == [b"a", b"b", b"one", b"plain", b"plain", b"two"]


def test_keys_past_max_producers_are_forgotten_and_said_so(tmp_path: Path) -> None:
    """A partition remembers --max-producers numbering producers (each Idempotency-Key is one):
    past it the least recent goes, also within --producer-state-ttl, and a retry of its
    publish is stored again. Such evictions are logged (WARNING, once per minute) and counted
    in /stats (``producers_evicted``)."""
    daemon = pnsq_nsqd(tmp_path / "data", "--max-producers=3", "--sync-timeout=50ms").start()
    try:
        address = daemon.http_address
        create_topic(address, "few", 1)
        for n in range(5):
            assert http_pub(address, "/pub", b"k%d" % n, f"key-{n}", topic="few") == b"OK"
        assert http_pub(address, "/pub", b"k0", "key-0", topic="few") == b"OK"  # forgotten
        assert sorted(consume(daemon.tcp_address, "few", 6)) == sorted(
            [b"k0", b"k0", b"k1", b"k2", b"k3", b"k4"]
        )
        with urllib.request.urlopen(f"http://{address}/stats?format=json&topic=few") as reply:
            [topic] = json.loads(reply.read())["topics"]
        [partition] = topic["partitions"]
        assert (partition["producers"], partition["producers_evicted"]) == (3, 3)

        def warned() -> list[str]:
            return [line for line in daemon.log_text().splitlines() if "--max-producers=3" in line]

        for _ in range(50):
            if warned():
                break
            time.sleep(0.1)
        assert len(warned()) == 1
        assert "WARNING: PARTITION(few/0): 3 numbering producers" in warned()[0]
    finally:
        daemon.stop()


def test_a_producer_idle_past_producer_state_ttl_is_forgotten(tmp_path: Path) -> None:
    """--producer-state-ttl applies (every partition kept the 24 h default: the options were
    dropped where a partition was made): idle past it, a producer's next number is refused as
    one from a producer the partition does not know."""
    daemon = pnsq_nsqd(tmp_path / "data", "--producer-state-ttl=1s", "--sync-timeout=100ms").start()
    try:
        create_topic(daemon.http_address, "brief", 1)
        client = producer(daemon.tcp_address)
        assert replies(client, numbered("brief", 0, 0, b"a")) == [b"OK"]
        time.sleep(2.0)  # idle past the ttl: a sync pass forgets it
        [refused] = replies(client, numbered("brief", 0, 1, b"b"))
        assert refused.startswith(b"E_PUB_SEQUENCE_UNKNOWN PUB producer "), refused
        client.close()
    finally:
        daemon.stop()
