"""Fuzz one running pnsq nsqd with mutated recorded sessions and check it came through whole.

    python -m tests.fuzz [--inputs N] [--seconds S] [--seed K] [--connections C]
                         [--save DIR] [--replay FILE ...]

After the inputs (or the time budget) the checks are: the process is alive, ``/ping`` answers OK,
a fresh connection can PUB and then SUB/RDY/FIN that message, the log holds no ``Traceback``,
the socket descriptors of the process are back to what they were before the run (after the
connections closed and a settle), and ``/stats`` lists no client or producer any more (every
connection's tasks are gone). Failing inputs (hangs; on a crash the last inputs sent) are saved
under ``--save`` as ``<n>.bin`` + ``<n>.json`` for ``--replay``. Exit status 1 on any failure.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from protocol import Fin, Pub, Rdy, Sub, SubMode
from tests.daemons import Daemon, pnsq_nsqd
from tests.fuzz.driver import Engine, Stats
from tests.fuzz.mutate import Input, Mutator, Seed, load_corpus
from tests.rawclient import RawClient


@dataclass
class Report:
    stats: Stats
    crashed: str = ""  # why the process is considered crashed, "" when it is not
    tracebacks: int = 0
    sockets_before: int = 0
    sockets_after: int = 0
    files_after: int = 0
    clients_after: int = 0
    round_trip: bool = False
    open_connections: list[str] = field(default_factory=list)  # clients' connections left open
    nsqd_cpu: float = 0.0  # CPU seconds nsqd spent during the inputs
    saved: list[Path] = field(default_factory=list)

    @property
    def leaked_sockets(self) -> int:
        return max(0, self.sockets_after - self.sockets_before)

    @property
    def ok(self) -> bool:
        return (
            not self.crashed
            and not self.stats.hangs
            and self.tracebacks == 0
            and self.leaked_sockets == 0
            and self.clients_after == 0
            and self.round_trip
        )

    def lines(self) -> list[str]:
        s = self.stats
        return [
            f"inputs: {s.inputs} in {s.elapsed:.1f} s = {s.rate:.0f} inputs/s "
            f"({s.bytes_sent} bytes sent, {s.bytes_received} received; "
            f"endings {dict(s.endings)}; nsqd used {self.nsqd_cpu:.1f} CPU s)",
            f"server replies: {s.ok_frames} OK, {s.message_frames} messages, "
            f"{len(s.error_codes)} error codes {dict(s.error_codes.most_common())}, "
            f"HTTP {dict(s.http_statuses.most_common())}",
            f"crashes: {1 if self.crashed else 0}{f' ({self.crashed})' if self.crashed else ''}",
            f"hangs: {len(s.hangs)}",
            f"tracebacks in log: {self.tracebacks}",
            f"leaked descriptors: {self.leaked_sockets} (sockets {self.sockets_before} -> "
            f"{self.sockets_after}; {self.files_after} other descriptors open)",
            *(f"  left open: {row}" for row in self.open_connections),
            f"leaked tasks: {self.clients_after} (clients and producers left in /stats)",
            f"round trip after the run: {'ok' if self.round_trip else 'FAILED'}",
            *(f"saved: {p}" for p in self.saved),
        ]


#: /proc/net/tcp's state of a listening socket
_TCP_LISTEN = "0A"


class _Sockets(NamedTuple):
    """A process's socket descriptors, and what /proc/net/tcp{,6} says of its TCP ones."""

    count: int  # socket descriptors
    other: int  # descriptors that are not sockets
    listening: set[str]  # local ports it listens on (hex)
    connected: list[tuple[str, str, str]]  # its other TCP sockets: (local port, peer port, state)


def _sockets(pid: int) -> _Sockets:
    inodes: set[str] = set()
    other = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = str(fd.readlink())
        except FileNotFoundError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
        else:
            other += 1
    found = _Sockets(len(inodes), other, set(), [])
    for table in ("tcp", "tcp6"):
        try:
            rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for row in rows:
            fields = row.split()
            if fields[9] not in inodes:
                continue
            (local, peer), state = (f.rsplit(":", 1)[1] for f in fields[1:3]), fields[3]
            if state == _TCP_LISTEN:
                found.listening.add(local)
            else:
                found.connected.append((local, peer, state))
    return found


def descriptors(pid: int) -> tuple[int, int]:
    """(sockets, other descriptors) the process holds, less the TCP connections it opened
    itself: a cluster node's registration and HTTP keep-alive connections to lookupd, whose
    number follows the machine's load, not the inputs (a leak is a client's connection the
    server never closed)."""
    found = _sockets(pid)
    outbound = sum(1 for local, _, _ in found.connected if local not in found.listening)
    return found.count - outbound, found.other


