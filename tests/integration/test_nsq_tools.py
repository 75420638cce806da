"""NSQ's own tools (built from the nsq 1.3.0 module by scripts/setup) against a pnsq cluster: a
pnsq nsqlookupd and two pnsq nsqd, each tool on a plain topic (created on one nsqd, one
partition) and a partitioned one (created through lookupd with ``partition_num=2``, one
partition led by each node).

nsqadmin's pages and JSON API, and its pause / unpause / empty / delete actions checked on each
nsqd's ``/stats``; nsq_stat's rows; nsq_tail printing the bodies (and tailing at once when started
right after the topic is created, not after go-nsq's 60 s lookupd poll); nsq_to_file's files;
to_nsq's stdin lines; nsq_to_nsq relaying to another pnsq nsqd; nsq_to_http POSTing to a sink.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.daemons import TOOLS, Daemon, Peer, nsqadmin, pnsq_nsqd
from tests.integration.lookupd_helpers import (
    get_json,
    lookup,
    pnsq_cluster,
    post,
    request,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.interop]

BIN = TOOLS / "nsq-1.3.0" / "bin"
KINDS = ("plain", "partitioned")
_names = itertools.count()


@dataclass
class Cluster:
    lookupd: Daemon
    nodes: list[Daemon]
    other: Daemon  # a standalone pnsq nsqd: nsq_to_nsq's destination
    admin: Peer
    work: Path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    for tool in ("nsqadmin", "nsq_stat", "nsq_tail", "nsq_to_file", "to_nsq", "nsq_to_nsq"):
        if not (BIN / tool).exists():
            raise RuntimeError(f"{BIN / tool} missing: run scripts/setup")
    work = tmp_path_factory.mktemp("nsq-tools")
    with pnsq_cluster(work, 2) as (lookupd, nodes):
        other = pnsq_nsqd(work / "other").start()
        admin = nsqadmin(work / "admin", flags=(f"--lookupd-http-address={lookupd.http_address}",))
        try:
            admin.start()
            yield Cluster(lookupd, nodes, other, admin, work)
        finally:
            admin.stop()
            other.stop()


def make_topic(cluster: Cluster, kind: str) -> str:
    """A new topic, known to lookupd with its producers: ``plain`` created on the first nsqd,
    ``partitioned`` through lookupd with two partitions."""
    topic = f"tools_{kind}_{next(_names)}"
    if kind == "plain":
        status, body = post(cluster.nodes[0], f"/topic/create?topic={topic}")
        expected = 1
    else:
        path = f"/topic/create?topic={topic}&partition_num=2"
        status, body = post(cluster.lookupd, path)
        expected = 2
    assert status == 200, body

    def known() -> bool:
        found = lookup(cluster.lookupd, topic) or {}
        return bool(found.get("producers")) and len(found.get("partitions") or {}) == expected

    wait_for(known, what=f"{topic} with {expected} partitions at lookupd")
    return topic


def publish(cluster: Cluster, topic: str, bodies: list[bytes]) -> None:
    """Each body by HTTP ``/pub``, alternating the nodes (a node forwards to the leader)."""
    for i, body in enumerate(bodies):
        node = cluster.nodes[i % len(cluster.nodes)]
        status, reply = post(node, f"/pub?topic={topic}", body)
        assert (status, reply) == (200, b"OK")


def bodies_for(topic: str, n: int = 6) -> list[bytes]:
    return [f"{topic}-msg-{i}".encode() for i in range(n)]


def channel_stats(node: Daemon, topic: str, channel: str) -> dict[str, Any] | None:
    stats = get_json(node, f"/stats?format=json&topic={topic}&channel={channel}")
    for t in stats["topics"] or ():
        for c in t["channels"] or ():
            if t["topic_name"] == topic and c["channel_name"] == channel:
                return dict(c)
    return None


def topic_message_count(daemon: Daemon, topic: str) -> int:
    stats = get_json(daemon, f"/stats?format=json&topic={topic}")
    return sum(t["message_count"] for t in stats["topics"] or () if t["topic_name"] == topic)


def tool(name: str, *flags: str, **kwargs: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(BIN / name), *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs
    )


def finish(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> tuple[str, str]:
    """Wait for ``proc`` (SIGTERM after ``timeout``, then SIGKILL); its stdout and stderr."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    return out.decode(errors="replace"), err.decode(errors="replace")


