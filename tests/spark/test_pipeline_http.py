"""The data source's plain-Python side against real daemons, without Spark: nsqd's
``/partition/offset``, partition discovery through nsqd and through nsqlookupd, range reads
(failover retry, lost tails) and the publisher."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from pnsq.client.blocking import BlockingClient
from pnsq.client.routing import partition_for_key
from pnsq.spark.nodes import discover, offsets_for_timestamp
from pnsq.spark.options import Endpoints, ReadOptions, WriteOptions
from pnsq.spark.planning import OffsetRange, PlanningError
from pnsq.spark.reading import DataLossError, read_range
from pnsq.spark.retry import UnavailableError
from pnsq.spark.writing import Publisher, plan_route
from tests.daemons import Daemon, pnsq_lookupd, pnsq_nsqd
from tests.integration.lookupd_helpers import get_json, lookup, post, wait_for
from tests.spark.conftest import create_topic

pytestmark = pytest.mark.integration


def http_get(daemon: Daemon, path: str) -> tuple[int, object]:
    try:
        with urllib.request.urlopen(f"http://{daemon.http_address}{path}", timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_partition_offset_by_timestamp(nsqd: Daemon) -> None:
    create_topic(nsqd, "stamped", 2)
    with BlockingClient(nsqd.tcp_address, nsqd.http_address) as nsq:
        nsq.mpublish("stamped", [b"a", b"b", b"c"], partition=0)
        time.sleep(0.02)
        cut = int(time.time() * 1000)
        time.sleep(0.02)
        nsq.mpublish("stamped", [b"d", b"e"], partition=0)
    status, doc = http_get(nsqd, f"/partition/offset?topic=stamped&partition=0&timestamp={cut}")
    assert status == 200
    assert doc == {
        "topic": "stamped",
        "partition": 0,
        "timestamp": cut,
        "offset": 3,
        "earliest": 0,
        "latest": 5,
    }
    layout = discover(Endpoints(nsqd=(nsqd.http_address,)), "stamped")
    assert offsets_for_timestamp(layout, 0, 5.0) == {0: 0, 1: 0}
    assert offsets_for_timestamp(layout, cut, 5.0) == {0: 3, 1: 0}
    assert offsets_for_timestamp(layout, int(time.time() * 1000) + 60_000, 5.0) == {0: 5, 1: 0}
    for query, want in [
        ("partition=0&timestamp=1", (400, "MISSING_ARG_TOPIC")),
        ("topic=nope&partition=0&timestamp=1", (404, "TOPIC_NOT_FOUND")),
        ("topic=stamped&partition=2&timestamp=1", (404, "PARTITION_NOT_FOUND")),
        ("topic=stamped&timestamp=1", (400, "MISSING_ARG_PARTITION")),
        ("topic=stamped&partition=0", (400, "MISSING_ARG_TIMESTAMP")),
        ("topic=stamped&partition=0&timestamp=-5", (400, "INVALID_TIMESTAMP")),
    ]:
        status, doc = http_get(nsqd, f"/partition/offset?{query}")
        assert (status, doc) == (want[0], {"message": want[1]}), query


def test_discovery_over_nsqd_nodes(nsqd: Daemon, tmp_path: Path) -> None:
    other = pnsq_nsqd(tmp_path / "other").start()
    try:
        create_topic(nsqd, "only_first", 2)
        create_topic(nsqd, "on_both", 1)
        create_topic(other, "on_both", 1)
        both = Endpoints(nsqd=(other.http_address, nsqd.http_address))
        layout = discover(both, "only_first")
        assert layout.partition_num == 2
        assert {p: lead.http_address for p, lead in layout.leaders.items()} == {
            0: nsqd.http_address,
            1: nsqd.http_address,
        }
        assert layout.leaders[0].tcp_address == nsqd.tcp_address
        with pytest.raises(PlanningError, match="led by both"):
            discover(both, "on_both")
        with pytest.raises(PlanningError, match="not found"):
            discover(both, "missing")
    finally:
        other.stop()


def test_range_reads_retry_elsewhere_and_report_lost_tails(nsqd: Daemon) -> None:
    create_topic(nsqd, "ranges", 1)
    with BlockingClient(nsqd.tcp_address, nsqd.http_address) as nsq:
        nsq.mpublish("ranges", [f"m{i}".encode() for i in range(25)], partition=0)
    opts = ReadOptions(Endpoints(nsqd=(nsqd.http_address,), timeout=2.0), "ranges", fetch_size=10)
    # the planned leader is unreachable: the task looks the partition up again
    gone = OffsetRange("ranges", 0, 3, 25, "127.0.0.1:1")
    fetched = list(read_range(gone, opts))
    assert [len(records) for records in fetched] == [10, 10, 2]
    assert [r.body for records in fetched for r in records] == [
        f"m{i}".encode() for i in range(3, 25)
    ]
    unplanned = OffsetRange("ranges", 0, 20, 25)  # no address: looked up by the task
    assert [r.offset for batch in read_range(unplanned, opts) for r in batch] == list(range(20, 25))
    # a range past the end of the log (truncated by a failover): fail, or read what exists
    past = OffsetRange("ranges", 0, 20, 30, nsqd.http_address)
    with pytest.raises(DataLossError, match="ends at 25"):
        list(read_range(past, opts))
    lenient = ReadOptions(opts.endpoints, "ranges", fail_on_data_loss=False)
    assert [r.offset for batch in read_range(past, lenient) for r in batch] == list(range(20, 25))
    beyond = OffsetRange("ranges", 0, 27, 30, nsqd.http_address)
    assert list(read_range(beyond, lenient)) == []


def test_publisher_routes_by_partition_key_and_round_robin(nsqd: Daemon) -> None:
    create_topic(nsqd, "published", 3)
    opts = WriteOptions(Endpoints(nsqd=(nsqd.http_address,)), "published", batch_size=4)
    route = plan_route(opts)
    with Publisher(route, opts, traced=True) as publisher:
        publisher.add_columns(
            {
                "body": [b"k1", "k2", bytearray(b"p2"), b"rr-a", b"rr-b", b"rr-c"],
                "key": ["alpha", b"beta", "alpha", None, None, None],
                "partition": [None, None, 2, None, None, None],
                "trace_id": [1, -1, None, 4, 5, 6],
            }
        )
    report = publisher.report
    assert report.messages == sum(report.per_partition.values()) == 6
    assert sum(count for _, _, count in report.traced) == 6  # MPUB_TRACE batches
    with BlockingClient(http_address=nsqd.http_address) as nsq:
        stored = {
            p: [(r.body, r.trace_id) for r in nsq.read_range("published", p, 0, 100).records]
            for p in range(3)
        }
    assert (b"k1", 1) in stored[partition_for_key("alpha", 3)]
    assert (b"k2", (1 << 64) - 1) in stored[partition_for_key(b"beta", 3)]
    assert (b"p2", 0) in stored[2]
    round_robin = {p for p, msgs in stored.items() for body, _ in msgs if body.startswith(b"rr-")}
    assert round_robin == {0, 1, 2}
    with Publisher(route, opts, traced=False) as publisher, pytest.raises(ValueError, match="null"):
        publisher.add(None)


def test_discovery_through_lookupd(tmp_path: Path) -> None:
    lookupd = pnsq_lookupd(tmp_path / "lookupd").start()
    nodes: list[Daemon] = []
    try:
        for name in ("a", "b"):
            flag = f"--lookupd-tcp-address={lookupd.tcp_address}"
            nodes.append(pnsq_nsqd(tmp_path / name, flag).start())
        wait_for(lambda: len(get_json(lookupd, "/nodes")["producers"]) == 2, what="2 nodes")
        assert post(lookupd, "/topic/create?topic=looked_up&partition_num=4")[0] == 200

        def placed() -> dict[str, object] | None:
            found = lookup(lookupd, "looked_up", "&access=r")
            if found and len(found["partitions"]) == 4 and len(found["producers"]) == 2:
                return dict(found)
            return None

        found = wait_for(placed, what="placement")
        by_port = {n.http_port: n for n in nodes}
        leaders = {int(p): by_port[peer["http_port"]] for p, peer in found["partitions"].items()}
        assert {n.http_port for n in leaders.values()} == set(by_port)
        for p, node in leaders.items():
            with BlockingClient(node.tcp_address, node.http_address) as nsq:
                nsq.mpublish("looked_up", [f"p{p}-{i}".encode() for i in range(p + 1)], partition=p)

        endpoints = Endpoints(lookupd=("127.0.0.1:1", lookupd.http_address), timeout=2.0)
        layout = discover(endpoints, "looked_up")
        assert {p: lead.http_address for p, lead in layout.leaders.items()} == {
            p: node.http_address for p, node in leaders.items()
        }
        assert layout.latest() == {p: p + 1 for p in range(4)}
        opts = ReadOptions(endpoints, "looked_up")
        for p, info in layout.infos().items():
            r = OffsetRange("looked_up", p, info.earliest, info.latest, info.address)
            assert [m.body for b in read_range(r, opts) for m in b] == [
                f"p{p}-{i}".encode() for i in range(p + 1)
            ]
        with pytest.raises(PlanningError, match="not found"):
            discover(endpoints, "never_created")
    finally:
        for node in nodes:
            node.stop()
        lookupd.stop()


def test_a_write_creates_a_missing_topic_on_nsqd(nsqd: Daemon) -> None:
    endpoints = Endpoints(nsqd=(nsqd.http_address,))
    with pytest.raises(PlanningError, match="not found"):
        discover(endpoints, "made_by_write")
    route = plan_route(WriteOptions(endpoints, "made_by_write", partitions=3))
    assert (route.partition_num, sorted(route.leaders)) == (3, [0, 1, 2])
    assert discover(endpoints, "made_by_write").partition_num == 3
    # without partitions: nsqd's --default-partitions, as a PUB of the name would
    assert plan_route(WriteOptions(endpoints, "default_sized")).partition_num == 1
    # an existing topic is left as it is
    assert plan_route(WriteOptions(endpoints, "made_by_write", partitions=5)).partition_num == 3
    with pytest.raises(PlanningError, match=r"creating topic 'huge'.*PARTITION_NUM"):
        plan_route(WriteOptions(endpoints, "huge", partitions=1_000_000))


def test_a_write_creates_a_missing_topic_through_lookupd(tmp_path: Path) -> None:
    lookupd = pnsq_lookupd(tmp_path / "lookupd").start()
    nodes: list[Daemon] = []
    try:
        for name in ("a", "b"):
            flag = f"--lookupd-tcp-address={lookupd.tcp_address}"
            nodes.append(pnsq_nsqd(tmp_path / name, flag).start())
        wait_for(lambda: len(get_json(lookupd, "/nodes")["producers"]) == 2, what="2 nodes")
        endpoints = Endpoints(lookupd=(lookupd.http_address,), timeout=2.0, retry_timeout=20.0)
        opts = WriteOptions(endpoints, "replicated_by_write", partitions=2, replicator=2)
        route = plan_route(opts)  # created on lookupd, placed, every partition led
        assert route.partition_num == 2
        by_http = {n.http_address for n in nodes}
        assert {http for _, http in route.leaders.values()} == by_http  # spread over both
        meta = lookup(lookupd, "replicated_by_write", "&metainfo=true")["meta"]
        assert (meta["partition_num"], meta["replica"]) == (2, 2)
        with Publisher(route, opts, traced=False) as publisher:
            publisher.add_columns({"body": [f"m{i}".encode() for i in range(10)]})
        assert publisher.report.per_partition == {0: 5, 1: 5}
    finally:
        for node in nodes:
            node.stop()
        lookupd.stop()


def test_unreachable_nodes_are_retried_then_named(nsqd: Daemon) -> None:
    dead = Endpoints(nsqd=("127.0.0.1:1",), timeout=1.0, retry_timeout=0.6)
    started = time.monotonic()
    with pytest.raises(UnavailableError, match=r"nsqd 127\.0\.0\.1:1: .*retryTimeoutMs"):
        plan_route(WriteOptions(dead, "anything"))
    assert time.monotonic() - started >= 0.6  # retried (0.1, 0.2, 0.3 s) before giving up
    create_topic(nsqd, "nobody_leads", 1)
    r = OffsetRange("nobody_leads", 0, 0, 5, "127.0.0.1:1")
    opts = ReadOptions(dead, "nobody_leads")
    with pytest.raises(UnavailableError, match=r"nobody_leads\[0\] at offset 0 .*127\.0\.0\.1:1"):
        list(read_range(r, opts))


def test_retry_and_creation_options() -> None:
    from pnsq.spark.options import OptionError, read_options, write_options

    base = {"nsqd": "127.0.0.1:4151", "topic": "t"}
    assert read_options(base).endpoints.retry_timeout == 60.0
    assert read_options({**base, "retryTimeoutMs": "0"}).endpoints.retry_timeout == 0.0
    written = write_options(
        {"lookupd": "h:4161", "topic": "t", "partitions": "4", "replicator": "2"}
    )
    assert (written.partitions, written.replicator) == (4, 2)
    assert (write_options(base).partitions, write_options(base).replicator) == (None, None)
    with pytest.raises(OptionError, match="replicator needs the lookupd option"):
        write_options({**base, "replicator": "2"})
    with pytest.raises(OptionError, match="partitions must be >= 1"):
        write_options({**base, "partitions": "0"})
