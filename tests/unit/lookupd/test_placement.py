"""lookupd's pure placement and read views, and its metadata store."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from lookupd.core.placement import (
    PlacementError,
    TopicMeta,
    TopicPlacement,
    adopt,
    assignments_for,
    check_recreate,
    copy_load,
    from_document,
    leader_load,
    place,
    place_pending,
    to_document,
)
from lookupd.core.racks import pick_spread, rack_of
from lookupd.core.registry import Registry
from lookupd.core.views import Timeouts, ViewError, listlookup, lookup, nodes, topics
from lookupd.state.store import MetadataStore, Stored, StoreError
from protocol.lookup import PartitionAssignment, assignments_payload, parse_assignments
from protocol.lookup_v1 import PeerIdentity

NODES = ["10.0.0.1:4150", "10.0.0.2:4150", "10.0.0.3:4150"]


@given(
    partitions=st.integers(1, 40),
    replica=st.integers(1, 3),
    count=st.integers(1, 3),
    load=st.lists(st.integers(0, 5), min_size=3, max_size=3),
)
def test_place_balances_leaders_and_keeps_replicas_off_the_leader(
    partitions: int, replica: int, count: int, load: list[int]
) -> None:
    nodes = NODES[:count]
    if count < replica:
        with pytest.raises(PlacementError, match="NOT_ENOUGH_NODES"):
            place("t", TopicMeta(partitions, replica), nodes)
        return
    before = dict(zip(nodes, load, strict=False))
    placement = place("t", TopicMeta(partitions, replica), nodes, before)
    assert len(placement.partitions) == partitions
    totals = {n: before.get(n, 0) for n in nodes}
    for part in placement.partitions:
        assert part.leader in nodes
        assert len(part.replicas) == replica - 1
        assert part.leader not in part.replicas
        assert len(set(part.replicas)) == len(part.replicas)
        totals[part.leader] += 1
    # least-loaded first: afterwards no node leads more than one partition above another,
    # unless it already did before this topic
    assert max(totals.values()) - min(totals.values()) <= max(1, max(load) - min(load))


def test_copies_spread_evenly_over_the_nodes() -> None:
    placement = place("t", TopicMeta(partition_num=3, replica=2), ["a", "b", "c"])
    held = dict.fromkeys("abc", 0)
    for part in placement.partitions:
        for node in (part.leader, *part.replicas):
            held[node] += 1
    assert held == {"a": 2, "b": 2, "c": 2}  # each leads one and replicates one
    assert sorted(p.leader for p in placement.partitions) == ["a", "b", "c"]


def test_two_nodes_four_partitions_alternate() -> None:
    placement = place("t", TopicMeta(4, 2), NODES[:2])
    assert [p.leader for p in placement.partitions] == [NODES[0], NODES[1], NODES[0], NODES[1]]
    assert [p.replicas for p in placement.partitions] == [
        (NODES[1],),
        (NODES[0],),
        (NODES[1],),
        (NODES[0],),
    ]
    assert leader_load([placement]) == {NODES[0]: 2, NODES[1]: 2}


def test_pending_until_nodes_exist() -> None:
    pending = place("t", TopicMeta(2), [])
    assert pending.pending
    assert place_pending([pending], []) == []
    [placed] = place_pending([pending], NODES[:1])
    assert [p.leader for p in placed.partitions] == [NODES[0]] * 2


def test_adopt_and_recreate() -> None:
    adopted = adopt("t", NODES[0], [0, 2])
    assert adopted.adopted
    assert adopted.meta.partition_num == 3
    assert {p.leader for p in adopted.partitions} == {NODES[0]}
    check_recreate(adopted, TopicMeta(8))  # an adopted topic may be re-created differently
    created = place("t", TopicMeta(2), NODES)
    check_recreate(created, TopicMeta(2))  # same settings: idempotent
    with pytest.raises(PlacementError, match="TOPIC_ALREADY_EXISTS"):
        check_recreate(created, TopicMeta(3))


def test_assignments_name_the_topics_a_node_holds() -> None:
    a = place("a", TopicMeta(1), NODES[:1])
    b = place("b", TopicMeta(2, 2), NODES[1:])
    assert [t.name for t in assignments_for(NODES[0], [a, b])] == ["a"]
    assert [t.name for t in assignments_for(NODES[2], [a, b])] == ["b"]
    document = json.loads(json.dumps(assignments_payload(NODES[2], assignments_for(NODES[2], [b]))))
    [parsed] = parse_assignments(document)
    assert (parsed.name, parsed.partition_num, parsed.replica) == ("b", 2, 2)
    assert parsed.partitions == b.partitions


def test_document_round_trip_and_store(tmp_path: Path) -> None:
    meta = TopicMeta(3, 2, extend_support=True, ordered=True, retention_days=7, sync_every=100)
    original = place("t", meta, NODES)
    assert from_document("t", json.loads(json.dumps(to_document(original)))) == original
    joined = replace(original, joined=((1, (NODES[0], NODES[2])),))  # ISR members unconfirmed
    document = to_document(joined)
    assert [p.get("joined") for p in document["partitions"]] == [None, list(NODES[::2]), None]
    assert from_document("t", json.loads(json.dumps(document))) == joined
    store = MetadataStore(tmp_path / "meta")
    assert store.load() == Stored()
    store.save([original, adopt("u", NODES[1], [0])], {"gone": 1.5})
    assert store.load().deleted == {"gone": 1.5}
    loaded = store.load().placements
    assert loaded["t"] == original
    assert loaded["u"].adopted
    assert not list((tmp_path / "meta").glob("*.tmp"))
    store.path.write_text("{broken")
    with pytest.raises(StoreError):
        store.load()


# ---------------------------------------------------------------- views


def _registry() -> Registry:
    registry = Registry()
    for i, node in enumerate(NODES[:2]):
        host, port = node.split(":")
        ident = PeerIdentity(host, int(port), 4151, "1.3.0", f"h{i}")
        registry.identify(f"10.9.9.9:{i}", ident, 100.0, partitioned=True)
        for part in range(2):
            registry.register(f"10.9.9.9:{i}", "t", None, part)
        registry.register(f"10.9.9.9:{i}", "t", "c", 0)
    return registry


def test_lookup_prefers_the_placed_leader() -> None:
    registry = _registry()
    placement = TopicPlacement(
        "t",
        TopicMeta(2),
        (PartitionAssignment(NODES[1]), PartitionAssignment(NODES[0])),
    )
    found = lookup(registry, {"t": placement}, "t", 100.0, Timeouts(), access="w", metainfo=True)
    assert list(found) == ["channels", "meta", "producers", "partitions"]
    partitions = found["partitions"]
    assert isinstance(partitions, dict)
    assert partitions["0"]["broadcast_address"] == "10.0.0.2"
    assert partitions["1"]["broadcast_address"] == "10.0.0.1"
    one = lookup(registry, {"t": placement}, "t", 100.0, Timeouts(), partition="1")
    assert list(one["partitions"]) == ["1"]  # type: ignore[arg-type]
    assert one["channels"] == []  # "c" is registered for partition 0 only
    no_meta = lookup(registry, {}, "t", 100.0, Timeouts(), metainfo=True)
    assert no_meta["meta"]["partition_num"] == 0  # type: ignore[index]


def test_lookup_of_an_unknown_topic() -> None:
    registry = Registry()
    with pytest.raises(ViewError) as caught:
        lookup(registry, {}, "nope", 0.0, Timeouts())
    assert (caught.value.status, caught.value.message) == (404, "TOPIC_NOT_FOUND")
    assert lookup(registry, {}, "nope", 0.0, Timeouts(), access="r") == {
        "channels": [],
        "producers": [],
        "partitions": {},
    }
    with pytest.raises(ViewError, match="INVALID_ACCESS_MODE"):
        lookup(registry, {}, "nope", 0.0, Timeouts(), access="x")


def test_a_deleted_topics_left_over_copies_are_listed_nowhere() -> None:
    """pnsq nodes that register a deleted topic again (lookupd restarted before they heard of
    the deletion) hold copies they are about to delete: not in /topics, not found by /lookup;
    a stock nsqd's registration of the name is listed as nsqlookupd lists it."""
    registry, deleted = _registry(), {"t"}
    assert topics(registry, {}, deleted) == {"topics": []}
    assert topics(registry, {}) == {"topics": ["t"]}
    with pytest.raises(ViewError, match="TOPIC_NOT_FOUND"):
        lookup(registry, {}, "t", 100.0, Timeouts(), deleted=deleted)
    assert (
        lookup(registry, {}, "t", 100.0, Timeouts(), access="r", deleted=deleted)["producers"] == []
    )
    youzan = PeerIdentity("10.0.0.5", 4150, 4151, "0.3.7-HA.1.9.1", "y", distributed_id="y:1")
    registry.identify("10.9.9.8:1", youzan, 100.0, partitioned=True)
    registry.register("10.9.9.8:1", "t", None, 0)
    assert topics(registry, {}, deleted) == {"topics": ["t"]}  # lookupd does not delete there
    stock = Registry()
    stock.identify("10.9.9.7:1", PeerIdentity("10.0.0.4", 4150, 4151, "1.3.0", "s"), 100.0)
    stock.register("10.9.9.7:1", "t")
    assert topics(stock, {}, deleted) == {"topics": ["t"]}
    assert len(lookup(stock, {}, "t", 100.0, Timeouts(), deleted=deleted)["producers"]) == 1  # type: ignore[arg-type]


