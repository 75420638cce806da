#!/usr/bin/env python3
"""Partitions at scale: a pnsq lookupd and three nsqd on loopback, topics of ``--per-topic``
partitions with two copies each, up to ``--partitions`` in all; measures (docs/benchmarks.md,
"Partitions at scale"):

* ``writable_s``: seconds from the first ``/topic/create`` until every partition took a PUB at
  its leader (a PUB is acknowledged only once the partition's replica holds it);
* ``idle_cpu``: each daemon's CPU (share of one core) over ``--idle`` seconds with nothing to
  do, ``--settle`` seconds after the probe (its writes are fsynced partition by partition: at
  10,000 partitions that pass outlasted a 3 s settle, 0.098 against 0.073 after 10 s in
  back-to-back runs), and its TCP connections (``ss``);
* ``failover_s``: after a kill -9 of the node leading the most partitions, seconds until every
  partition it led took a PUB at its new leader (skipped, ``failover_skipped``, when not every
  partition was writable before: a failover of a cluster that never served is no figure).

Run from the repository with PYTHONPATH set to it (it starts the daemons with
``tests/daemons.py``): ``python scripts/bench_scale.py --partitions 600``. ``--profile DIR``
records py-spy profiles (raw, for flame graphs) of each daemon while idle and of the survivors
during the failover. One JSON line on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from protocol import Pub  # noqa: E402
from tests.daemons import Daemon  # noqa: E402
from tests.integration.lookupd_helpers import get_json, pnsq_cluster, request  # noqa: E402
from tests.rawclient import RawClient  # noqa: E402

PY_SPY = Path(sys.executable).parent / "py-spy"
CHUNK = 50  # partitions probed on one connection (pipelined); chunks run in parallel
#: seconds the probe waits for each reply before it sends its chunk's PUBs again. It was 2 s:
#: on some days' hosts the 10,000 first PUBs (each a first append, a
#: follower's, an acknowledgement) outlasted it, every chunk was sent again while the first
#: copies were still being served, and the rounds fed on themselves (9,966 of 10,000
#: partitions not yet answered after 15 s; with 30 s, all of them in 4.9 s)
REPLY_WAIT = 10.0
TICKS = os.sysconf("SC_CLK_TCK")
STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}")


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (``/proc/PID/stat``), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def connections(pid: int) -> int:
    out = subprocess.run(["ss", "-tnpH"], capture_output=True, text=True, check=False).stdout
    return sum(f"pid={pid}," in line for line in out.splitlines())


def leaders(lookupd: Daemon, topic: str) -> dict[int, str]:
    """Partition -> its leader's TCP address, as lookupd answers /lookup."""
    status, body, _ = request(f"http://{lookupd.http_address}/lookup?topic={topic}")
    if status != 200:
        return {}
    found = {}
    for number, node in (json.loads(body).get("partitions") or {}).items():
        found[int(number)] = f"{node['broadcast_address']}:{node['tcp_port']}"
    return found


