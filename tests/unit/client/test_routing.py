"""Partition choice and the /partitions document (pnsq.client.routing): pure, no daemon."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from pnsq.client.errors import PartitionsUnknownError
from pnsq.client.routing import (
    RoundRobin,
    RoutingError,
    TopicPartitions,
    choose_partition,
    chunk_bodies,
    group_by_partition,
    parse_partitions,
    partition_for_key,
)


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3_x86_32 written from the reference (smhasher), to check mmh3 independently."""
    c1, c2, mask = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF
    h = seed
    rounded = len(data) - len(data) % 4
    for i in range(0, rounded, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * c2) & mask
        h ^= k
        h = ((h << 13) | (h >> 19)) & mask
        h = (h * 5 + 0xE6546B64) & mask
    k = 0
    tail = data[rounded:]
    for i in reversed(range(len(tail))):
        k = (k << 8) | tail[i]
    if tail:
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * c2) & mask
        h ^= k
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & mask
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & mask
    h ^= h >> 16
    return h


# Published MurmurHash3_x86_32 (seed 0) values; go's spaolacci/murmur3 New32() gives the same.
KNOWN = [
    (b"", 0),
    (b"a", 0x3C2569B2),
    (b"hello", 0x248BFA47),
    (b"Hello, world!", 0xC0363E43),
    (b"The quick brown fox jumps over the lazy dog", 0x2E4FF723),
]


@pytest.mark.parametrize(("key", "expected"), KNOWN)
def test_murmur3_reference_values(key: bytes, expected: int) -> None:
    assert murmur3_32(key) == expected
    for n in (1, 2, 3, 4, 7, 16, 255):
        assert partition_for_key(key, n) == expected % n


def test_key_partition_is_unsigned_like_go() -> None:
    # "foo" hashes to 0xF6A5C420: negative as a signed 32-bit value. go-nsq does
    # int(uint32) % n; a signed modulo would give another partition for n = 7.
    assert murmur3_32(b"foo") == 0xF6A5C420
    assert partition_for_key("foo", 7) == 0xF6A5C420 % 7
    assert (0xF6A5C420 - (1 << 32)) % 7 != 0xF6A5C420 % 7
    assert partition_for_key(b"foo", 7) == partition_for_key("foo", 7)


def test_str_keys_hash_as_utf8() -> None:
    assert partition_for_key("clé", 13) == murmur3_32("clé".encode()) % 13


@given(st.binary(max_size=64), st.integers(1, 1023))
def test_partition_for_key_matches_reference(key: bytes, n: int) -> None:
    assert partition_for_key(key, n) == murmur3_32(key) % n


def test_partition_num_must_be_positive() -> None:
    with pytest.raises(ValueError, match="partition_num"):
        partition_for_key("k", 0)


def _route(n: int) -> TopicPartitions:
    doc = {
        "topic": "t",
        "partition_num": n,
        "ordered": True,
        "ext": False,
        "node": {"broadcast_address": "box", "tcp_port": 4150, "http_port": 4151},
        "partitions": [
            {
                "partition": p,
                "earliest": 0,
                "latest": p,
                "leader": {"broadcast_address": "box", "tcp_port": 4150, "http_port": 4151},
            }
            for p in range(n)
        ],
    }
    return parse_partitions(doc, http_address="127.0.0.1:4151", tcp_address="127.0.0.1:4150")


def test_choose_partition_explicit_keyed_round_robin() -> None:
    rr = RoundRobin()
    route = _route(4)
    assert choose_partition(route, "t", rr, partition=2, key="x") == 2
    assert choose_partition(route, "t", rr, key="a") == 0x3C2569B2 % 4
    assert [choose_partition(route, "t", rr) for _ in range(6)] == [0, 1, 2, 3, 0, 1]
    assert choose_partition(route, "other", rr) == 0  # counters are per topic
    assert choose_partition(_route(1), "t", rr) == 0


def test_choose_partition_without_route() -> None:
    rr = RoundRobin()
    assert choose_partition(None, "t", rr) is None  # nsqd picks
    assert choose_partition(None, "t", rr, partition=3) == 3
    with pytest.raises(PartitionsUnknownError):
        choose_partition(None, "t", rr, key="k")


def test_parse_partitions_maps_the_answering_node_to_the_callers_addresses() -> None:
    route = _route(2)
    assert route.partition_num == 2
    assert route.ordered
    assert not route.ext
    info = route.get(1)
    assert info is not None
    assert (info.tcp_address, info.http_address) == ("127.0.0.1:4150", "127.0.0.1:4151")
    assert (info.earliest, info.latest) == (0, 1)
    assert route.get(5) is None


def test_parse_partitions_keeps_other_leaders_advertised_addresses() -> None:
    doc = {
        "topic": "t",
        "partition_num": 1,
        "node": {"broadcast_address": "a", "tcp_port": 1, "http_port": 2},
        "partitions": [
            {
                "partition": 0,
                "earliest": 3,
                "latest": 9,
                "leader": {"broadcast_address": "::1", "tcp_port": 5, "http_port": 6},
            }
        ],
    }
    route = parse_partitions(doc, http_address="a:2")
    info = route.partitions[0]
    assert (info.tcp_address, info.http_address) == ("[::1]:5", "[::1]:6")


@pytest.mark.parametrize(
    "doc",
    [
        [],
        {"topic": 1},
        {"topic": "t", "partition_num": "2", "node": {}, "partitions": []},
        {
            "topic": "t",
            "partition_num": 1,
            "node": {"broadcast_address": "a", "tcp_port": 1, "http_port": 2},
            "partitions": [{"partition": 0}],
        },
    ],
)
def test_parse_partitions_rejects_bad_documents(doc: object) -> None:
    with pytest.raises(RoutingError):
        parse_partitions(doc, http_address="a:2")


def test_group_by_partition_keeps_order_per_key() -> None:
    keys = [f"k{i % 5}" for i in range(50)]
    bodies = [f"{k}:{i}".encode() for i, k in enumerate(keys)]
    groups = group_by_partition(bodies, keys, 3)
    assert sorted(groups) == list(groups)
    assert sorted(b for g in groups.values() for b in g) == sorted(bodies)
    for number, group in groups.items():
        for body in group:
            assert partition_for_key(body.split(b":")[0], 3) == number
        for key in {b.split(b":")[0] for b in group}:
            seq = [int(b.split(b":")[1]) for b in group if b.split(b":")[0] == key]
            assert seq == sorted(seq)
    with pytest.raises(ValueError, match="keys"):
        group_by_partition(bodies, keys[:-1], 3)


@given(st.lists(st.binary(max_size=40), min_size=1, max_size=60), st.integers(8, 200))
def test_chunk_bodies_bounds_and_order(bodies: list[bytes], max_bytes: int) -> None:
    chunks = chunk_bodies(bodies, max_bytes)
    assert [b for c in chunks for b in c] == bodies
    for chunk in chunks:
        assert chunk
        size = 4 + sum(len(b) + 4 for b in chunk)
        assert size <= max_bytes or len(chunk) == 1
