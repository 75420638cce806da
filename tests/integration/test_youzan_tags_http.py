"""youzan's dispatch tags and ext filters on ext topics, and youzan's own nsqd HTTP endpoints,
in the flows youzan go-nsq's ``consumerTagTest`` and producer tests use: ``EnsureTopicWithExt``
(INTERNAL_CREATE_TOPIC), ``/pub_ext?ext=`` with ``##client_dispatch_tag``, a tagged and an
untagged consumer on one channel."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol import Rdy, Req, Sub
from tests.daemons import Daemon, pnsq_nsqd
from tests.rawclient import RawClient
from tests.youzan import decode, fin, get_json, next_message, post

pytestmark = pytest.mark.integration


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Daemon]:
    d = pnsq_nsqd(tmp_path / "nsqd").start()
    try:
        client = RawClient(d.tcp_address)
        client.send(b"INTERNAL_CREATE_TOPIC yzt 0 true\n")
        assert client.read().data == b"OK"
        client.close()
        yield d
    finally:
        d.stop()


def _pub_ext(d: Daemon, body: bytes, header: dict[str, str], **headers: str) -> tuple[int, bytes]:
    query = urllib.parse.quote(json.dumps(header))
    request = urllib.request.Request(
        f"http://{d.http_address}/pub_ext?topic=yzt&ext={query}",
        data=body,
        method="POST",
        headers=headers,
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, response.read()


def _consumer(d: Daemon, **identify: object) -> RawClient:
    client = RawClient(d.tcp_address, timeout=1.0)
    client.identify(extend_support=True, **identify)
    client.send(b"SUB yzt ch 0\n", b"RDY 100\n")
    assert client.read().data == b"OK"
    return client


def _drain(client: RawClient) -> list[bytes]:
    """Bodies until nothing comes for a second, each FINed."""
    bodies = []
    while True:
        try:
            frame = next_message(client)
        except TimeoutError:
            return bodies
        message = decode(frame, ext=True)
        bodies.append(message.body)
        fin(client, message.message_id)


def test_tagged_messages_go_to_their_tag_only(node: Daemon) -> None:
    tagged = _consumer(node, desired_tag="X")
    untagged = _consumer(node)
    for i in range(4):
        _pub_ext(node, b"x%d" % i, {"##client_dispatch_tag": "X"})
        _pub_ext(node, b"y%d" % i, {"##client_dispatch_tag": "Y"})  # nobody has tag Y
        _pub_ext(node, b"p%d" % i, {"k": "v"})
    got_tagged, got_plain = _drain(tagged), _drain(untagged)
    assert sorted(got_tagged) == [b"x0", b"x1", b"x2", b"x3"]
    assert sorted(got_plain) == sorted(
        [b"y%d" % i for i in range(4)] + [b"p%d" % i for i in range(4)]
    )
    stats = get_json(node.http_address, "/stats?format=json&topic=yzt")
    topic = stats["topics"][0]
    assert (topic["is_ext"], topic["is_multi_ordered"], topic["topic_partition"]) == (
        True,
        False,
        "0",
    )
    tags = sorted(c["desired_tag"] for c in topic["channels"][0]["clients"])
    assert tags == ["", "X"]
    # the tagged consumer leaves: its tag's messages now go to the others
    tagged.close()
    _pub_ext(node, b"late", {"##client_dispatch_tag": "X"})
    assert _drain(untagged) == [b"late"]
    untagged.close()


def test_ext_filter_drops_non_matching_messages(node: Daemon) -> None:
    flt = {"type": 1, "filter_ext_key": "color", "filter_data": "red"}
    consumer = _consumer(node, ext_filter=flt)
    _pub_ext(node, b"a", {"color": "red"})
    _pub_ext(node, b"b", {"color": "blue"})
    _pub_ext(node, b"c", {}, **{"X-Nsqext-Color": "red"})  # header merged, lower-cased key
    assert sorted(_drain(consumer)) == [b"a", b"c"]
    channel = get_json(node.http_address, "/stats?format=json&topic=yzt")["topics"][0]["channels"]
    assert (channel[0]["depth"], channel[0]["in_flight_count"]) == (0, 0)  # b confirmed unsent
    consumer.close()


def test_youzan_http_endpoints(node: Daemon) -> None:
    status, body = _pub_ext(node, b"t", {"##trace_id": "77"})
    reply = json.loads(body)
    assert (status, reply["status"], reply["trace_id"], reply["queue_offset"]) == (
        200,
        "OK",
        "77",
        0,
    )
    status, body = post(node.http_address, "/pubtrace?topic=yzt&trace_id=88", b"u")
    reply2 = json.loads(body)
    assert (status, reply2["trace_id"], reply2["queue_offset"]) == (200, "88", 1)
    assert post(node.http_address, "/pubtrace?topic=yzt&trace_id=x", b"u")[0] == 400
    nested = "%5B" * 5000  # a header too deep to decode: one 400, no 500
    assert post(node.http_address, f"/pub_ext?topic=yzt&partition=0&ext={nested}", b"u") == (
        400,
        b'{"message":"E_INVALID_JSON_HEADER"}',
    )
    got = get_json(
        node.http_address, f"/message/get?topic=yzt&search_mode=id&search_pos={reply['id']}"
    )
    assert (got["body"], got["trace_id"], got["offset"]) == ("t", 77, 0)
    got = get_json(
        node.http_address,
        "/message/get?topic=yzt&partition=0&search_mode=virtual_offset&search_pos=1&needext=true",
    )
    assert (got["body"], got["id"]) == ("u", reply2["id"])

    consumer = _consumer(node)  # gets both; finish the first through the API
    first = decode(next_message(consumer), ext=True)
    query = f"topic=yzt&partition=0&channel=ch&msgid={first.internal_id}"
    assert post(node.http_address, f"/message/finish?{query}") == (200, b"")
    channel = get_json(node.http_address, "/stats?format=json&topic=yzt")["topics"][0]["channels"][
        0
    ]
    assert channel["partitions"][0]["confirmed_offset"] >= 1
    consumer.close()

    for path in (
        "skip",
        "unskip",
        "skipZanTest",
        "unskipZanTest",
        "emptydelayed",
        "requeuedelayed",
    ):
        assert post(node.http_address, f"/channel/{path}?topic=yzt&channel=ch") == (200, b""), path
    assert post(node.http_address, "/channel/setorder?topic=yzt&channel=ch&order=true") == (
        200,
        b"",
    )
    assert post(node.http_address, "/channel/setorder?topic=yzt&channel=ch&order=x")[0] == 400
    assert post(node.http_address, "/channel/skip?topic=yzt&channel=nope")[0] == 404


def _busy_tag_and_plain(node: Daemon) -> tuple[RawClient, RawClient]:
    """A consumer of tag X with RDY 0 (busy) and an untagged one with RDY 1, both on ch."""
    tagged = RawClient(node.tcp_address, timeout=1.0)
    tagged.identify(extend_support=True, desired_tag="X")
    tagged.send(b"SUB yzt ch 0\n")
    assert tagged.read().data == b"OK"
    plain = RawClient(node.tcp_address, timeout=2.0)
    plain.identify(extend_support=True)
    plain.send(b"SUB yzt ch 0\n", b"RDY 1\n")
    assert plain.read().data == b"OK"
    return tagged, plain


def test_an_untagged_consumer_is_not_stuck_behind_a_message_held_for_a_busy_tag(
    node: Daemon,
) -> None:
    """A message for tag X waits for X's consumer (here: RDY 0), and never stops an
    untagged consumer with RDY 1 from getting the untagged messages behind it."""
    tagged, plain = _busy_tag_and_plain(node)
    _pub_ext(node, b"for-x", {"##client_dispatch_tag": "X"})
    for i in range(3):
        _pub_ext(node, b"p%d" % i, {"k": "v"})
    assert _drain(plain) == [b"p0", b"p1", b"p2"]
    held = get_json(node.http_address, "/stats?format=json&topic=yzt")
    assert isinstance(held, dict)
    assert held["topics"][0]["channels"][0]["depth"] == 1  # waiting for its tag
    tagged.send(b"RDY 5\n")
    assert _drain(tagged) == [b"for-x"]
    stats = get_json(node.http_address, "/stats?format=json&topic=yzt")
    assert isinstance(stats, dict)
    (channel,) = stats["topics"][0]["channels"]
    assert channel["depth"] == 0


def test_message_finish_of_a_message_held_for_a_busy_tag(node: Daemon) -> None:
    """A message an untagged consumer passed over, held for tag X's consumer (RDY 0), is
    confirmed by /message/finish and never delivered to X afterwards."""
    tagged, plain = _busy_tag_and_plain(node)
    _pub_ext(node, b"for-x", {"##client_dispatch_tag": "X"})  # offset 0: internal id 1
    _pub_ext(node, b"p0", {"k": "v"})
    assert _drain(plain) == [b"p0"]  # for-x is held for X now
    query = "topic=yzt&partition=0&channel=ch&msgid=1"
    assert post(node.http_address, f"/message/finish?{query}") == (200, b"")
    tagged.send(b"RDY 5\n")
    assert _drain(tagged) == []
    stats = get_json(node.http_address, "/stats?format=json&topic=yzt")
    assert isinstance(stats, dict)
    (channel,) = stats["topics"][0]["channels"]
    assert channel["depth"] == 0
    assert channel["partitions"][0]["confirmed_offset"] == 2


def test_message_finish_of_messages_not_read_yet(node: Daemon) -> None:
    """/message/finish before any consumer read them: the head and a later message are never
    delivered; an id past the log's end is 404."""
    assert post(node.http_address, "/channel/create?topic=yzt&channel=ch")[0] == 200
    ids = []
    for body in (b"m0", b"m1", b"m2"):
        status, reply = post(node.http_address, "/pubtrace?topic=yzt&trace_id=1", body)
        assert status == 200
        ids.append(json.loads(reply)["id"])
    for internal in (ids[0], ids[2]):
        query = f"topic=yzt&partition=0&channel=ch&msgid={internal}"
        assert post(node.http_address, f"/message/finish?{query}") == (200, b"")
    query = f"topic=yzt&partition=0&channel=ch&msgid={ids[2] + 5}"
    assert post(node.http_address, f"/message/finish?{query}")[0] == 404
    consumer = _consumer(node)
    assert _drain(consumer) == [b"m1"]
    consumer.close()


def test_message_get_reports_the_attempts_so_far(tmp_path: Path) -> None:
    d = pnsq_nsqd(tmp_path / "plain").start()
    try:
        assert post(d.http_address, "/pub?topic=att", b"once")[0] == 200
        query = "/message/get?topic=att&partition=0&search_mode=virtual_offset&search_pos=0"
        assert get_json(d.http_address, query)["attempts"] == 0  # not delivered yet
        client = RawClient(d.tcp_address, timeout=10)
        client.send(Sub("att", "ch"), Rdy(1))
        assert client.read().data == b"OK"
        first = client.read(skip_heartbeats=True)
        assert (first.attempts, get_json(d.http_address, query)["attempts"]) == (1, 1)
        client.send(Req(first.message_id, 0))
        again = client.read(skip_heartbeats=True)
        assert (again.attempts, get_json(d.http_address, query)["attempts"]) == (2, 2)
        client.send(Req(again.message_id, 60_000))  # deferred: still counted
        assert get_json(d.http_address, query)["attempts"] == 2
        client.close()
    finally:
        d.stop()
