"""The pure parts of lookupd's HA mode: etcd gateway JSON, the metadata diff that becomes a
fenced transaction, and the election's decisions (times passed in, no etcd)."""

from __future__ import annotations

from lookupd.core.election import Lease, Role, decide_role
from lookupd.core.placement import TopicMeta, TopicPlacement
from lookupd.core.switches import Switches
from lookupd.ha.leadership import codec
from lookupd.state.store import Stored
from protocol.lookup import PartitionAssignment


def _stored() -> Stored:
    placement = TopicPlacement(
        "t", TopicMeta(2, replica=2), (PartitionAssignment("a:1", ("b:1",), 3, ("a:1", "b:1")),)
    )
    return Stored({"t": placement}, {"gone": 12.5})


def test_metadata_round_trips_through_keys() -> None:
    keys = codec.encode_stored(_stored())
    assert sorted(keys) == ["deleted/gone", "topics/t"]
    assert codec.decode_stored(keys) == _stored()
    draining = Stored(_stored().placements, {"gone": 12.5}, {"c:1": 30.0})
    keys = codec.encode_stored(draining)
    assert sorted(keys) == ["deleted/gone", "removing/c:1", "topics/t"]
    assert codec.decode_stored(keys) == draining
    switched = Stored(_stored().placements, switches=Switches(balance=False, upgrading_since=7.5))
    keys = codec.encode_stored(switched)
    assert keys["switches/balance"] == b"false"
    assert keys["switches/upgrading_since"] == b"7.5"
    assert codec.decode_stored(keys) == switched


def test_diff_and_fenced_txn() -> None:
    known = codec.encode_stored(_stored())
    changed = Stored({}, {"gone": 12.5, "t": 20.0})  # t deleted
    change = codec.diff(known, codec.encode_stored(changed))
    assert change.delete == ("topics/t",)
    assert list(change.put) == ["deleted/t"]
    assert not codec.diff(known, known)
    (body,) = codec.txn_batches(change, "/pnsq/c/", {"topics/t": 7}, ("/pnsq/c/leader", 5))
    compares = {(codec.unb64(c["key"]).decode(), c["target"]) for c in body["compare"]}
    assert compares == {
        ("/pnsq/c/deleted/t", "MOD"),
        ("/pnsq/c/topics/t", "MOD"),
        ("/pnsq/c/leader", "CREATE"),
    }
    revisions = {codec.unb64(c["key"]).decode(): c for c in body["compare"]}
    assert revisions["/pnsq/c/topics/t"]["mod_revision"] == "7"
    assert revisions["/pnsq/c/deleted/t"]["mod_revision"] == "0"  # must not exist yet
    assert revisions["/pnsq/c/leader"]["create_revision"] == "5"
    many = codec.Diff({f"topics/{i}": b"{}" for i in range(150)}, ())
    assert len(codec.txn_batches(many, "/p/", {}, None)) == 3


def test_gateway_replies() -> None:
    reply = {
        "header": {"revision": "9"},
        "kvs": [
            {
                "key": codec.b64("/p/leader"),
                "value": codec.b64("x"),
                "create_revision": "4",
                "mod_revision": "4",
                "lease": "77",
            }
        ],
    }
    (kv,), revision = codec.parse_range(reply)
    assert (kv.key, kv.value, kv.create_revision, kv.lease, revision) == (
        "/p/leader",
        b"x",
        4,
        77,
        9,
    )
    assert codec.parse_txn({"header": {"revision": "3"}}) == (False, 3)
    assert codec.parse_lease({"result": {"ID": "5", "TTL": "3"}}) == (5, 3)
    assert codec.parse_lease({"result": {"ID": "5"}}) == (5, 0)  # gone
    assert codec.parse_watch_line(b'{"result":{"header":{"revision":"2"},"created":true}}') == (
        2,
        0,
        False,
    )
    assert codec.prefix_end("/pnsq/c/") == "/pnsq/c0"
    node = codec.NodeInfo("1.2.3.4:4161:4160", "1.2.3.4", 4160, 4161)
    assert codec.parse_node(node.to_json()) == node
    assert node.listed()["TcpPort"] == "4160"


def test_a_leader_steps_down_before_its_lease_can_expire() -> None:
    lease = Lease(ttl=3, margin=1)
    assert decide_role(lease, 0.0, None, "me") == (Role.FOLLOWER, False)  # no lease yet
    lease.granted(42, 3, sent_at=10.0)
    assert decide_role(lease, 10.1, None, "me") == (Role.FOLLOWER, True)  # campaign
    assert decide_role(lease, 10.2, ("me", 42), "me") == (Role.LEADER, False)
    assert decide_role(lease, 10.2, ("other", 9), "me") == (Role.FOLLOWER, False)
    assert decide_role(lease, 10.2, ("me", 41), "me") == (Role.FOLLOWER, False)  # old lease
    # a keepalive sent at 11.0 answered late (at 12.5): measured from the send
    assert lease.kept_alive(3, sent_at=11.0)
    assert lease.valid(12.99)
    assert not lease.valid(13.0)  # 11.0 + 3 - 1: etcd may expire it from 14.0 on
    assert decide_role(lease, 13.0, ("me", 42), "me") == (Role.FOLLOWER, False)
    assert not lease.kept_alive(0, sent_at=13.5)  # etcd no longer has it
    assert lease.id == 0