# ------------------------------------------------------------------ nsqadmin


def admin_get(cluster: Cluster, path: str) -> Any:
    status, body, _ = request(f"{cluster.admin.url}{path}")
    assert status == 200, (path, status, body)
    return json.loads(body)


def admin_send(cluster: Cluster, method: str, path: str, action: str | None = None) -> None:
    data = json.dumps({"action": action}).encode() if action else None
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    status, body, _ = request(f"{cluster.admin.url}{path}", method, headers, data)
    assert status == 200, (method, path, action, status, body)


def holders(cluster: Cluster, topic: str, channel: str) -> list[Daemon]:
    return [n for n in cluster.nodes if channel_stats(n, topic, channel) is not None]


@pytest.mark.parametrize("kind", KINDS)
def test_nsqadmin_pages_api_and_actions(cluster: Cluster, kind: str) -> None:
    topic, channel = make_topic(cluster, kind), "admin_ch"
    for node in cluster.nodes:  # the channel wherever the topic lives, before the messages
        post(node, f"/channel/create?topic={topic}&channel={channel}")
    bodies = bodies_for(topic)
    publish(cluster, topic, bodies)
    held = holders(cluster, topic, channel)
    assert len(held) == len(lookup_nodes(cluster, topic))

    for page in ("/", f"/topics/{topic}", f"/topics/{topic}/{channel}", "/nodes", "/lookup"):
        status, html, _ = request(f"{cluster.admin.url}{page}", headers={})
        assert status == 200, page
        assert b"<html" in html.lower(), page

    assert topic in admin_get(cluster, "/api/topics")["topics"]
    nodes = admin_get(cluster, "/api/nodes")["nodes"]
    assert {n["tcp_port"] for n in nodes} == {n.tcp_port for n in cluster.nodes}
    assert all(not n["out_of_date"] for n in nodes)

    def channel_view() -> dict[str, Any] | None:
        view: dict[str, Any] = admin_get(cluster, f"/api/topics/{topic}/{channel}")
        return view if view["depth"] == len(bodies) else None

    view = wait_for(channel_view, what="nsqadmin's channel depth")
    assert view["message"] == ""
    per_node = {n["node"]: n["depth"] for n in view["nodes"]}
    assert set(per_node) == {n.http_address for n in held}
    assert sum(per_node.values()) == len(bodies)
    topic_view = admin_get(cluster, f"/api/topics/{topic}")
    assert topic_view["message_count"] == len(bodies)
    per_node_channels = {
        c["channel_name"] for n in topic_view["nodes"] for c in n["channels"] or ()
    }
    assert channel in per_node_channels

    def on_every_node(check: str, value: Any) -> bool:
        return all((channel_stats(n, topic, channel) or {}).get(check) == value for n in held)

    admin_send(cluster, "POST", f"/api/topics/{topic}/{channel}", "pause")
    wait_for(lambda: on_every_node("paused", True), what="paused on every node")
    admin_send(cluster, "POST", f"/api/topics/{topic}/{channel}", "unpause")
    wait_for(lambda: on_every_node("paused", False), what="unpaused on every node")
    admin_send(cluster, "POST", f"/api/topics/{topic}/{channel}", "empty")
    wait_for(lambda: on_every_node("depth", 0), what="emptied on every node")
    admin_send(cluster, "DELETE", f"/api/topics/{topic}/{channel}")
    wait_for(lambda: not holders(cluster, topic, channel), what="channel deleted")
    admin_send(cluster, "POST", f"/api/topics/{topic}", "pause")

    def topic_paused(node: Daemon) -> bool:
        stats = get_json(node, f"/stats?format=json&topic={topic}")
        return all(t["paused"] for t in stats["topics"] or () if t["topic_name"] == topic)

    wait_for(lambda: all(topic_paused(n) for n in cluster.nodes), what="topic paused")
    admin_send(cluster, "DELETE", f"/api/topics/{topic}")
    wait_for(
        lambda: (
            all(topic_message_count(n, topic) == 0 for n in cluster.nodes)
            and topic not in (admin_get(cluster, "/api/topics")["topics"] or ())
        ),
        what="topic deleted",
    )


# ------------------------------------------------------------------ nsq_stat


