"""nsqlookupd HA on a real etcd (``--cluster-id``, ``--cluster-leadership-addresses``): two
lookupds elect one leader, a follower forwards writes and serves reads from etcd, a leader's
kill -9 is taken over within seconds (placement and partition failover go on), and an etcd
outage stops every write with a clear error while reads keep being answered."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from protocol.cluster_auth import HTTP_HEADER, http_credential
from tests.daemons import Daemon, cluster_secret_flag, pnsq_lookupd, pnsq_nsqd
from tests.etcd import Etcd
from tests.integration.lookupd_helpers import ACCEPT, get_json, lookup, post, request, wait_for

pytestmark = pytest.mark.integration


class HACluster:
    """etcd, two lookupds on it and (optionally) two nsqd registered with both."""

    def __init__(self, work: Path, nodes: int = 0, *flags: str) -> None:
        """``flags``: more flags for both lookupds."""
        self.etcd = Etcd(work / "etcd").start()
        flags = (
            "--cluster-id=test",
            f"--cluster-leadership-addresses={self.etcd.url}",
            "--heartbeat-timeout=2s",
            *flags,
        )
        self.lookupds = [pnsq_lookupd(work / f"lookupd{i}", *flags) for i in (1, 2)]
        self.nodes: list[Daemon] = []
        try:
            for lookupd in self.lookupds:
                lookupd.start()
            registrations = [f"--lookupd-tcp-address={d.tcp_address}" for d in self.lookupds]
            self.nodes = [pnsq_nsqd(work / f"nsqd{i}", *registrations) for i in range(nodes)]
            for node in self.nodes:
                node.start()
        except BaseException:
            self.stop()
            raise

    def leader_id(self, lookupd: Daemon) -> str | None:
        try:
            leader = get_json(lookupd, "/listlookup")["lookupdleader"]
        except (AssertionError, OSError):
            return None
        return leader.get("ID") if leader else None

    def by_id(self, lookupd_id: str) -> Daemon:
        return next(d for d in self.lookupds if lookupd_id.endswith(f":{d.tcp_port}"))

    def leader(self) -> Daemon:
        """The leader both lookupds agree on (waits for one)."""

        def agreed() -> str | None:
            ids = {self.leader_id(d) for d in self.lookupds}
            return ids.pop() if len(ids) == 1 and None not in ids else None

        return self.by_id(wait_for(agreed, what="one leader"))

    def follower(self) -> Daemon:
        leader = self.leader()
        return next(d for d in self.lookupds if d is not leader)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        for lookupd in self.lookupds:
            lookupd.stop()
        self.etcd.stop()


@pytest.fixture
def ha(tmp_path: Path) -> Iterator[HACluster]:
    cluster = HACluster(tmp_path)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def ha_nodes(tmp_path: Path) -> Iterator[HACluster]:
    cluster = HACluster(tmp_path, nodes=2)
    try:
        for lookupd in cluster.lookupds:
            wait_for(lambda d=lookupd: len(get_json(d, "/nodes")["producers"]) == 2, what="nodes")
        yield cluster
    finally:
        cluster.stop()


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _partitions(lookupd: Daemon, topic: str) -> dict[str, Any] | None:
    found = lookup(lookupd, topic, "&metainfo=true")
    return dict(found["partitions"]) if found and found.get("partitions") else None


def _leaders_log(lookupd: Daemon) -> int:
    return lookupd.log_text().count("this lookupd is the leader")


def test_two_lookupds_elect_one_leader_and_list_each_other(ha: HACluster) -> None:
    leader = ha.leader()
    follower = ha.follower()
    assert _leaders_log(leader) == 1
    assert _leaders_log(follower) == 0
    ports = sorted(str(d.http_port) for d in ha.lookupds)

    def listing_both(lookupd: Daemon) -> dict[str, Any] | None:
        listed: dict[str, Any] = get_json(lookupd, "/listlookup")
        return listed if sorted(n["HttpPort"] for n in listed["lookupdnodes"]) == ports else None

    for lookupd in ha.lookupds:
        # the other lookupd's registration reaches this one through etcd's watch
        listed = wait_for(lambda d=lookupd: listing_both(d), what="both lookupds listed")
        node = listed["lookupdleader"]
        assert set(node) == {"ID", "NodeIP", "TcpPort", "HttpPort", "RpcPort", "Epoch"}
        assert node["HttpPort"] == str(leader.http_port)
    # the metadata is in etcd under the cluster's prefix
    keys = ha.etcd.call(
        "/v3/kv/range", {"key": _b64("/pnsq/test/"), "range_end": _b64("/pnsq/test0")}
    )
    names = sorted(base64.b64decode(kv["key"]).decode() for kv in keys["kvs"])
    assert names[0] == "/pnsq/test/leader"
    assert len([n for n in names if n.startswith("/pnsq/test/lookupds/")]) == 2


def test_write_on_a_follower_is_forwarded_and_seen_by_both(ha_nodes: HACluster) -> None:
    follower = ha_nodes.follower()
    status, body = post(follower, "/topic/create?topic=fwd&partition_num=2&replicator=2")
    assert (status, body) == (200, b"")
    for lookupd in ha_nodes.lookupds:
        parts = wait_for(lambda d=lookupd: _partitions(d, "fwd"), what="placement")
        assert sorted(parts) == ["0", "1"]
        assert "fwd" in get_json(lookupd, "/topics")["topics"]
    status, body = post(follower, "/topic/delete?topic=fwd")
    assert status == 200, body
    for lookupd in ha_nodes.lookupds:
        wait_for(lambda d=lookupd: "fwd" not in get_json(d, "/topics")["topics"], what="gone")


def test_replicator_and_drain_on_a_follower_are_forwarded_and_kept_in_etcd(
    ha_nodes: HACluster,
) -> None:
    follower = ha_nodes.follower()
    status, body = post(follower, "/topic/create?topic=ops&partition_num=2&replicator=2")
    assert status == 200, body
    assert post(follower, "/topic/meta/update?topic=ops&replicator=1") == (200, b"")

    def one_copy_each(lookupd: Daemon) -> bool:
        meta = get_json(lookupd, "/lookup?topic=ops&metainfo=true")["meta"]
        stats = get_json(lookupd, "/cluster/stats")
        return meta["replica"] == 1 and stats["stable"]

    for lookupd in ha_nodes.lookupds:  # both read what the leader saved in etcd
        wait_for(lambda d=lookupd: one_copy_each(d), what="one copy of each partition")
    victim = f"127.0.0.1:{ha_nodes.nodes[0].tcp_port}"

    def drained() -> bool:
        status, body = post(follower, f"/cluster/node/remove?remove_node={victim}")
        assert status == 200, body
        answer = json.loads(body)
        assert answer["remove_node"] == victim
        return bool(answer["drained"])

    wait_for(drained, timeout=30, what="the node drained")
    for lookupd in ha_nodes.lookupds:
        listed = {n["node_id"]: n for n in get_json(lookupd, "/cluster/stats")["node_stat_list"]}
        assert (listed[victim]["leaders"], listed[victim]["replicas"]) == (0, 0)
        assert listed[victim]["removing"]
        other = next(n for n in listed if n != victim)
        assert listed[other]["leaders"] == 2


def test_with_a_secret_the_lookupd_to_lookupd_hop_is_authenticated(tmp_path: Path) -> None:
    """A follower forwards with its own credential (a control write from a holder of the
    secret reaches the leader; one without it stops at the follower), and honours
    X-Pnsq-Forwarded only from a request that carries the credential: a stranger's header
    changes nothing, the write is forwarded as any other."""
    secret = cluster_secret_flag(tmp_path / "secret", "ha secret")
    cluster = HACluster(tmp_path, 0, secret)
    try:
        follower = cluster.follower()
        base = f"http://{follower.http_address}"
        auth = {**ACCEPT, HTTP_HEADER: http_credential(b"ha secret")}
        stranger = {**ACCEPT, "X-Pnsq-Forwarded": "1"}
        create = "/topic/create?topic=ha_sealed&partition_num=1&replicator=1"
        assert request(base + create, "POST", stranger)[0] == 200  # forwarded: not refused
        wait_for(lambda: lookup(follower, "ha_sealed"), what="the created topic on the follower")
        update = "/topic/meta/update?topic=ha_sealed&retention=3"
        assert request(base + update, "POST", stranger)[0] == 401
        assert request(base + update, "POST", auth)[:2] == (200, b"")
        # a lookupd's own forward (the credential and the header): not forwarded again
        status, body, _ = request(base + update, "POST", {**auth, "X-Pnsq-Forwarded": "1"})
        assert status == 400
        assert b"E_FAILED_ON_NOT_LEADER" in body
    finally:
        cluster.stop()


def test_kill_9_of_the_leader_is_taken_over_and_failover_goes_on(ha_nodes: HACluster) -> None:
    assert post(ha_nodes.leader(), "/topic/create?topic=ka&partition_num=1&replicator=2")[0] == 200
    old = ha_nodes.leader()
    survivor = ha_nodes.follower()
    wait_for(lambda: _partitions(survivor, "ka"), what="placement on the follower")
    # the operator's switches, one asked on the follower (forwarded), go to etcd with the rest
    assert json.loads(post(survivor, "/cluster/balance?enable=false")[1])["enabled"] is False
    assert json.loads(post(old, "/cluster/upgrade/begin")[1])["upgrading"] is True
    old.kill()
    killed_at = time.monotonic()
    wait_for(
        lambda: (
            (ha_nodes.leader_id(survivor) or "").endswith(f":{survivor.tcp_port}")
            and _leaders_log(survivor) == 1
        ),
        timeout=10,
        what="takeover",
    )
    took = time.monotonic() - killed_at
    print(f"takeover after the leader's kill -9: {took:.2f} s")
    assert took <= 5.0 + 1.0  # TTL 3 s + etcd's expiry tick + campaign interval (+ test polling)
    switches = get_json(survivor, "/cluster/balance")  # as the new leader read them from etcd
    assert (switches["enabled"], switches["upgrading"]) == (False, True)

    # the new leader places ...
    status, body = post(survivor, "/topic/create?topic=kb&partition_num=1&replicator=2")
    assert (status, body) == (200, b"")
    assert wait_for(lambda: _partitions(survivor, "kb"), what="placement after takeover")

    # ... and fails a partition over when its leader nsqd dies
    doomed = _partition_leader(survivor, ha_nodes.nodes, "ka")
    assert doomed is not None
    other = next(n for n in ha_nodes.nodes if n is not doomed)
    doomed.kill()
    died_at = time.monotonic()
    wait_for(lambda: _partition_leader(survivor, ha_nodes.nodes, "ka") is other, what="failover")
    print(f"partition failover under the new leader: {time.monotonic() - died_at:.2f} s")
    logged = f"PARTITION(ka/0): leader 127.0.0.1:{other.tcp_port}"
    wait_for(lambda: logged in survivor.log_text(), timeout=2, what="the decision logged")
    # the decision is in etcd: the other lookupd, back, reads it from there
    old.start()
    wait_for(lambda: _partition_leader(old, ha_nodes.nodes, "ka") is other, what="from etcd")


def _partition_leader(lookupd: Daemon, nodes: list[Daemon], topic: str) -> Daemon | None:
    """The nsqd leading partition 0 of ``topic`` as lookupd's placements say."""
    for node in nodes:
        doc = get_json(lookupd, f"/pnsq/assignments?node=127.0.0.1:{node.tcp_port}")
        entry = doc["topics"].get(topic)
        if entry is None:
            continue
        part = entry["partitions"].get("0") or entry["partitions"].get(0)
        if part and part.get("leader") == f"127.0.0.1:{node.tcp_port}":
            return node
    return None