_TCP_STATES = {
    "01": "ESTABLISHED", "04": "FIN_WAIT1", "05": "FIN_WAIT2", "06": "TIME_WAIT", "07": "CLOSE",
    "08": "CLOSE_WAIT", "09": "LAST_ACK", "0B": "CLOSING",
}  # fmt: skip


def accepted(pid: int) -> list[tuple[int, int, str]]:
    """The process's connections accepted on its listening ports and not closed by it yet:
    (local port, peer port, TCP state)."""
    found = _sockets(pid)
    return [
        (int(local, 16), int(peer, 16), _TCP_STATES.get(state, state))
        for local, peer, state in found.connected
        if local in found.listening
    ]


def inbound_connections(pid: int) -> list[str]:
    """:func:`accepted`'s connections as ``STATE :local <- :peer`` (none is left once every
    client has gone and the server closed its side)."""
    return [f"{state} :{local} <- :{peer}" for local, peer, state in accepted(pid)]


def sockets_settle(pid: int, baseline: int, within: float = 5.0) -> int:
    """The process's socket count once it is back to ``baseline`` or ``within`` seconds have
    passed (a server closes its side a moment after the client sees EOF)."""
    deadline = time.monotonic() + within
    while True:
        sockets, _ = descriptors(pid)
        if sockets <= baseline or time.monotonic() > deadline:
            return sockets
        time.sleep(0.05)


def live_clients(nsqd: Daemon) -> int:
    """Clients of every channel plus producers, as /stats lists them."""
    with urllib.request.urlopen(f"http://{nsqd.http_address}/stats?format=json", timeout=10) as r:
        stats = json.loads(r.read())
    clients = sum(
        len(channel.get("clients", []))
        for topic in stats.get("topics", [])
        for channel in topic.get("channels", [])
    )
    return clients + len(stats.get("producers") or [])


def ping(nsqd: Daemon) -> bool:
    try:
        with urllib.request.urlopen(f"http://{nsqd.http_address}/ping", timeout=10) as r:
            return bool(r.read() == b"OK")
    except OSError:
        return False


def round_trip(nsqd: Daemon) -> bool:
    """PUB on one fresh connection, SUB + RDY + FIN on another: the body comes back."""
    body = b"after-the-fuzz"
    try:
        producer = RawClient(nsqd.tcp_address, timeout=10)
        producer.send(Pub("fuzz-check", body, None))
        if producer.read(skip_heartbeats=True).data != b"OK":
            return False
        producer.close()
        consumer = RawClient(nsqd.tcp_address, timeout=10)
        consumer.send(Sub("fuzz-check", "check", None, SubMode.PLAIN, None))
        if consumer.read(skip_heartbeats=True).data != b"OK":
            return False
        consumer.send(Rdy(1))
        frame = consumer.read(skip_heartbeats=True)
        consumer.send(Fin(frame.message_id))
        consumer.close()
        return frame.is_message and frame.body == body
    except OSError:
        return False


