"""Deleting a topic on pnsq's lookupd deletes it on the nodes, and it stays deleted: a node that
was away (or kept a copy) does not bring it back. A SUB of a new topic on a node creates it
through lookupd, as a PUB does; a SUB of a topic placed on other nodes only is refused."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator

import pytest

from protocol import Mpub, Pub, PubTrace, Rdy, Sub
from tests.daemons import Daemon
from tests.integration.lookupd_helpers import (
    get_json,
    in_sync,
    lookup,
    pnsq_cluster,
    post,
    request,
    roles,
    stored,
    wait_for,
)
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, list[Daemon]]]:
    with pnsq_cluster(tmp_path_factory.mktemp("delete"), 2) as started:
        yield started


def _topic_dirs(node: Daemon, topic: str) -> list[str]:
    return [p.name for p in (node.data_path / "topics").glob(f"*{topic}*")]


def _publish(node: Daemon, topic: str, body: bytes) -> None:
    client = RawClient(node.tcp_address)
    client.send(Pub(topic, body))
    assert client.read().data == b"OK"
    client.close()


def test_a_deleted_topic_is_deleted_on_every_node_and_stays_deleted(
    nodes: tuple[Daemon, list[Daemon]],
) -> None:
    lookupd, (a, b) = nodes
    assert post(lookupd, "/topic/create?topic=doomed&partition_num=2&replicator=2") == (200, b"")
    wait_for(lambda: roles(a, "doomed") and roles(b, "doomed"), what="placed on both")
    _publish(a, "doomed", b"soon gone")
    b.stop()  # away while the topic is deleted: comes back with its copy
    assert post(lookupd, "/topic/delete?topic=doomed&partition=**") == (200, b"")
    wait_for(lambda: roles(a, "doomed") is None, what="deleted on the node that was up")
    wait_for(lambda: not _topic_dirs(a, "doomed"), what="its files removed")
    b.start()
    wait_for(lambda: roles(b, "doomed") is None, what="the returning node's copy deleted")
    wait_for(lambda: not _topic_dirs(b, "doomed"), what="its files removed")
    found = lookup(lookupd, "doomed")  # None: no key at all (a re-registration leaves one)
    assert found is None or found["producers"] == []
    stored = get_json(lookupd, f"/pnsq/assignments?node=127.0.0.1:{b.tcp_port}")
    assert "doomed" in stored["deleted"]
    assert "doomed" not in stored["topics"]


def test_a_topic_deleted_on_lookupd_closes_its_consumers_on_every_node(
    nodes: tuple[Daemon, list[Daemon]],
) -> None:
    """As nsqd closes a deleted topic's consumers: a stock consumer looks it up again. Kept
    open, it waited for ever on a connection that got nothing of the topic made again."""
    lookupd, (a, b) = nodes
    assert post(lookupd, "/topic/create?topic=gone&partition_num=2&replicator=2") == (200, b"")
    wait_for(lambda: roles(a, "gone") and roles(b, "gone"), what="placed on both")
    consumers = []
    for node in (a, b):
        consumer = RawClient(node.tcp_address)
        consumer.send(Sub("gone", "c"), Rdy(10))
        assert consumer.read().data == b"OK"
        consumers.append(consumer)
    assert post(lookupd, "/topic/delete?topic=gone&partition=**") == (200, b"")
    for consumer in consumers:
        assert consumer.closed_by_server(wait=10.0)


def _bytes_on_disk(node: Daemon, topic: str) -> bytes:
    files = (node.data_path / "topics").glob(f"*{topic}*/**/*")
    return b"".join(path.read_bytes() for path in files if path.is_file())


def test_a_copy_of_a_deleted_topic_is_not_kept_as_the_topic_made_again(
    nodes: tuple[Daemon, list[Daemon]],
) -> None:
    """A replica stopped while its topic is deleted and made again on lookupd keeps a copy of
    the first life (it never saw the tombstone): it must be deleted, not followed from its own
    end as the new topic's once it is given a copy again (the new leader's epochs start
    again), counted in sync and served once it led."""
    lookupd, (a, b) = nodes
    a_id = f"127.0.0.1:{a.tcp_port}"
    create = f"/topic/create?topic=lives&partition_num=1&prefer={a_id}"
    assert post(lookupd, create + "&replicator=2") == (200, b"")
    wait_for(lambda: roles(a, "lives") == {0: "leader"} and roles(b, "lives"), what="placed")
    _publish(a, "lives", b"first-life-message")
    wait_for(lambda: b"first-life-message" in _bytes_on_disk(b, "lives"), what="copied to b")
    assert b.proc is not None
    b.proc.send_signal(signal.SIGSTOP)  # away while the topic is deleted and made again
    try:
        wait_for(  # lookupd takes b for gone (it no longer answers b's long-poll at once)
            lambda: in_sync(lookupd, a_id, "lives") == [a_id], what="b out of the in-sync set"
        )
        assert post(lookupd, "/topic/delete?topic=lives&partition=**") == (200, b"")
        wait_for(lambda: roles(a, "lives") is None, what="deleted on a")
        assert post(lookupd, create + "&replicator=1") == (200, b"")  # b is silent: a alone
        wait_for(lambda: roles(a, "lives") == {0: "leader"}, what="made again, led by a")
        _publish(a, "lives", b"second-life-message")
    finally:
        b.proc.send_signal(signal.SIGCONT)
    # back (heard from again: lookupd places copies on it), and given a copy of the new life
    wait_for(
        lambda: post(lookupd, "/topic/meta/update?topic=lives&replicator=2") == (200, b""),
        what="a second copy placed",
    )

    def second_life_only() -> bool:
        held = _bytes_on_disk(b, "lives")
        return b"second-life-message" in held and b"first-life-message" not in held

    wait_for(second_life_only, timeout=30, what="b's copy of the first life deleted")


def test_a_nodes_own_topic_delete_of_a_placed_topic_is_refused(
    nodes: tuple[Daemon, list[Daemon]],
) -> None:
    """nsqadmin's per-node tombstone calls the node's /topic/delete: the leader's copy deleted
    alone was made again empty and its replica cut back to it (every acknowledged message
    gone). Refused now; nsqadmin's Delete (lookupd first, then each node) still answers."""
    lookupd, (a, b) = nodes
    create = f"/topic/create?topic=kept&partition_num=1&replicator=2&prefer=127.0.0.1:{a.tcp_port}"
    assert post(lookupd, create) == (200, b"")
    wait_for(lambda: roles(a, "kept") == {0: "leader"} and roles(b, "kept"), what="placed")
    for n in range(3):
        _publish(a, "kept", b"kept %d" % n)
    for node in (a, b):
        got, raw = post(node, "/topic/delete?topic=kept")
        assert (got, json.loads(raw)) == (400, {"message": "TOPIC_PLACED_BY_LOOKUPD"})
    assert roles(a, "kept") == {0: "leader"}
    assert stored(a, "kept") == 3
    assert post(lookupd, "/topic/delete?topic=kept") == (200, b"")
    for node in (a, b):  # as nsqadmin's Delete goes on: the node's own delete after lookupd's
        assert post(node, "/topic/delete?topic=kept") == (200, b"")  # done, not a warning
        assert roles(node, "kept") is None
    assert post(a, "/topic/delete?topic=never-made")[0] == 404  # what lookupd never deleted


