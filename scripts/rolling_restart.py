"""scripts/rolling-restart: restart every nsqd of a cluster ``scripts/run`` runs, one by one,
under a continuous publish load, and report what the load saw.

The steps (docs/cluster.md, "Rolling upgrade"):

1. Wait until lookupd's ``/cluster/stats`` says ``stable``; create a topic with one partition
   per node and ``replicator=2`` (and a channel on it), wait until it is in sync, and start
   publishing one message every ``--interval`` through pnsq's client (partition-aware, through
   lookupd; a failed publish is counted, the partitions looked up again and the same message
   published again).
2. ``POST /cluster/upgrade/begin`` on lookupd: a node that goes down is not replaced meanwhile.
3. For each node: ask ``scripts/run`` to restart it (``$data/nsqd-N.restart`` and a SIGUSR1:
   it SIGTERMs the node, which hands its leaderships to in-sync replicas before it exits, and
   starts it again with the same flags); wait until the old process is gone, the new one is
   registered with every lookupd, every partition the node held is back in its in-sync set and
   ``/cluster/stats`` is ``stable``; then the next node.
4. ``POST /cluster/upgrade/done`` (also after a failure, so that lookupd replaces what stays
   down), wait until the cluster is stable again, stop publishing, read every acknowledged
   message back from the channel, and delete the topic.

It prints the longest write gap (the longest time between two acknowledged publishes), the
failed publish attempts, each node's restart times, and the acknowledged messages not read
back. Exit status 0 when every node came back in time and nothing acknowledged was lost; 1
otherwise; 2 for a cluster that is not running or a lookupd without the upgrade endpoints.

Who may use it: whoever may run ``scripts/run`` (it signals that script and reads the cluster
credential from ``$data/cluster.secret``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rolling_restart_load import Publisher
from rolling_restart_readback import locate, unread

from protocol.cluster_auth import http_headers

# the cluster's layout as scripts/run writes it in its data folder


@dataclass(frozen=True)
class Node:
    """One nsqd of the cluster: its number n (``nsqd-n``) and addresses."""

    number: int
    tcp: str  # host:port, also its node id
    http: str


@dataclass(frozen=True)
class RunFolder:
    """The files ``scripts/run`` keeps in its data folder while it runs."""

    data: Path

    def run_pid(self) -> int:
        return int((self.data / "run.pid").read_text())

    def lookupds(self) -> list[str]:
        """Each lookupd's HTTP ``host:port``."""
        return (self.data / "lookupd.http").read_text().split()

    def nodes(self) -> list[Node]:
        found = []
        for path in self.data.glob("nsqd-*.address"):
            number = int(path.name.removeprefix("nsqd-").removesuffix(".address"))
            tcp, http = path.read_text().split()
            found.append(Node(number, tcp, http))
        return sorted(found, key=lambda node: node.number)

    def pid(self, node: Node) -> int | None:
        """Node's pid as scripts/run last wrote it (None while it is being written)."""
        try:
            return int((self.data / f"nsqd-{node.number}.pid").read_text())
        except (FileNotFoundError, ValueError):
            return None

    def secret(self) -> bytes:
        path = self.data / "cluster.secret"
        return path.read_bytes().strip() if path.exists() else b""

    def ask_restart(self, node: Node) -> Path:
        """Leave the request for ``scripts/run`` (signalled by :meth:`signal_run`)."""
        request = self.data / f"nsqd-{node.number}.restart"
        request.touch()
        return request

    def signal_run(self) -> None:
        os.kill(self.run_pid(), signal.SIGUSR1)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# what lookupd says


class LookupdError(Exception):
    """No lookupd answered a request with 200."""


class Lookupd:
    """lookupd's HTTP API, with the cluster credential; each request goes to the first lookupd
    (of ``scripts/run --ha``'s two) that answers."""

    def __init__(self, addresses: list[str], secret: bytes) -> None:
        self.addresses = addresses
        self.headers = {"Accept": "application/vnd.nsq; version=1.0", **http_headers(secret)}

    def call(self, path: str, method: str = "GET", address: str | None = None) -> Any:
        errors = []
        for where in [address] if address else self.addresses:
            request = urllib.request.Request(
                f"http://{where}{path}", method=method, headers=self.headers
            )
            try:
                with urllib.request.urlopen(request, timeout=5) as reply:  # noqa: S310
                    body = reply.read()
                return json.loads(body) if body else None
            except urllib.error.HTTPError as exc:
                errors.append(f"{where}: HTTP {exc.code} {exc.read()[:200]!r}")
            except OSError as exc:
                errors.append(f"{where}: {exc}")
        raise LookupdError(f"{method} {path}: {'; '.join(errors)}")

    def stable(self) -> bool:
        return bool(self.call("/cluster/stats")["stable"])

    def settled(self) -> bool:
        """Stable, and no balancing left to do if lookupd balances by itself."""
        stats = self.call("/cluster/stats")
        balancing = stats.get("balance_enabled") and not stats.get("balanced", True)
        return bool(stats["stable"]) and not balancing

    def leaders(self) -> dict[str, int]:
        """Each node id with the partitions it leads."""
        listed = self.call("/cluster/stats")["node_stat_list"]
        return {entry["node_id"]: int(entry["leaders"]) for entry in listed}

    def registered(self, node: Node, address: str) -> bool:
        producers = self.call("/nodes", address=address)["producers"]
        return any(f"{p['broadcast_address']}:{p['tcp_port']}" == node.tcp for p in producers)

    def assignments(self, node: Node) -> dict[str, Any]:
        answer: dict[str, Any] = self.call(f"/pnsq/assignments?node={node.tcp}")
        return answer


