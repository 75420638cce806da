"""The cluster side of scripts/bench's helpers (python stdlib only): free ports, pnsq's HTTP
endpoints, and waiting for a replicated topic's in-sync set (bench_report.py's subcommands
``freeport``, ``freeports``, ``create-channel``, ``reset-topic``, ``wait-nodes``,
``replicated-topic`` and ``still-in-sync``; also used by bench_move.py)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def freeport() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# The Accept header youzan's clients send: pnsq's lookupd answers /lookup with "partitions" then.
LOOKUP_ACCEPT = {"Accept": "application/vnd.nsq; version=1.0"}


def http_json(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> Any:
    """The JSON body of a 200 answer; ValueError on any other status. Plain http only."""
    if not url.startswith("http://"):
        raise ValueError(f"not an http:// URL: {url}")
    req = urllib.request.Request(url, method=method, headers=headers or {})  # noqa: S310
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:  # noqa: S310
            body = resp.read()
    except urllib.error.HTTPError as exc:
        raise ValueError(f"{method} {url}: HTTP {exc.code} {exc.read()[:200]!r}") from exc
    return json.loads(body) if body else None


def cluster_auth() -> dict[str, str]:
    """The cluster credential's header for lookupd's /pnsq/ endpoints when the cluster holds a
    secret (``BENCH_CLUSTER_SECRET_FILE``; docs/security.md), else none."""
    path = os.environ.get("BENCH_CLUSTER_SECRET_FILE", "")
    if not path:
        return {}
    secret = Path(path).read_bytes().rstrip()
    mac = hmac.new(secret, b"pnsq-lookupd-http", hashlib.sha256).hexdigest()
    return {"X-Pnsq-Cluster-Auth": mac}


def create_channel(daemon_http: str, topic: str, channel: str) -> None:
    """Create ``topic`` and its ``channel`` on an nsqd (Go or pnsq) before the load, as a
    deployment with a consumer runs: a publish then also feeds the channel."""
    for path in (
        f"/topic/create?topic={topic}",
        f"/channel/create?topic={topic}&channel={channel}",
    ):
        http_json(f"http://{daemon_http}{path}", method="POST")


def reset_topic(daemon_http: str, topic: str, channel: str) -> None:
    """Delete ``topic`` with its data and, given ``channel``, create both again (an
    idempotent pair's slices: scripts/bench's bench_idempotent)."""
    http_json(f"http://{daemon_http}/topic/delete?topic={topic}", method="POST")
    if channel:
        create_channel(daemon_http, topic, channel)


def poll(what: str, seconds: float, check: Callable[[], T | None]) -> T:
    """Call check every 0.1 s until it returns something other than None (connection errors and
    bad answers count as "not yet"); ValueError with the last reason after ``seconds``."""
    deadline = time.monotonic() + seconds
    last = "no answer yet"
    while True:
        try:
            result = check()
            if result is not None:
                return result
        except (OSError, ValueError, KeyError, TypeError) as exc:
            last = str(exc)
        if time.monotonic() > deadline:
            raise ValueError(f"{what}: not ready within {seconds:g} s (last: {last})")
        time.sleep(0.1)


def wait_nodes(lookupd_http: str, count: int, seconds: float) -> None:
    def registered() -> bool | None:
        answer = http_json(f"http://{lookupd_http}/nodes", headers=LOOKUP_ACCEPT)
        # with or without the pre-1.0 "data" wrapper (it depends on the Accept header)
        producers = answer.get("data", answer)["producers"]
        return True if len(producers) >= count else None

    poll(f"{count} nsqd nodes registered with {lookupd_http}", seconds, registered)


def partition_zero(lookupd_http: str, topic: str) -> tuple[str, str, list[str]]:
    """Partition 0 of ``topic`` as lookupd has it: (leader TCP address, leader HTTP address,
    in-sync set as lookupd persisted it)."""
    lookup = http_json(f"http://{lookupd_http}/lookup?topic={topic}", headers=LOOKUP_ACCEPT)
    leader = lookup["partitions"]["0"]
    tcp = f"{leader['broadcast_address']}:{leader['tcp_port']}"
    http = f"{leader['broadcast_address']}:{leader['http_port']}"
    assigned = http_json(
        f"http://{lookupd_http}/pnsq/assignments?node={tcp}", headers=cluster_auth()
    )
    partition = assigned["topics"][topic]["partitions"]["0"]
    if partition["leader"] != tcp:
        raise ValueError(
            f"/lookup says {tcp} leads {topic}/0, assignments say {partition['leader']}"
        )
    return tcp, http, list(partition["isr"])


def leader_isr(leader_http: str, topic: str) -> list[str]:
    """Partition 0's in-sync set as its leader applies it (its /stats)."""
    stats = http_json(f"http://{leader_http}/stats?format=json&topic={topic}")
    for entry in stats["topics"] or ():
        if entry["topic_name"] == topic:
            for part in entry["partitions"]:
                if part["partition"] == 0:
                    return list(part["isr"])
    raise ValueError(f"{leader_http} has no {topic}/0 in its /stats")


def replicated_topic(
    lookupd_http: str, topic: str, replicator: int, seconds: float, channel: str = ""
) -> str:
    """Create ``topic`` with one partition and ``replicator`` copies; return the TCP address of
    partition 0's leader once its in-sync set holds ``replicator`` nodes, both in lookupd's
    assignments and in the leader's own /stats (so the leader waits for its replica). With
    ``channel``, that channel is then created on the leader (publishes feed it)."""
    query = f"topic={topic}&partition_num=1&replicator={replicator}"
    http_json(f"http://{lookupd_http}/topic/create?{query}", method="POST")

    def in_sync() -> str | None:
        tcp, http, isr = partition_zero(lookupd_http, topic)
        if len(isr) < replicator or len(leader_isr(http, topic)) < replicator:
            return None
        return tcp

    leader = poll(f"{topic}/0 with {replicator} nodes in sync", seconds, in_sync)
    if channel:
        _, leader_http, _ = partition_zero(lookupd_http, topic)
        create_channel(leader_http, topic, channel)
    return leader


def still_in_sync(lookupd_http: str, topic: str, leader: str, replicator: int) -> None:
    """ValueError unless ``leader`` still leads partition 0 with ``replicator`` nodes in sync."""
    tcp, http, isr = partition_zero(lookupd_http, topic)
    applied = leader_isr(http, topic)
    if tcp != leader or len(isr) < replicator or len(applied) < replicator:
        raise ValueError(
            f"after the run {tcp} leads {topic}/0 with in-sync set {isr} (lookupd), {applied}"
            f" (leader); before it {leader} led with {replicator} in sync"
        )


def freeports(count: int) -> list[int]:
    """``count`` distinct free ports on 127.0.0.1 (all bound at once, then released)."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()
