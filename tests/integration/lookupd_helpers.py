"""Helpers for the lookupd integration tests: HTTP against a daemon, waiting, publishing to one
partition, a pnsq cluster (lookupd + nodes) and what a node holds of a topic."""

from __future__ import annotations

import json
import random
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from protocol import Pub
from tests.daemons import Daemon, pnsq_lookupd, pnsq_nsqd
from tests.rawclient import RawClient

ACCEPT = {"Accept": "application/vnd.nsq; version=1.0"}
T = TypeVar("T")


def request(
    url: str, method: str = "GET", headers: dict[str, str] | None = None, data: bytes | None = None
) -> tuple[int, bytes, Any]:
    req = urllib.request.Request(
        url, data, method=method, headers=ACCEPT if headers is None else headers
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def get_json(daemon: Daemon | str, path: str) -> Any:
    base = daemon if isinstance(daemon, str) else f"http://{daemon.http_address}"
    status, body, _ = request(f"{base}{path}")
    assert status == 200, (path, status, body)
    return json.loads(body)


def post(daemon: Daemon, path: str, data: bytes | None = None) -> tuple[int, bytes]:
    status, body, _ = request(f"http://{daemon.http_address}{path}", "POST", data=data)
    return status, body


def wait_for(check: Callable[[], T | None], timeout: float = 15.0, what: str = "") -> T:
    """Poll ``check`` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        time.sleep(0.1)


def lookup(lookupd: Daemon, topic: str, query: str = "") -> Any:
    status, body, _ = request(f"http://{lookupd.http_address}/lookup?topic={topic}{query}")
    return json.loads(body) if status == 200 else None


def publish_to_partition(node: Daemon, topic: str, partition: int, body: bytes) -> None:
    client = RawClient(node.tcp_address)
    try:
        client.send(Pub(topic, body, partition=partition))
        frame = client.read()
        assert frame.data == b"OK", frame
    finally:
        client.close()


#: fixed ports for daemons that keep their id across restarts come from below the kernel's
#: ephemeral range (32768 and up here): a port picked from inside it could be given to another
#: daemon's `:0` listener or an outgoing connection before ours binds it ("Address already in
#: use" at start, seen once in a full run)
_FIXED_PORTS = range(20000, 32768)
_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on, outside the ephemeral range, not handed out before
    by this process."""
    for _ in range(1000):
        port = random.choice(_FIXED_PORTS)
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError("no free fixed port below the ephemeral range")


@contextmanager
def pnsq_cluster(
    work: Path, count: int, *lookupd_flags: str
) -> Iterator[tuple[Daemon, list[Daemon]]]:
    """A pnsq lookupd and ``count`` pnsq nsqd registered with it (nodes a, b, c, ...)."""
    lookupd = pnsq_lookupd(work / "lookupd", *lookupd_flags).start()
    nodes: list[Daemon] = []
    try:
        for name in "abcdefgh"[:count]:
            flag = f"--lookupd-tcp-address={lookupd.tcp_address}"
            nodes.append(pnsq_nsqd(work / name, flag).start())
        wait_for(
            lambda: len(get_json(lookupd, "/nodes")["producers"]) == count, what=f"{count} nodes"
        )
        yield lookupd, nodes
    finally:
        for node in nodes:
            node.stop()
        lookupd.stop()


def roles(node: Daemon, topic: str) -> dict[int, str] | None:
    """Partition -> ``"leader"`` / ``"replica"`` as the node holds them (its ``/partitions``);
    None if the node does not have the topic."""
    status, body, _ = request(f"http://{node.http_address}/partitions?topic={topic}", "GET", {})
    if status != 200:
        return None
    document: dict[str, Any] = json.loads(body)
    held = {p["partition"]: "leader" for p in document["partitions"]}
    held.update(dict.fromkeys(document["replicas"], "replica"))
    return held


def in_sync(lookupd: Daemon, node_id: str, topic: str) -> list[str]:
    """Partition 0's in-sync set as lookupd saved it, from the assignments of ``node_id`` (a
    node holding the topic); [] if that node's assignments do not list it."""
    topics = get_json(lookupd, f"/pnsq/assignments?node={node_id}")["topics"]
    return list(topics[topic]["partitions"]["0"]["isr"]) if topic in topics else []


def stored(node: Daemon, topic: str) -> int:
    """Messages the node stored for ``topic`` (``message_count`` in its ``/stats``)."""
    stats = get_json(node, f"/stats?format=json&topic={topic}")
    return sum(t["message_count"] for t in stats["topics"] or () if t["topic_name"] == topic)
