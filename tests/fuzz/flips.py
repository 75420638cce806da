"""The random-flip soak: damage at random places of every file kind of a real nsqd's data path,
between a clean stop (or kill -9) and a restart, and of a replicated leader's segments while
it runs.

A standalone round: start ``python -m nsqd`` on a fresh data path, publish acknowledged
messages (a body tells its number and is known, so a corrupt one is seen), consume and FIN a
part of them (channel cursors are checkpointed), stop it (SIGTERM, or SIGKILL), flip one
random byte in each of 1 to 3 random files (segments, indexes, ``state.json`` and
``pnsq.dat`` with their previous generations, the cursor journals), start it again, consume
everything and publish a few more. Checked: it starts, no body other than the one published
under its number is delivered, every acknowledged message not yet FINed whose record bytes were
not hit is delivered (more, redelivered, is allowed: at-least-once), the new ones too, and its
log holds no traceback.

A replica round (``--replica``): on one long-lived cluster (a pnsq lookupd and two pnsq
nsqd, ``replicator=2``), a new topic, acknowledged messages, then one random byte of the
leader's segment files flipped while it runs: every message must be delivered by the leader
(a hit record is copied back from the replica).

Figures: rounds, flips per file kind, records hit, skipped, healed, damaged checkpoints, and
the failures (crashes, hangs, corrupt deliveries, lost records) -- all of which must be 0.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

from protocol import Fin, Pub, Rdy, Sub
from tests.daemons import Daemon, pnsq_lookupd, pnsq_nsqd
from tests.integration.lookupd_helpers import get_json, post, roles, wait_for
from tests.rawclient import RawClient

NSQD_FLAGS = ("--max-bytes-per-file=20000", "--sync-timeout=20ms", "--read-cache-bytes=0")
QUIET = 2.0  # seconds without a message: the consumer has had everything
HEADER = 54  # bytes of a record header before the body (format 2, no ext)


class Failure(Exception):
    """A round broke an invariant (the text says which)."""


def _body(seed: int, number: int) -> bytes:
    rng = random.Random(seed * 1_000_003 + number)
    return b"%06d:" % number + rng.randbytes(rng.randrange(0, 400))


def _spans(path: Path) -> list[tuple[int, int, int]]:
    """``(start, end, number)`` of each record of a segment file as written."""
    data, out, position = path.read_bytes(), [], 0
    while position + 4 <= len(data):
        end = position + 4 + (int.from_bytes(data[position : position + 4], "big") & 0x3FFFFFFF)
        number = data[position + HEADER : position + HEADER + 6]
        out.append((position, end, int(number) if number.isdigit() else -1))
        position = end
    return out


def _flip(path: Path, at: int, bit: int) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        byte = os.pread(fd, 1, at)
        os.pwrite(fd, bytes([byte[0] ^ (1 << bit)]), at)
    finally:
        os.close(fd)


def _kind(path: Path) -> str:
    name = path.name
    for suffix, kind in ((".log", "segment"), (".index", "index")):
        if name.endswith(suffix):
            return kind
    return name.replace(".prev", " (previous)")


def _metric(node: Daemon, name: str) -> float:
    with urllib.request.urlopen(f"http://{node.http_address}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith((name + "{", name + " "))
    )


def _publish(node: Daemon, topic: str, bodies: list[bytes]) -> None:
    client = RawClient(node.tcp_address, timeout=30)
    try:
        for body in bodies:
            client.send(Pub(topic, body))
        for _ in bodies:
            reply = client.read(skip_heartbeats=True)
            if reply.data != b"OK":
                raise Failure(f"publish refused: {reply.data!r}")
    finally:
        client.close()


def _consume(
    node: Daemon, topic: str, wanted: set[int], seed: int, limit: int | None = None
) -> tuple[set[int], int]:
    """Numbers delivered (FINed) until ``wanted`` are all in, ``limit`` taken, or it is quiet;
    and how many bodies were corrupt."""
    client = RawClient(node.tcp_address, timeout=QUIET)
    got: set[int] = set()
    corrupt = taken = 0
    try:
        client.send(Sub(topic, "ch"), Rdy(200))
        reply = client.read(skip_heartbeats=True)
        if reply.data != b"OK":
            raise Failure(f"SUB refused: {reply.data!r}")
        while not wanted <= got and (limit is None or taken < limit):
            try:
                frame = client.read(skip_heartbeats=True)
            except TimeoutError:
                break
            if not frame.is_message:
                raise Failure(f"unexpected frame {frame.data!r}")
            prefix = frame.body[:6]
            number = int(prefix) if prefix.isdigit() else -1
            if number < 0 or frame.body != _body(seed, number):
                corrupt += 1
            else:
                got.add(number)
            taken += 1
            client.send(Fin(frame.message_id))
    finally:
        client.close()
    return got, corrupt


class Soak:
    """The figures of a soak run, and its rounds."""

    def __init__(self, work: Path, seed: int, save: Path) -> None:
        self.work = work
        self.rng = random.Random(seed)
        self.save = save
        self.figures: Counter[str] = Counter()
        self.flips: Counter[str] = Counter()

    def fail(self, kind: str, text: str, directory: Path | None) -> None:
        self.figures[kind] += 1
        self.save.mkdir(parents=True, exist_ok=True)
        target = self.save / f"round-{self.figures['rounds']:05d}-{kind}"
        if directory is not None and directory.exists():
            shutil.copytree(directory, target, dirs_exist_ok=True)
            log = directory.parent / f"{directory.name}.log"
            if log.exists():
                shutil.copy(log, target.with_suffix(".log"))
        (self.save / f"round-{self.figures['rounds']:05d}-{kind}.txt").write_text(text)
        print(f"round {self.figures['rounds']}: {kind}: {text[:300]}", flush=True)

    # -- a standalone round ------------------------------------------------------------------

    def standalone_round(self) -> None:
        rng, seed = self.rng, self.rng.randrange(1 << 30)
        directory = self.work / "standalone"
        shutil.rmtree(directory, ignore_errors=True)
        node = pnsq_nsqd(directory / "data", *NSQD_FLAGS)
        count = rng.randrange(50, 400)
        bodies = [_body(seed, i) for i in range(count)]
        try:
            node.start()
            _publish(node, "t", bodies)
            finned = rng.randrange(0, count)
            got, corrupt = _consume(node, "t", set(range(finned)), seed, limit=finned)
            if corrupt or len(got) < finned:
                raise Failure(f"before any damage: {corrupt} corrupt, {len(got)}/{finned}")
            time.sleep(0.1)  # the cursor's checkpoint (sync timeout 20 ms)
            if rng.random() < 0.5:
                node.kill()
                self.figures["kill -9"] += 1
            else:
                node.stop()
            hit = self._damage(node.data_path, rng)
            try:
                node.start(timeout=60)
            except RuntimeError as exc:
                self.fail("crashes", f"{exc}", node.data_path)
                return
            wanted = set(range(finned, count)) - hit
            got, corrupt = _consume(node, "t", wanted, seed)
            more = [_body(seed, i) for i in range(count, count + 5)]
            _publish(node, "t", more)
            got_more, corrupt_more = _consume(node, "t", set(range(count, count + 5)), seed)
            self.figures["corrupt deliveries"] += corrupt + corrupt_more
            lost = (wanted - got) | (set(range(count, count + 5)) - got_more)
            self.figures["records hit"] += len(hit)
            self.figures["skipped"] += int(_metric(node, "pnsq_corrupt_skipped_records_total"))
            self.figures["damaged checkpoints"] += int(
                _metric(node, "pnsq_corrupt_checkpoints_total")
            )
            if corrupt or corrupt_more:
                self.fail("corrupt", f"seed {seed}: corrupt bodies delivered", node.data_path)
            if lost:
                self.figures["lost records"] += len(lost)
                self.fail("lost", f"seed {seed}: lost {sorted(lost)[:50]}", node.data_path)
            log = node.log_text()
            if "Traceback" in log or "unexpected error" in log:
                self.fail("errors in log", log[-4000:], node.data_path)
        except (Failure, TimeoutError, OSError) as exc:
            text = f"{exc}\n{node.log_text()[-6000:]}"
            kind = "hangs" if isinstance(exc, TimeoutError) else "failures"
            self.fail(kind, text, node.data_path)
        finally:
            node.stop()
            self.figures["rounds"] += 1
            self.figures["standalone rounds"] += 1

    def _damage(self, data: Path, rng: random.Random) -> set[int]:
        """Flip one byte in each of 1-3 random files; the numbers of the records hit."""
        files = sorted(
            p
            for p in data.rglob("*")
            if p.is_file()
            and p.stat().st_size
            and (
                p.suffix in (".log", ".index", ".journal")
                or p.name.startswith(("state.json", "pnsq.dat"))
            )
            and ".corrupt-" not in p.name
        )
        hit: set[int] = set()
        for victim in rng.sample(files, min(len(files), rng.randrange(1, 4))):
            at = rng.randrange(victim.stat().st_size)
            if victim.suffix == ".log":
                for start, end, number in _spans(victim):
                    if start <= at < end:
                        hit.add(number)
            _flip(victim, at, rng.randrange(8))
            self.flips[_kind(victim)] += 1
        return hit

    # -- a replica round ---------------------------------------------------------------------

    def replica_round(self, lookupd: Daemon, nodes: list[Daemon]) -> None:
        rng, seed = self.rng, self.rng.randrange(1 << 30)
        topic = f"r{self.figures['replica rounds']}"
        phase = "create"
        try:
            query = f"/topic/create?topic={topic}&partition_num=1&replicator=2"
            status, text = post(lookupd, query)
            if status != 200:
                raise Failure(f"create {topic}: {status} {text!r}")
            wait_for(lambda: all(roles(n, topic) for n in nodes), what="placed", timeout=30)
            leader = next(n for n in nodes if (roles(n, topic) or {}).get(0) == "leader")
            wait_for(lambda: _in_sync(leader, topic), what="both in sync", timeout=30)
            count = rng.randrange(50, 300)
            phase = "publish"
            _publish(leader, topic, [_body(seed, i) for i in range(count)])
            phase = "flip and consume"
            segments = sorted((leader.data_path / "topics" / f"t-{topic}" / "0").glob("*.log"))
            victim = rng.choice(segments)
            start, end, number = rng.choice(_spans(victim))
            at = rng.randrange(start, end)
            healed_before = _metric(leader, "pnsq_corrupt_healed_records_total")
            _flip(victim, at, rng.randrange(8))
            self.flips["segment (leader, running)"] += 1
            self.figures["records hit"] += 1
            both = rng.random() < 0.2  # the replica's copy of that record rots too
            if both:
                replica = next(n for n in nodes if n is not leader)
                self._damage_copy(replica, topic, number, rng)
            got, corrupt = _consume(leader, topic, set(range(count)), seed)
            self.figures["corrupt deliveries"] += corrupt
            healed = _metric(leader, "pnsq_corrupt_healed_records_total") - healed_before
            self.figures["healed"] += int(healed)
            lost = set(range(count)) - got
            if corrupt:
                self.fail("corrupt", f"seed {seed}: corrupt bodies from the leader", None)
            if both and lost <= {number}:
                self.figures["skipped (both copies hit)"] += len(lost)
            elif lost:
                self.figures["lost records"] += len(lost)
                self.fail("lost", f"seed {seed}: {victim} byte {at}: lost {sorted(lost)}", None)
        except (Failure, TimeoutError, OSError) as exc:
            logs = "\n".join(f"--- {n.log_path.name}\n{n.log_text()[-6000:]}" for n in nodes)
            text = f"{topic}, {phase}: {exc}\n{logs}"
            self.fail("hangs" if isinstance(exc, TimeoutError) else "failures", text, None)
        finally:
            self.figures["rounds"] += 1
            self.figures["replica rounds"] += 1

    def _damage_copy(self, node: Daemon, topic: str, number: int, rng: random.Random) -> None:
        """Flip a byte in the body of message ``number`` in ``node``'s copy of ``topic``."""
        for segment in (node.data_path / "topics" / f"t-{topic}" / "0").glob("*.log"):
            for start, end, found in _spans(segment):
                if found == number:
                    _flip(segment, rng.randrange(start + HEADER + 6, end), rng.randrange(8))
                    self.flips["segment (replica, running, same record)"] += 1
                    return

    def report(self, started: float) -> str:
        lines = [f"flip soak: {time.monotonic() - started:.0f} s"]
        lines += [f"  {k}: {v}" for k, v in sorted(self.figures.items())]
        lines += [f"  flips in {k}: {v}" for k, v in sorted(self.flips.items())]
        return "\n".join(lines)

    def failed(self) -> bool:
        return any(
            self.figures[k]
            for k in ("crashes", "hangs", "corrupt", "lost", "failures", "errors in log")
        )