@pytest.mark.parametrize("kind", KINDS)
def test_nsq_stat_prints_rows(cluster: Cluster, kind: str) -> None:
    topic, channel = make_topic(cluster, kind), "stat_ch"
    for node in cluster.nodes:
        post(node, f"/channel/create?topic={topic}&channel={channel}")
    publish(cluster, topic, bodies_for(topic))
    proc = tool(
        "nsq_stat",
        f"--lookupd-http-address={cluster.lookupd.http_address}",
        f"--topic={topic}",
        f"--channel={channel}",
        "--interval=250ms",
        "--count=2",
    )
    out, err = finish(proc)
    assert proc.returncode == 0, err
    assert "depth" in out, out
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 2, out
    # ingress egress | total mem disk inflt def | req t-o msgs clients ("|" counted too)
    assert all(row[3] == "6" and row[11] == "6" for row in rows), out


# ------------------------------------------------------------------ nsq_tail


def tail(cluster: Cluster, topic: str, n: int) -> subprocess.Popen[bytes]:
    return tool(
        "nsq_tail",
        f"--lookupd-http-address={cluster.lookupd.http_address}",
        f"--topic={topic}",
        f"-n={n}",
    )


@pytest.mark.parametrize("kind", KINDS)
def test_nsq_tail_prints_published_bodies(cluster: Cluster, kind: str) -> None:
    topic = make_topic(cluster, kind)
    bodies = bodies_for(topic)
    proc = tail(cluster, topic, len(bodies))
    try:
        wait_for(
            lambda: len(holders_of_ephemeral(cluster, topic)) == len(lookup_nodes(cluster, topic)),
            what="nsq_tail subscribed",
        )
    except AssertionError:
        finish(proc, 0)
        raise
    publish(cluster, topic, bodies)
    out, err = finish(proc)
    assert proc.returncode == 0, err
    assert sorted(out.splitlines()) == sorted(b.decode() for b in bodies)


def lookup_nodes(cluster: Cluster, topic: str) -> list[Any]:
    return list((lookup(cluster.lookupd, topic) or {}).get("producers", []))


def holders_of_ephemeral(cluster: Cluster, topic: str) -> list[Daemon]:
    found = []
    for node in cluster.nodes:
        stats = get_json(node, f"/stats?format=json&topic={topic}")
        for t in stats["topics"] or ():
            if any(c["client_count"] for c in t["channels"] or ()):
                found.append(node)
    return found


@pytest.mark.parametrize("kind", KINDS)
def test_nsq_tail_started_right_after_create_tails_at_once(cluster: Cluster, kind: str) -> None:
    """Started the moment the topic exists, nsq_tail's first lookup must already find the
    producers: otherwise go-nsq waits for its next lookupd poll, 60 s later. lookupd's
    ``/topic/create`` returns once the placed nodes registered the partitions."""
    topic = f"tools_{kind}_{next(_names)}"
    if kind == "plain":
        assert post(cluster.nodes[0], f"/topic/create?topic={topic}")[0] == 200
    else:
        assert post(cluster.lookupd, f"/topic/create?topic={topic}&partition_num=2")[0] == 200
    proc = tail(cluster, topic, 1)
    started = time.monotonic()
    # what go-nsq's first query sees, asked at once: every partition has its producer already
    partitions = (lookup(cluster.lookupd, topic) or {}).get("partitions") or {}
    assert len(partitions) == (1 if kind == "plain" else 2), lookup(cluster.lookupd, topic)
    printed = threading.Event()
    out: list[str] = []

    def drain() -> None:
        assert proc.stdout is not None
        out.append(proc.stdout.readline().decode())
        printed.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        while not printed.is_set() and time.monotonic() - started < 8:
            publish(cluster, topic, [b"at-once"] * len(cluster.nodes))
            printed.wait(0.25)
    finally:
        _, err = finish(proc, 5)
    assert printed.is_set(), f"nsq_tail printed nothing within 8 s:\n{err}"
    assert out == ["at-once\n"]


# ------------------------------------------------------------------ nsq_to_file