class Prober:
    """PUBs one message to each partition at its leader until each took one."""

    def __init__(self, lookupd: Daemon, topics: list[str], per_topic: int) -> None:
        self.lookupd = lookupd
        self.left = {(t, p) for t in topics for p in range(per_topic)}

    def run(self, timeout: float) -> float | None:
        start = time.monotonic()
        while self.left and time.monotonic() - start < timeout:
            by_leader: dict[str, list[tuple[str, int]]] = {}
            for topic in sorted({t for t, _ in self.left}):
                found = leaders(self.lookupd, topic)
                for key in sorted(k for k in self.left if k[0] == topic):
                    if key[1] in found:
                        by_leader.setdefault(found[key[1]], []).append(key)
            threads = [
                threading.Thread(target=self._probe, args=(address, keys[i : i + CHUNK]))
                for address, keys in by_leader.items()
                for i in range(0, len(keys), CHUNK)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            if self.left:
                time.sleep(0.02)
        return time.monotonic() - start if not self.left else None

    def _probe(self, address: str, keys: list[tuple[str, int]]) -> None:
        """One connection to ``address``: every PUB sent at once (pipelined), the replies read
        in order; a partition answered with an error, or not within :data:`REPLY_WAIT`, is
        tried again."""
        try:
            client = RawClient(address, timeout=REPLY_WAIT)
        except OSError:
            return
        try:
            client.send(*(Pub(topic, b"x", partition=number) for topic, number in keys))
            for key in keys:
                if client.read(skip_heartbeats=True).data == b"OK":
                    self.left.discard(key)
        except OSError:
            pass
        finally:
            client.close()


def stamps(daemon: Daemon, needle: str, after: float) -> list[float]:
    """Wall times of ``daemon``'s log lines containing ``needle`` logged after ``after``."""
    found = []
    for line in daemon.log_text().splitlines():
        match = STAMP.search(line)
        if match and needle in line:
            when = datetime.strptime(match.group(0), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if when >= after:
                found.append(when)
    return found


def profile(pid: int, seconds: int, out: Path) -> subprocess.Popen[bytes]:
    argv = [str(PY_SPY), "record", "-p", str(pid), "-f", "raw", "-d", str(seconds), "-o", str(out)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=600)
    parser.add_argument("--per-topic", type=int, default=200)
    parser.add_argument("--idle", type=int, default=10)
    parser.add_argument(
        "--settle", type=float, default=10.0, help="seconds between the probe and the idle window"
    )
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument("--profile", type=Path, default=None)
    parser.add_argument("--create-profile", type=int, default=10)
    parser.add_argument("--logs", type=Path, default=None, help="copy the daemons' logs here")
    parser.add_argument(
        "--lookupd-flag", action="append", default=[], help="a flag for lookupd (repeatable)"
    )
    parser.add_argument("--no-failover", action="store_true")
    args = parser.parse_args()
    result: dict[str, Any] = {"partitions": args.partitions, "per_topic": args.per_topic}
    with (
        tempfile.TemporaryDirectory(prefix="bench-scale-") as work,
        pnsq_cluster(Path(work), 3, *args.lookupd_flag) as (lookupd, nodes),
    ):
        daemons = {"lookupd": lookupd, **{f"nsqd{i}": n for i, n in enumerate(nodes)}}
        pids = {name: d.proc.pid for name, d in daemons.items() if d.proc}
        count = max(1, args.partitions // args.per_topic)
        topics = [f"scale{i}" for i in range(count)]
        creating = []
        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
            for name, pid in pids.items():
                out = args.profile / f"create-{name}.txt"
                creating.append(profile(pid, args.create_profile, out))
            time.sleep(0.5)
        start = time.monotonic()
        for topic in topics:
            query = f"topic={topic}&partition_num={args.per_topic}&replicator=2"
            status, body, _ = request(f"http://{lookupd.http_address}/topic/create?{query}", "POST")
            assert status == 200, (status, body)
        result["create_s"] = round(time.monotonic() - start, 2)
        took = Prober(lookupd, topics, args.per_topic).run(args.timeout)
        result["writable_s"] = None if took is None else round(time.monotonic() - start, 2)
        for spy in creating:
            spy.wait()
        text = lookupd.log_text()
        result["before_kill"] = {
            what: text.count(what) for what in ("promoted", "OFFLINE", "isr shrink", "isr expand")
        }
        time.sleep(args.settle)  # let progress reports, ISR and the probe's syncs settle
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        spies = []
        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
            for name, pid in pids.items():
                spies.append(profile(pid, args.idle, args.profile / f"idle-{name}.txt"))
        time.sleep(args.idle)
        result["idle_cpu"] = {
            name: round((cpu_seconds(pid) - before[name]) / args.idle, 3)
            for name, pid in pids.items()
        }
        for spy in spies:
            spy.wait()
        result["connections"] = {name: connections(pid) for name, pid in pids.items()}
        if result["writable_s"] is None:
            result["failover_skipped"] = "not every partition took a PUB"
        elif not args.no_failover:
            node_ids = {n.tcp_address: n for n in nodes}
            led: dict[str, list[tuple[str, int]]] = {}
            for topic in topics:
                for number, address in leaders(lookupd, topic).items():
                    led.setdefault(address, []).append((topic, number))
            victim_address = max(led, key=lambda a: len(led[a]))
            victim = node_ids[victim_address]
            result["victim_led"] = len(led[victim_address])
            spies = []
            if args.profile:
                for name, pid in pids.items():
                    if pid != victim.proc.pid:  # type: ignore[union-attr]
                        out = args.profile / f"failover-{name}.txt"
                        spies.append(profile(pid, 8, out))
                time.sleep(0.5)
            prober = Prober(lookupd, topics, args.per_topic)
            prober.left = set(led[victim_address])
            killed = time.time()
            victim.kill()
            took = prober.run(args.timeout)
            result["failover_s"] = None if took is None else round(took, 2)
            decided = stamps(lookupd, "promoted", killed)
            led_at = [
                t for n in nodes if n is not victim for t in stamps(n, "is now leader", killed)
            ]
            if decided and led_at:
                result["failover_decided_s"] = [
                    round(min(decided) - killed, 3),
                    round(max(decided) - killed, 3),
                ]
                result["failover_leading_s"] = [
                    round(min(led_at) - killed, 3),
                    round(max(led_at) - killed, 3),
                ]
            for spy in spies:
                spy.wait()
        result["lookupd_nodes"] = len(get_json(lookupd, "/nodes")["producers"])
        if args.logs:
            args.logs.mkdir(parents=True, exist_ok=True)
            for name, daemon in daemons.items():
                (args.logs / f"{name}.log").write_text(daemon.log_text())
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