def test_tombstones_hide_from_writers_not_youzan_readers() -> None:
    registry = _registry()
    registry.tombstone("t", "10.0.0.1:4151", 100.0)
    producers = {
        access: [
            p["broadcast_address"]
            for p in lookup(registry, {}, "t", 101.0, Timeouts(), access=access)["producers"]
        ]  # type: ignore[union-attr]
        for access in (None, "r", "w")
    }
    assert producers == {None: ["10.0.0.2"], "r": ["10.0.0.1", "10.0.0.2"], "w": ["10.0.0.2"]}


def test_nodes_topics_and_listlookup_shapes() -> None:
    registry = _registry()
    [first, _] = nodes(registry, 100.0, Timeouts())["producers"]  # type: ignore[misc]
    assert list(first) == [
        "remote_address", "hostname", "broadcast_address", "tcp_port", "http_port", "version",
        "tombstones", "topics", "partitions",
    ]  # fmt: skip
    assert first["partitions"] == {"t": ["0", "1"]}
    assert nodes(registry, 1000.0, Timeouts())["producers"] == []  # inactive
    with_meta = topics(registry, {}, meta_info=True)
    assert with_meta["meta_info"][0]["registered_channels"] == ["c"]  # type: ignore[index]
    listed = listlookup("10.0.0.9", 4160, 4161)
    assert listed["lookupdleader"] == listed["lookupdnodes"][0]  # type: ignore[index]
    assert list(listed["lookupdleader"]) == [
        "ID",
        "NodeIP",
        "TcpPort",
        "HttpPort",
        "RpcPort",
        "Epoch",
    ]  # type: ignore[arg-type]
    assert listed["lookupdleader"]["TcpPort"] == "4160"  # type: ignore[index]