def held(assignments: dict[str, Any], node_id: str) -> set[tuple[str, str]]:
    """The partitions ``(topic, number)`` that ``node_id`` leads or replicates."""
    return {
        (topic, number)
        for topic, doc in assignments.get("topics", {}).items()
        for number, part in doc.get("partitions", {}).items()
        if node_id == part.get("leader") or node_id in part.get("replicas", ())
    }


def out_of_sync(
    assignments: dict[str, Any], node_id: str, partitions: set[tuple[str, str]]
) -> set[tuple[str, str]]:
    """Those of ``partitions`` whose in-sync set does not hold ``node_id`` (or that are gone)."""
    missing = set()
    topics = assignments.get("topics", {})
    for topic, number in partitions:
        part = topics.get(topic, {}).get("partitions", {}).get(number)
        if part is None or node_id not in part.get("isr", ()):
            missing.add((topic, number))
    return missing


class TimedOut(Exception):
    """A wait ran out of time."""


def wait_until(what: str, timeout: float, check: Callable[[], bool]) -> float:
    """Seconds until ``check()`` (asked every 50 ms; a lookupd that does not answer counts as
    "not yet"); :class:`TimedOut` after ``timeout``."""
    started = time.monotonic()
    last = ""
    while True:
        try:
            if check():
                return time.monotonic() - started
        except LookupdError as exc:
            last = f" (last: {exc})"
        if time.monotonic() - started > timeout:
            raise TimedOut(f"{what}: not within {timeout:g} s{last}")
        time.sleep(0.05)


# the restart sequence


@dataclass
class Restart:
    """One node's restart, in seconds from the request."""

    node: Node
    partitions: int = 0  # partitions it held (led or replicated)
    exited: float = 0.0  # its old process gone (its leaderships handed over first)
    registered: float = 0.0  # the new one registered with every lookupd
    in_sync: float = 0.0  # every partition it held back in its in-sync set, the cluster stable
    pids: tuple[int, int] = (0, 0)

    def line(self) -> str:
        return (
            f"nsqd {self.node.number} ({self.node.tcp}): pid {self.pids[0]} -> {self.pids[1]};"
            f" exited after {self.exited:.2f} s, registered after {self.registered:.2f} s,"
            f" its {self.partitions} partition(s) in sync and the cluster stable after"
            f" {self.in_sync:.2f} s"
        )


def restart(folder: RunFolder, lookupd: Lookupd, node: Node, timeout: float) -> Restart:
    """Have scripts/run restart ``node`` and wait until it is back in every in-sync set it was
    in (:class:`TimedOut` if a step takes longer than ``timeout``)."""
    report = Restart(node)
    partitions = held(lookupd.assignments(node), node.tcp)
    report.partitions = len(partitions)
    old = folder.pid(node)
    if old is None or not alive(old):
        raise TimedOut(f"nsqd {node.number}: not running before its restart")
    asked = time.monotonic()
    request = folder.ask_restart(node)
    signalled = 0.0

    def taken() -> bool:
        """scripts/run removes the request when it acts on it; the signal is repeated every
        second (one caught just before scripts/run waits is only seen at its next wait)."""
        nonlocal signalled
        if not request.exists():
            return True
        if time.monotonic() - signalled > 1.0:
            folder.signal_run()
            signalled = time.monotonic()
        return False

    wait_until(f"scripts/run taking the restart of nsqd {node.number}", timeout, taken)
    wait_until(f"nsqd {node.number} exiting", timeout, lambda: not alive(old))
    report.exited = time.monotonic() - asked
    new_pid = 0

    def started() -> bool:
        nonlocal new_pid
        pid = folder.pid(node)
        if pid is None or pid == old or not alive(pid):
            return False
        new_pid = pid
        return all(lookupd.registered(node, address) for address in lookupd.addresses)

    wait_until(f"nsqd {node.number} registered again", timeout, started)
    report.registered = time.monotonic() - asked
    report.pids = (old, new_pid)

    def rejoined() -> bool:
        late = out_of_sync(lookupd.assignments(node), node.tcp, partitions)
        return not late and lookupd.stable()

    wait_until(f"nsqd {node.number} back in its in-sync sets", timeout, rejoined)
    report.in_sync = time.monotonic() - asked
    return report


