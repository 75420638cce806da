"""youzan's ``INTERNAL_CREATE_TOPIC <topic> <partition> [<ext>]``, as youzan go-nsq's own tests
send it (``EnsureTopic`` / ``EnsureTopicWithExt``: magic, the command, one reply, no IDENTIFY):
on a standalone node, and on nodes placed by pnsq's lookupd (which is asked for the placement)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.daemons import pnsq_nsqd
from tests.integration.lookupd_helpers import get_json, pnsq_cluster, roles, wait_for
from tests.rawclient import RawClient
from tests.youzan import decode, ext_body, next_message, pub_line

pytestmark = pytest.mark.integration


def _create(address: str, line: bytes) -> tuple[int, bytes, RawClient]:
    client = RawClient(address)
    client.send(line)
    frame = client.read()
    return frame.type, frame.data, client


def test_creates_partitions_and_ext_flag_standalone(tmp_path: Path) -> None:
    d = pnsq_nsqd(tmp_path / "nsqd").start()
    try:
        for line in (b"INTERNAL_CREATE_TOPIC yzc 0\n", b"INTERNAL_CREATE_TOPIC yzc 0\n"):
            kind, data, client = _create(d.tcp_address, line)
            assert (kind, data) == (0, b"OK")  # idempotent
            client.close()
        kind, data, client = _create(d.tcp_address, b"INTERNAL_CREATE_TOPIC yzc 2 true\n")
        assert (kind, data) == (0, b"OK")
        # the connection stays usable: a producer may PUB on it next
        client.send(pub_line("yzc", ext_body({"k": "v"}, b"hello"), 2, "PUB_EXT"))
        assert client.read().data == b"OK"
        client.close()
        doc = get_json(d, "/partitions?topic=yzc")
        assert doc["partition_num"] == 3
        assert doc["ext"] is True
        assert [p["partition"] for p in doc["partitions"]] == [0, 1, 2]

        consumer = RawClient(d.tcp_address)
        consumer.identify(extend_support=True)
        consumer.send(b"SUB yzc ch 2\n", b"RDY 1\n")
        assert consumer.read().data == b"OK"
        message = decode(next_message(consumer), ext=True)
        assert (message.body, message.ext) == (b"hello", b'{"k": "v"}')
        consumer.close()
    finally:
        d.stop()


@pytest.mark.parametrize(
    ("line", "reply"),
    [
        (b"INTERNAL_CREATE_TOPIC t\n", b"E_INVALID CREATE_TOPIC insufficient number of parameters"),
        (b"INTERNAL_CREATE_TOPIC t! 0\n", b'E_BAD_TOPIC topic name "t!" is not valid'),
        (
            b"INTERNAL_CREATE_TOPIC t x\n",
            b'E_BAD_PARTITION topic partition is not valid: strconv.Atoi: parsing "x": '
            b"invalid syntax",
        ),
        (b"INTERNAL_CREATE_TOPIC t -1\n", b"E_BAD_PARTITION partition should not less than 0"),
        (
            b"INTERNAL_CREATE_TOPIC t 0 yes\n",
            b'E_BAD_EXT topic ext is not valid: strconv.ParseBool: parsing "yes": invalid syntax',
        ),
    ],
)
def test_bad_arguments_are_youzans_fatal_errors(tmp_path: Path, line: bytes, reply: bytes) -> None:
    d = pnsq_nsqd(tmp_path / "nsqd").start()
    try:
        kind, data, client = _create(d.tcp_address, line)
        assert (kind, data) == (1, reply)
        assert client.closed_by_server()
        assert get_json(d, "/stats?format=json")["topics"] in (None, [])
    finally:
        d.stop()


def test_asks_lookupd_for_the_placement_when_managed(tmp_path: Path) -> None:
    with pnsq_cluster(tmp_path, 2) as (lookupd, (a, b)):
        kind, data, client = _create(a.tcp_address, b"INTERNAL_CREATE_TOPIC yzm 0 true\n")
        assert (kind, data) == (0, b"OK")
        client.close()
        assert roles(a, "yzm") == {0: "leader"}  # lookupd placed it: led by the asking node
        meta = get_json(lookupd, "/lookup?topic=yzm&metainfo=true")["meta"]
        assert meta["extend_support"] is True
        # asked again on the leader: OK at once; on the other node: lookupd placed it
        # elsewhere, youzan's non-fatal refusal and the connection stays open
        kind, data, client = _create(a.tcp_address, b"INTERNAL_CREATE_TOPIC yzm 0 true\n")
        assert (kind, data) == (0, b"OK")
        client.close()
        kind, data, client = _create(b.tcp_address, b"INTERNAL_CREATE_TOPIC yzm 0\n")
        assert kind == 1
        assert data.startswith(b"E_CREATE_TOPIC_FAILED CREATE_TOPIC yzm failed")
        client.send(b"INTERNAL_CREATE_TOPIC yzm2 0\n")
        assert client.read().data == b"OK"  # still open; b leads the new topic's partition
        client.close()
        wait_for(lambda: roles(b, "yzm2") == {0: "leader"}, what="yzm2 led by b")
        assert roles(a, "yzm") == {0: "leader"}  # nothing moved