def test_replicas_go_to_another_rack_while_one_has_room() -> None:
    # a and b share rack r1: without racks, b (fewest copies, node id) would replicate a's
    # partition; with them, every partition has its two copies on two racks
    racks = {"a": "r1", "b": "r1", "c": "r2", "d": "r3"}
    placement = place("t", TopicMeta(partition_num=4, replica=2), list(racks), racks=racks)
    for part in placement.partitions:
        assert racks[part.leader] != racks[part.replicas[0]], part


def test_three_copies_on_two_racks_share_one_only_when_they_must() -> None:
    racks = {"a": "r1", "b": "r1", "c": "r2"}
    placement = place("t", TopicMeta(partition_num=3, replica=3), list(racks), racks=racks)
    for part in placement.partitions:
        copies = [racks[n] for n in (part.leader, *part.replicas)]
        assert sorted(set(copies)) == ["r1", "r2"]  # both racks used, then one shared


def test_nodes_without_a_rack_are_racks_of_their_own() -> None:
    assert rack_of("a", {}) == "node:a"
    assert rack_of("a", {"a": ""}) == "node:a"
    assert rack_of("a", {"a": "r"}) == "r"
    assert pick_spread(["b", "c"], ["a"], {"a": "r", "b": "r"}, 1, lambda n: (n,)) == ("c",)
    assert pick_spread(["b", "c"], ["a"], {}, 2, lambda n: (n,)) == ("b", "c")


@pytest.mark.parametrize(("partitions", "replica", "nodes"), [(200, 2, 3), (7, 3, 4), (5, 2, 3)])
def test_topic_after_topic_the_copies_stay_even(partitions: int, replica: int, nodes: int) -> None:
    """Each topic's replicas went to the nodes holding the fewest of its partitions, ties by
    name: topic after topic the same node took the odd replica (30 topics of 200 partitions
    on 3 nodes: 3,990 / 4,000 / 4,010 copies), and balancing moved copies while the topics
    were still being created. The ties now go to the node holding the fewest copies."""
    names = [f"n{i}:1" for i in range(nodes)]
    placed: list[TopicPlacement] = []
    for i in range(30):
        meta = TopicMeta(partitions, replica)
        placed.append(place(f"t{i}", meta, names, leader_load(placed), copies=copy_load(placed)))
        copies, leaders = copy_load(placed), leader_load(placed)
        assert max(copies.values()) - min(copies.values()) <= 1
        assert max(leaders.values()) - min(leaders.values()) <= 1


def test_a_topic_id_goes_with_its_placement_everywhere() -> None:
    """The id of a topic's life: in the assignment the nodes get, in the stored form, kept
    by placing a pending topic; none in a placement stored before ids."""
    pending = place("t", TopicMeta(2), [], topic_id="life-2")
    placed = place_pending([pending], NODES)[0]
    assert placed.topic_id == "life-2"
    assert placed.assignment().meta["topic_id"] == "life-2"
    assert from_document("t", to_document(placed)) == placed
    legacy = to_document(placed)
    del legacy["topic_id"]
    assert from_document("t", legacy).topic_id == ""
    assert "topic_id" not in from_document("t", legacy).assignment().meta