def _in_sync(leader: Daemon, topic: str) -> bool:
    stats = get_json(leader, f"/stats?format=json&topic={topic}")
    (entry,) = [t for t in stats["topics"] if t["topic_name"] == topic]
    return len(entry["partitions"][0]["isr"]) == 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the random-flip soak (see tests/fuzz/flips.py)")
    parser.add_argument("--flips", action="store_true", help="(selects this soak)")
    parser.add_argument("--seconds", type=float, default=300.0, help="time budget")
    parser.add_argument("--rounds", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--replica", action="store_true", help="every other round: replica")
    parser.add_argument("--save", type=Path, default=Path("fuzz-failures"))
    args = parser.parse_args(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pnsq-flips-") as tmp:
        work = Path(tmp)
        soak = Soak(work, args.seed, args.save)
        lookupd: Daemon | None = None
        nodes: list[Daemon] = []
        try:
            if args.replica:
                lookupd = pnsq_lookupd(work / "lookupd").start()
                flag = f"--lookupd-tcp-address={lookupd.tcp_address}"
                nodes = [pnsq_nsqd(work / n, flag, *NSQD_FLAGS).start() for n in "ab"]
                wait_for(lambda: len(get_json(lookupd, "/nodes")["producers"]) == 2)
            for i in range(args.rounds):
                if time.monotonic() - started > args.seconds:
                    break
                if lookupd is not None and i % 2:
                    soak.replica_round(lookupd, nodes)
                else:
                    soak.standalone_round()
                if soak.figures["rounds"] % 20 == 0:
                    print(soak.report(started), flush=True)
            for node in nodes:
                log = node.log_text()
                if node.proc is None or node.proc.poll() is not None:
                    soak.fail("crashes", f"replica-round node died:\n{log[-4000:]}", None)
                elif "Traceback" in log or "unexpected error" in log:
                    soak.fail("errors in log", log[-4000:], None)
        finally:
            for node in nodes:
                node.stop()
            if lookupd is not None:
                lookupd.stop()
    print(soak.report(started), flush=True)
    return 1 if soak.failed() else 0
