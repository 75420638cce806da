#!/usr/bin/env python3
"""scripts/bench's partition-move row (python stdlib only): the topic it loads and the moves it
makes on a pnsq cluster of three nodes (lookupd started with --auto-balance=false, so that
nothing but these moves changes the placement).

Subcommands:
  setup LOOKUPD_HTTP TOPIC SECS   create TOPIC (2 partitions, 2 copies), wait until both are
                                  in sync with nothing moving, and print partition 0's
                                  leader's TCP address
  move LOOKUPD_HTTP TOPIC DELAY SECS
                                  after DELAY seconds, move partition 0's replica to the node
                                  holding no copy of it, then partition 0's leadership to the
                                  node that replica left (youzan's /topic/partition/move,
                                  move_leader=true), each waited for until the cluster is
                                  stable again; print "replica_move=S leader_move=S ended=S"
                                  (seconds each move took, seconds from the start of the
                                  command to the end of the second)
  load-extras FILE                scripts/bench_mpub.py's JSON line -> "failed=N gap_ms=X"

Each exits 1 (saying why on stderr) when the cluster does not do it within SECS.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from bench_cluster import LOOKUP_ACCEPT, cluster_auth, http_json, poll


def control(lookupd_http: str, path: str, method: str = "GET") -> Any:
    """A cluster-control request (with the credential when the cluster has one)."""
    headers = {**LOOKUP_ACCEPT, **cluster_auth()}
    return http_json(f"http://{lookupd_http}{path}", method=method, headers=headers)


def placement(lookupd_http: str, topic: str) -> dict[int, dict[str, Any]]:
    """Each partition of ``topic``: its ``leader``, ``replicas`` and ``isr`` (node ids), from
    the assignments of every registered node."""
    nodes = http_json(f"http://{lookupd_http}/nodes", headers=LOOKUP_ACCEPT)["producers"]
    found: dict[int, dict[str, Any]] = {}
    for node in nodes:
        node_id = f"{node['broadcast_address']}:{node['tcp_port']}"
        doc = control(lookupd_http, f"/pnsq/assignments?node={node_id}")
        for number, part in doc["topics"].get(topic, {}).get("partitions", {}).items():
            found[int(number)] = part
    return found


def node_ids(lookupd_http: str) -> list[str]:
    nodes = http_json(f"http://{lookupd_http}/nodes", headers=LOOKUP_ACCEPT)["producers"]
    return sorted(f"{n['broadcast_address']}:{n['tcp_port']}" for n in nodes)


def settled(lookupd_http: str) -> bool | None:
    """True once lookupd says the cluster is stable (no move, every copy in sync)."""
    return True if control(lookupd_http, "/cluster/stats")["stable"] else None


def move(lookupd_http: str, topic: str, source: str, target: str, leader: bool) -> None:
    query = (
        f"topic={topic}&partition=0&move_from={source}&move_to={target}"
        f"&move_leader={'true' if leader else 'false'}"
    )
    control(lookupd_http, f"/topic/partition/move?{query}", "POST")


def setup(lookupd_http: str, topic: str, seconds: float) -> str:
    query = f"topic={topic}&partition_num=2&replicator=2"
    http_json(f"http://{lookupd_http}/topic/create?{query}", method="POST")
    poll(f"{topic} placed and in sync", seconds, lambda: settled(lookupd_http))
    return str(placement(lookupd_http, topic)[0]["leader"])


def load_extras(path: str) -> str:
    lines = [ln for ln in Path(path).read_text(errors="replace").splitlines() if ln.startswith("{")]
    if not lines:
        raise ValueError(f"no JSON line in {path}")
    result = json.loads(lines[-1])
    return f"failed={result['failed']} gap_ms={result['longest_gap_ms']}"


def move_partition(lookupd_http: str, topic: str, delay: float, seconds: float) -> str:
    started = time.monotonic()
    time.sleep(delay)
    part = placement(lookupd_http, topic)[0]
    leader, replica = part["leader"], part["replicas"][0]
    spare = next(node for node in node_ids(lookupd_http) if node not in (leader, replica))
    begun = time.monotonic()
    move(lookupd_http, topic, replica, spare, leader=False)
    poll(f"{topic}/0's replica moved to {spare}", seconds, lambda: settled(lookupd_http))
    replica_took = time.monotonic() - begun
    begun = time.monotonic()
    move(lookupd_http, topic, leader, replica, leader=True)
    poll(f"{topic}/0's leadership moved to {replica}", seconds, lambda: settled(lookupd_http))
    leader_took = time.monotonic() - begun
    now = placement(lookupd_http, topic)[0]
    if now["leader"] != replica or sorted(now["isr"]) != sorted([replica, spare]):
        raise ValueError(f"{topic}/0 after the moves: {now}")
    ended = time.monotonic() - started
    return f"replica_move={replica_took:.2f} leader_move={leader_took:.2f} ended={ended:.2f}"


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = argv[0], argv[1:]
    try:
        if cmd == "setup":
            print(setup(args[0], args[1], float(args[2])))
        elif cmd == "load-extras":
            print(load_extras(args[0]))
        elif cmd == "move":
            print(move_partition(args[0], args[1], float(args[2]), float(args[3])))
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except (ValueError, OSError, KeyError, IndexError, StopIteration) as exc:
        print(f"bench_move {cmd}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