def test_etcd_outage_stops_writes_not_reads_and_a_leader_comes_back(ha: HACluster) -> None:
    leader = ha.leader()
    assert post(leader, "/topic/create?topic=before")[0] == 200
    for lookupd in ha.lookupds:
        wait_for(lambda d=lookupd: "before" in get_json(d, "/topics")["topics"], what="topic")
    ha.etcd.stop()
    wait_for(lambda: "no longer the leader" in leader.log_text(), timeout=6, what="step down")
    for lookupd in ha.lookupds:
        assert "before" in get_json(lookupd, "/topics")["topics"]
        assert get_json(lookupd, "/lookup?topic=before") is not None
        status, body = post(lookupd, "/topic/create?topic=during")
        assert status == 503, body
        assert "ETCD" in json.loads(body)["message"]
    ha.etcd.start()
    new_leader = ha.leader()
    wait_for(lambda: post(new_leader, "/topic/create?topic=after")[0] == 200, what="write")
    for lookupd in ha.lookupds:
        wait_for(lambda d=lookupd: "after" in get_json(d, "/topics")["topics"], what="after")
        assert "during" not in get_json(lookupd, "/topics")["topics"]


def test_unreachable_etcd_at_start_is_one_fatal_line(tmp_path: Path) -> None:
    lookupd = pnsq_lookupd(
        tmp_path / "lookupd",
        "--cluster-id=test",
        "--cluster-leadership-addresses=http://127.0.0.1:1",
    )
    done = subprocess.run(lookupd.argv, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    fatal = [line for line in done.stderr.splitlines() if "FATAL" in line]
    assert len(fatal) == 1, done.stderr
    assert "etcd" in fatal[0]