def test_a_publish_brings_a_deleted_topic_back_as_new(nodes: tuple[Daemon, list[Daemon]]) -> None:
    lookupd, (a, _) = nodes
    _publish(a, "phoenix", b"first life")
    wait_for(lambda: lookup(lookupd, "phoenix")["producers"], what="registered")
    assert post(lookupd, "/topic/delete?topic=phoenix&partition=**") == (200, b"")
    wait_for(lambda: roles(a, "phoenix") is None, what="deleted")
    _publish(a, "phoenix", b"second life")
    assert roles(a, "phoenix")
    assert "phoenix" not in get_json(lookupd, "/pnsq/assignments?node=x:1")["deleted"]
    consumer = RawClient(a.tcp_address)
    consumer.send(Sub("phoenix", "c"))
    assert consumer.read().data == b"OK"
    consumer.send(Rdy(10))
    assert (
        consumer.read(skip_heartbeats=True).body == b"second life"
    )  # the first life's message is gone


def test_sub_of_a_new_topic_creates_it_through_lookupd(nodes: tuple[Daemon, list[Daemon]]) -> None:
    lookupd, (_a, b) = nodes
    consumer = RawClient(b.tcp_address)
    consumer.send(Sub("fresh", "c"))
    assert consumer.read().data == b"OK"
    producers = lookup(lookupd, "fresh")["producers"]
    assert {p["tcp_port"] for p in producers} >= {b.tcp_port}  # b leads a partition of it
    assert roles(b, "fresh")
    consumer.send(Rdy(1))
    _publish(b, "fresh", b"to the subscriber")
    assert consumer.read(skip_heartbeats=True).body == b"to the subscriber"