def raise_nofile() -> None:
    """Soft RLIMIT_NOFILE up to the hard limit (inherited by the nsqd we start): mutated topic
    names create topics, and each holds descriptors."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def subscriptions(seeds: list[Seed]) -> set[tuple[str, str]]:
    """(topic, channel) of every SUB line in the seeds."""
    found = set()
    for seed in seeds:
        for unit in seed.units:
            words = unit.split(b"\n", 1)[0].split(b" ")
            if words[0].startswith(b"SUB") and len(words) >= 3:
                found.add((words[1].decode(), words[2].decode()))
    return found


def prime(nsqd: Daemon, seeds: list[Seed], messages: int = 200) -> None:
    """Create the seeds' channels and put messages in them, so that mutated consumer sessions
    get deliveries (and their recorded FINs name ids that exist: the recording nsqd numbered
    its messages the same way)."""
    base = f"http://{nsqd.http_address}"
    body = b"\n".join(b"primed-%d" % i for i in range(messages))
    for topic, channel in sorted(subscriptions(seeds)):
        for path, data in (
            (f"/topic/create?topic={topic}", None),
            (f"/channel/create?topic={topic}&channel={channel}", None),
            (f"/mpub?topic={topic}", body),
        ):
            request = urllib.request.Request(base + path, data=data, method="POST")
            with urllib.request.urlopen(request, timeout=10) as response:
                response.read()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fuzz(
    nsqd: Daemon,
    inputs: Iterator[Input],
    limit: int,
    seconds: float,
    connections: int,
    save: Path | None,
    hang_timeout: float = 10.0,
    settle: float = 10.0,
) -> Report:
    """Run the inputs against the started ``nsqd`` and check it afterwards."""
    assert nsqd.proc is not None
    pid = nsqd.proc.pid
    # a connection of ours (priming) the server has not closed yet is not part of the baseline
    sockets_before = descriptors(pid)[0] - len(inbound_connections(pid))
    cpu_before = cpu_seconds(pid)
    log_offset = nsqd.log_path.stat().st_size
    engine = Engine(
        ("127.0.0.1", nsqd.tcp_port),
        ("127.0.0.1", nsqd.http_port),
        connections=connections,
        hang_timeout=hang_timeout,
    )

    def healthy() -> bool:
        return nsqd.proc is not None and nsqd.proc.poll() is None

    stats = engine.run(inputs, limit, seconds, healthy)
    print(f"sent {stats.inputs} inputs in {stats.elapsed:.1f} s; checking nsqd", flush=True)
    report = Report(stats, sockets_before=sockets_before)
    if healthy():
        report.nsqd_cpu = cpu_seconds(pid) - cpu_before
    log = nsqd.log_path.read_bytes()[log_offset:]
    report.tracebacks = log.count(b"Traceback")
    if not healthy():
        report.crashed = f"nsqd exited with status {nsqd.proc.returncode}"
    elif not ping(nsqd):
        report.crashed = "/ping does not answer OK"
    else:
        deadline = time.monotonic() + settle
        while True:
            report.sockets_after, report.files_after = descriptors(pid)
            report.clients_after = live_clients(nsqd)
            if report.leaked_sockets == 0 and report.clients_after == 0:
                break
            if time.monotonic() > deadline:
                report.open_connections = inbound_connections(pid)
                break
            time.sleep(0.2)
        report.round_trip = round_trip(nsqd)
    if save is not None:
        suspects = list(stats.hangs)
        if report.crashed or report.tracebacks:
            suspects += list(engine.recent)  # one of the last inputs did it
        if suspects:
            save.mkdir(parents=True, exist_ok=True)
            for n, item in enumerate(suspects):
                path = save / f"{n:04d}.bin"
                item.to_file(path)
                report.saved.append(path)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=3600.0, help="time budget")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--hang-timeout", type=float, default=10.0)
    parser.add_argument("--save", type=Path, default=Path("fuzz-failures"))
    parser.add_argument("--replay", type=Path, nargs="+", help="send these saved inputs only")
    parser.add_argument("--target", choices=["tcp", "http"], help="only this port's seeds")
    args = parser.parse_args(argv)
    raise_nofile()
    with tempfile.TemporaryDirectory(prefix="pnsq-fuzz-") as tmp:
        nsqd = pnsq_nsqd(Path(tmp) / "nsqd").start()
        try:
            if args.replay:
                replays = [Input.from_file(p) for p in args.replay]
                inputs: Iterator[Input] = iter(replays)
                limit, connections = len(replays), 1
            else:
                prime(nsqd, load_corpus())
                inputs = iter_inputs(args.seed, args.target)
                limit, connections = args.inputs, args.connections
            print(f"fuzzing nsqd pid {nsqd.proc.pid if nsqd.proc else '?'} ({nsqd.log_path})")
            report = fuzz(
                nsqd, inputs, limit, args.seconds, connections, args.save, args.hang_timeout
            )
        finally:
            nsqd.stop()
            if report_needs_log(nsqd):
                args.save.mkdir(parents=True, exist_ok=True)
                (args.save / "nsqd.log").write_text(nsqd.log_text())
                sys.stdout.write(tail(nsqd.log_text()))
                print(f"nsqd log saved in {args.save / 'nsqd.log'}")
    print("\n".join(report.lines()))
    return 0 if report.ok else 1


def iter_inputs(seed: int, target: str | None = None) -> Iterator[Input]:
    """The inputs of ``seed``, from every seed in the corpus or only ``target``'s."""
    seeds = [s for s in load_corpus() if target is None or s.target.value == target]
    mutator = Mutator(seeds, seed)
    return (mutator.next_input() for _ in itertools.count())


def report_needs_log(nsqd: Daemon) -> bool:
    return "Traceback" in nsqd.log_text()


def tail(text: str, lines: int = 60) -> str:
    return "\n".join(text.splitlines()[-lines:]) + "\n"