@pytest.mark.parametrize("kind", KINDS)
def test_nsq_to_file_writes_the_messages(cluster: Cluster, kind: str, tmp_path: Path) -> None:
    topic = make_topic(cluster, kind)
    bodies = bodies_for(topic)
    publish(cluster, topic, bodies)
    output = tmp_path / "out"
    proc = tool(
        "nsq_to_file",
        f"--lookupd-http-address={cluster.lookupd.http_address}",
        f"--topic={topic}",
        "--channel=to_file",
        f"--output-dir={output}",
        "--sync-interval=200ms",
    )

    def written() -> list[str]:
        lines = [
            line
            for path in output.glob("**/*")
            if path.is_file()
            for line in path.read_text(errors="replace").splitlines()
        ]
        return lines if len(lines) >= len(bodies) else []

    try:
        lines = wait_for(written, what="nsq_to_file's files")
    finally:
        proc.send_signal(signal.SIGTERM)
        finish(proc)
    assert sorted(lines) == sorted(b.decode() for b in bodies)


# ------------------------------------------------------------------ to_nsq


@pytest.mark.parametrize("kind", KINDS)
def test_to_nsq_publishes_stdin_lines(cluster: Cluster, kind: str) -> None:
    topic = make_topic(cluster, kind)
    for node in cluster.nodes:
        post(node, f"/channel/create?topic={topic}&channel=check")
    bodies = bodies_for(topic)
    proc = tool(
        "to_nsq",
        f"--nsqd-tcp-address={cluster.nodes[1].tcp_address}",
        f"--topic={topic}",
        stdin=subprocess.PIPE,
    )
    _, err = proc.communicate(b"\n".join(bodies) + b"\n", timeout=15)
    assert proc.returncode == 0, err
    wait_for(
        lambda: sum(topic_message_count(n, topic) for n in cluster.nodes) == len(bodies),
        what="every stdin line stored",
    )
    reader = tool(
        "nsq_tail",
        f"--lookupd-http-address={cluster.lookupd.http_address}",
        f"--topic={topic}",
        "--channel=check",
        f"-n={len(bodies)}",
    )
    out, err = finish(reader)
    assert reader.returncode == 0, err
    assert sorted(out.splitlines()) == sorted(b.decode() for b in bodies)


# ------------------------------------------------------------------ nsq_to_nsq


@pytest.mark.parametrize("kind", KINDS)
def test_nsq_to_nsq_relays_to_another_nsqd(cluster: Cluster, kind: str) -> None:
    topic = make_topic(cluster, kind)
    bodies = bodies_for(topic)
    publish(cluster, topic, bodies)
    destination = f"{topic}_copy"
    proc = tool(
        "nsq_to_nsq",
        f"--lookupd-http-address={cluster.lookupd.http_address}",
        f"--topic={topic}",
        "--channel=relay",
        f"--destination-nsqd-tcp-address={cluster.other.tcp_address}",
        f"--destination-topic={destination}",
    )
    try:
        wait_for(
            lambda: topic_message_count(cluster.other, destination) == len(bodies),
            what="relayed to the other nsqd",
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        finish(proc)
    copied = tool(
        "nsq_tail",
        f"--nsqd-tcp-address={cluster.other.tcp_address}",
        f"--topic={destination}",
        "--channel=check",
        f"-n={len(bodies)}",
    )
    out, err = finish(copied)
    assert copied.returncode == 0, err
    assert sorted(out.splitlines()) == sorted(b.decode() for b in bodies)


# ------------------------------------------------------------------ nsq_to_http


class Sink(ThreadingHTTPServer):
    received: list[bytes]


class SinkHandler(BaseHTTPRequestHandler):
    server: Sink

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.received.append(body)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize("kind", KINDS)
def test_nsq_to_http_posts_every_message(cluster: Cluster, kind: str) -> None:
    topic = make_topic(cluster, kind)
    bodies = bodies_for(topic)
    publish(cluster, topic, bodies)
    sink = Sink(("127.0.0.1", 0), SinkHandler)
    sink.received = []
    server = threading.Thread(target=sink.serve_forever, daemon=True)
    server.start()
    proc = tool(
        "nsq_to_http",
        f"--lookupd-http-address={cluster.lookupd.http_address}",
        f"--topic={topic}",
        "--channel=to_http",
        f"--post=http://127.0.0.1:{sink.server_address[1]}/sink",
    )
    try:
        wait_for(lambda: len(sink.received) >= len(bodies), what="POSTs at the sink")
    finally:
        proc.send_signal(signal.SIGTERM)
        finish(proc)
        sink.shutdown()
        sink.server_close()
    assert sorted(sink.received) == sorted(bodies)