def test_sub_of_a_topic_placed_elsewhere_only_is_refused(
    nodes: tuple[Daemon, list[Daemon]],
) -> None:
    lookupd, (a, b) = nodes
    a_id = f"127.0.0.1:{a.tcp_port}"
    query = f"/topic/create?topic=yonder&partition_num=1&replicator=1&prefer={a_id}"
    assert post(lookupd, query) == (200, b"")
    wait_for(lambda: roles(a, "yonder"), what="placed on a")
    consumer = RawClient(b.tcp_address)
    consumer.send(Sub("yonder", "c"))
    assert consumer.read().data == b"E_TOPIC_NOT_EXIST "
    assert consumer.closed_by_server()
    assert roles(b, "yonder") is None  # no copy made on b


def _refused(node: Daemon, command: Pub | Mpub | PubTrace, **identify: object) -> None:
    """``command`` (naming a partition) gets the fatal E_TOPIC_NOT_EXIST and stores nothing."""
    client = RawClient(node.tcp_address)
    if identify:
        client.identify(**identify)
    client.send(command)
    assert client.read().data == b"E_TOPIC_NOT_EXIST "
    assert client.closed_by_server()


def test_a_publish_naming_a_partition_never_makes_a_topic_lookupd_does_not_place(
    nodes: tuple[Daemon, list[Daemon]],
) -> None:
    """A partition-aware publish of a topic no node holds (deleted, or never created) is
    refused; it would have made a copy lookupd does not place, and the messages acknowledged
    to it were deleted (or stranded) later."""
    lookupd, (a, b) = nodes
    assert post(lookupd, "/topic/create?topic=ended&partition_num=2&replicator=2") == (200, b"")
    wait_for(lambda: roles(a, "ended") and roles(b, "ended"), what="placed on both")
    assert post(lookupd, "/topic/delete?topic=ended&partition=**") == (200, b"")
    wait_for(lambda: roles(a, "ended") is None and roles(b, "ended") is None, what="deleted")
    for node in (a, b):
        for topic in ("ended", "never"):
            _refused(node, Pub(topic, b"x", 0))
            _refused(node, Pub(topic, b"x", -1))
            _refused(node, Mpub(topic, [b"x", b"y"], 1))
            _refused(node, PubTrace(topic, 7, b"x", 0))
            _refused(node, Pub(topic, b"x", 0, 1), pnsq_producer=f"p-{topic}")  # numbered
            url = f"http://{node.http_address}/pub?topic={topic}&partition=0"
            status, body, _ = request(url, "POST", {}, b"x")
            assert (status, body) == (404, b'{"message":"E_TOPIC_NOT_EXIST"}')
            assert roles(node, topic) is None  # nothing made here
    for topic in ("ended", "never"):
        assert not (lookup(lookupd, topic) or {}).get("producers")
    assert "ended" in get_json(lookupd, "/pnsq/assignments?node=x:1")["deleted"]


def test_topic_create_on_a_node_goes_through_lookupd_with_its_flags(
    nodes: tuple[Daemon, list[Daemon]],
) -> None:
    """nsqd's ``/topic/create`` on a cluster node has lookupd place the topic, with youzan's
    flags: made locally, lookupd adopted it without them (``extend`` was lost) and nothing
    else placed it."""
    lookupd, (a, b) = nodes
    assert post(a, "/topic/create?topic=made_here&partition_num=2&extend=true") == (200, b"")
    meta = get_json(lookupd, "/pnsq/assignments?node=x:1")
    wait_for(lambda: roles(a, "made_here"), what="placed here")
    node = f"127.0.0.1:{a.tcp_port}"
    placed = get_json(lookupd, f"/pnsq/assignments?node={node}")["topics"]["made_here"]
    assert (placed["partition_num"], placed["meta"]["extend_support"]) == (2, True)
    assert "made_here" not in meta["deleted"]
    partitions = get_json(a, "/partitions?topic=made_here")
    assert partitions["ext"] is True
    # known to lookupd now: asking another node creates no copy of its own there
    assert post(b, "/topic/create?topic=made_here") == (200, b"")
    b_id = f"127.0.0.1:{b.tcp_port}"
    placed_b = get_json(lookupd, f"/pnsq/assignments?node={b_id}")["topics"]
    parts = placed_b.get("made_here", {"partitions": {}})  # (perhaps none on b)
    wanted = sorted(
        int(n) for n, p in parts["partitions"].items() if b_id in (p["leader"], *p["replicas"])
    )
    wait_for(lambda: sorted(roles(b, "made_here") or {}) == wanted, what="b holds its placement")
    assert sorted(roles(b, "made_here") or {}) == wanted  # and nothing of its own