def create_topic(lookupd: Lookupd, nodes: list[Node], topic: str, timeout: float) -> None:
    """The load's topic: a partition per node, two copies each, in sync, with channel
    :data:`CHANNEL` (created on a node, which carries it to every partition's leader)."""
    query = f"topic={topic}&partition_num={len(nodes)}&replicator=2"
    lookupd.call(f"/topic/create?{query}", "POST")
    wait_until(f"topic {topic} placed and in sync", timeout, lookupd.stable)
    errors = []
    for node in nodes:
        url = f"http://{node.http}/channel/create?topic={topic}&channel={CHANNEL}"
        try:
            request = urllib.request.Request(url, method="POST")
            with urllib.request.urlopen(request, timeout=5):  # noqa: S310
                return
        except OSError as exc:
            errors.append(f"{node.http}: {exc}")
    raise LookupdError(f"channel {CHANNEL} of {topic}: {'; '.join(errors)}")


CHANNEL = "rolling_restart"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/rolling-restart", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--data", required=True, help="scripts/run's data folder (PNSQ_DATA)")
    parser.add_argument("--timeout", type=float, default=120.0, help="s per step (default 120)")
    parser.add_argument("--interval", type=float, default=0.01, help="s between publishes")
    parser.add_argument("--topic", default="", help="the load's topic (default: a new name)")
    parser.add_argument("--keep-topic", action="store_true", help="do not delete it at the end")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    folder = RunFolder(Path(args.data))
    try:
        running = alive(folder.run_pid())
        lookupd = Lookupd(folder.lookupds(), folder.secret())
        nodes = folder.nodes()
    except (FileNotFoundError, ValueError):
        running = False
    if not running or not nodes:
        print(f"rolling-restart: no cluster of scripts/run in {folder.data}", file=sys.stderr)
        return 2
    say(f"{len(nodes)} nodes; lookupd {' '.join(lookupd.addresses)}")
    wait_until("the cluster stable before the restarts", args.timeout, lookupd.stable)
    topic = args.topic or f"rolling_restart_{int(time.time())}"
    create_topic(lookupd, nodes, topic, args.timeout)
    publisher = Publisher(nodes[0].tcp, lookupd.addresses[0], topic, args.interval)
    publisher.start()
    wait_until("the first publish acknowledged", args.timeout, lambda: bool(publisher.load.acked))
    say(f"publishing to {topic} ({len(nodes)} partitions, 2 copies) every {args.interval} s")
    try:
        lookupd.call("/cluster/upgrade/begin", "POST")
    except LookupdError as exc:
        publisher.stop()
        print(f"rolling-restart: lookupd refused the upgrade: {exc}", file=sys.stderr)
        return 2
    upgrading = lookupd.call("/cluster/stats").get("upgrading")
    say(f"POST /cluster/upgrade/begin: /cluster/stats says upgrading {json.dumps(upgrading)}")
    failure = ""
    try:
        for node in nodes:
            say(f"nsqd {node.number} ({node.tcp}): restarting")
            say(restart(folder, lookupd, node, args.timeout).line())
    except (TimedOut, LookupdError) as exc:
        failure = str(exc)
        say(f"FAILED: {failure}; the nodes after it were not restarted")
    finally:
        answer = lookupd.call("/cluster/upgrade/done", "POST")
        say(f"POST /cluster/upgrade/done: upgrading {str(answer['upgrading']).lower()}")
    try:
        settled = wait_until("the cluster settled after the upgrade", args.timeout, lookupd.settled)
        leaders = ", ".join(f"{node} {count}" for node, count in lookupd.leaders().items())
        say(f"cluster stable {settled:.2f} s after /cluster/upgrade/done; leaders: {leaders}")
    except TimedOut as exc:
        failure = failure or str(exc)
        say(f"FAILED: {exc}")
    load = publisher.stop()
    missing = unread(nodes[0].tcp, lookupd.addresses[0], topic, CHANNEL, load.acked)
    if missing:
        for line in locate({n.number: n.http for n in nodes}, topic, CHANNEL, missing):
            say(f"not read back: {line}")
    if not args.keep_topic:
        lookupd.call(f"/topic/delete?topic={topic}", "POST")
    say(
        f"published: {len(load.acked)} acknowledged, {load.failed} failed attempts (retried)"
        + (f", the last: {load.last_failure}" if load.failed else "")
    )
    say(f"longest write gap: {load.longest_gap * 1000:.0f} ms")
    say(f"acknowledged messages not read back: {len(missing)}")
    if failure or missing:
        say("rolling restart: FAILED")
        return 1
    say("rolling restart: done")
    return 0


def say(line: str) -> None:
    print(f"[rolling-restart {time.strftime('%H:%M:%S')}] {line}", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
