"""Fuzzing the cluster links: mutated ``"  R1"`` and ``"  V1"`` openings, with the cluster
handshake and without, sent to an nsqd's TCP port and a lookupd's, with a cluster secret and
without one.

The seeds are built here from pnsq's own encoders (a recording would hold nothing more: the
handshake's nonces are random, so no recorded proof is ever right again): a dialer's handshake
(its CHALLENGE, then a well-formed PROOF made against another listener's nonce) followed by
the link's first frames or commands (a follower's HELLO and ACK; an nsqd's IDENTIFY, REGISTER
and PING), and the same without the handshake. :class:`tests.fuzz.mutate.Mutator` mutates them
as it mutates the recorded client sessions (the frames' size fields included).

After the inputs: the daemon is alive, answers ``/ping``, logged no ``Traceback``, holds no
more sockets than before, and still does its work (nsqd: a PUB/SUB round trip and no client
left; lookupd: the node registered before is still listed, and a holder of the secret can
still prove it).
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from protocol.cluster_auth import DIALER, LISTENER, NONCE_SIZE, Handshake
from protocol.lookup_v1 import MAGIC_V1, encode_command, encode_identify
from protocol.replication import MAGIC as MAGIC_R1, Ack, Hello
from protocol.replication_encoder import encode
from tests.daemons import Daemon, cluster_secret_flag, pnsq_lookupd, pnsq_nsqd
from tests.fuzz.driver import Engine, Stats
from tests.fuzz.mutate import Input, Mutator, Seed, Target
from tests.fuzz.run import descriptors, fuzz, ping, raise_nofile, sockets_settle
from tests.integration.lookupd_helpers import get_json

NODE_ID = "127.0.0.1:4150"
#: an IDENTIFY body as pnsq's nsqd sends it, for NODE_ID
IDENTIFY = {
    "version": "1.3.0",
    "tcp_port": 4150,
    "http_port": 4151,
    "hostname": "fuzz",
    "broadcast_address": "127.0.0.1",
    "pnsq_extensions": ["partitions"],
}


def dialer_handshake(link: bytes, secret: bytes) -> tuple[bytes, bytes]:
    """A dialer's CHALLENGE and PROOF frames on ``link``, the proof made against a listener
    whose nonce is all zeros (well formed, wrong for any real listener)."""
    dialer = Handshake(secret, DIALER, link, NODE_ID, b"\x01" * NONCE_SIZE)
    listener = Handshake(secret, LISTENER, link, "127.0.0.1:4160", b"\x00" * NONCE_SIZE)
    challenge = dialer.data_to_send()
    listener.receive_data(challenge)
    dialer.receive_data(listener.data_to_send())
    return challenge, dialer.data_to_send()


def _framed(name: str, units: list[bytes]) -> Seed:
    """A seed of size-prefixed frames after a magic: every frame's size field is marked."""
    return Seed(name, Target.TCP, units, [(i, 0) for i in range(1, len(units))])


def cluster_seeds(link: bytes, secret: bytes) -> list[Seed]:
    """The seeds of one link (``"  R1"`` or ``"  V1"``): with the handshake and without."""
    challenge, proof = dialer_handshake(link, secret)
    if link == MAGIC_R1:
        frames = [encode(Hello(NODE_ID, "t", 0, 1, 0, 0)), encode(Ack(1, 0))]
        return [
            _framed("r1-handshake", [MAGIC_R1, challenge, proof, *frames]),
            _framed("r1-plain", [MAGIC_R1, *frames]),
        ]
    commands = [
        encode_identify(IDENTIFY),
        encode_command("REGISTER", "t", 0),
        encode_command("REGISTER", "t", 0, "c"),
        encode_command("PING"),
    ]
    identify = len(b"IDENTIFY\n")  # where the IDENTIFY's body size is, in its unit
    return [
        Seed(
            "v1-handshake",
            Target.TCP,
            [MAGIC_V1, challenge, proof, *commands],
            [(1, 0), (2, 0), (3, identify)],
        ),
        Seed("v1-plain", Target.TCP, [MAGIC_V1, *commands], [(1, identify)]),
    ]


def inputs(seeds: list[Seed], seed: int) -> Iterator[Input]:
    """The mutated inputs of ``seeds``, the same sequence for the same ``seed``."""
    mutator = Mutator(seeds, seed)
    return (mutator.next_input() for _ in itertools.count())


@dataclass
class LinkReport:
    """What a lookupd came through with (an nsqd is checked by :func:`tests.fuzz.run.fuzz`)."""

    stats: Stats
    crashed: str = ""
    tracebacks: int = 0
    leaked_sockets: int = 0


def fuzz_lookupd(
    lookupd: Daemon, items: Iterator[Input], limit: int, seconds: float, connections: int = 32
) -> LinkReport:
    """Send the inputs to ``lookupd``'s TCP port, then check it came through whole (the
    caller checks that its registrations still work)."""
    assert lookupd.proc is not None
    pid = lookupd.proc.pid
    sockets_before, _ = descriptors(pid)
    log_offset = lookupd.log_path.stat().st_size
    engine = Engine(("127.0.0.1", lookupd.tcp_port), ("127.0.0.1", lookupd.http_port), connections)

    def healthy() -> bool:
        return lookupd.proc is not None and lookupd.proc.poll() is None

    report = LinkReport(engine.run(items, limit, seconds, healthy))
    report.tracebacks = lookupd.log_path.read_bytes()[log_offset:].count(b"Traceback")
    if not healthy():
        report.crashed = f"lookupd exited with status {lookupd.proc.returncode}"
    elif not ping(lookupd):
        report.crashed = "/ping does not answer OK"
    else:
        time.sleep(0.5)
        report.leaked_sockets = max(0, sockets_settle(pid, sockets_before) - sockets_before)
    return report


def main(argv: list[str]) -> int:
    """``scripts/fuzz --cluster [--inputs N] [--seconds S] [--seed K] [--no-secret]``: a
    lookupd and one nsqd registered with it (both with a cluster secret, unless
    ``--no-secret``), the nsqd's ``"  R1"`` and then the lookupd's ``"  V1"`` fuzzed with up to
    N inputs or S seconds each. Exit status 1 if either did not come through whole."""
    parser = argparse.ArgumentParser(prog="scripts/fuzz --cluster")
    parser.add_argument("--cluster", action="store_true", required=True)
    parser.add_argument("--inputs", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=60.0, help="time budget per link")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-secret", action="store_true")
    parser.add_argument("--save", type=Path, default=Path("fuzz-failures"))
    args = parser.parse_args(argv)
    raise_nofile()
    secret = "fuzz cluster secret"
    with tempfile.TemporaryDirectory(prefix="pnsq-fuzz-cluster-") as tmp:
        work = Path(tmp)
        flags = () if args.no_secret else (cluster_secret_flag(work / "secret", secret),)
        lookupd = pnsq_lookupd(work / "lookupd", *flags).start()
        node = pnsq_nsqd(work / "node", f"--lookupd-tcp-address={lookupd.tcp_address}", *flags)
        try:
            node.start()
            r1_inputs = inputs(cluster_seeds(MAGIC_R1, secret.encode()), args.seed)
            r1 = fuzz(node, r1_inputs, args.inputs, args.seconds, 32, args.save)
            print("nsqd, '  R1':\n" + "\n".join(r1.lines()))
            v1_inputs = inputs(cluster_seeds(MAGIC_V1, secret.encode()), args.seed)
            v1 = fuzz_lookupd(lookupd, v1_inputs, args.inputs, args.seconds)
            registered = bool(v1.crashed == "" and get_json(lookupd, "/nodes")["producers"])
            print(
                f"lookupd, '  V1': {v1.stats.inputs} inputs in {v1.stats.elapsed:.1f} s; "
                f"crashes: {v1.crashed or 0}; hangs: {len(v1.stats.hangs)}; tracebacks in "
                f"log: {v1.tracebacks}; leaked sockets: {v1.leaked_sockets}; the node "
                f"{'still' if registered else 'NOT'} registered"
            )
        finally:
            node.stop()
            lookupd.stop()
    v1_ok = not (v1.crashed or v1.stats.hangs or v1.tracebacks or v1.leaked_sockets)
    return 0 if r1.ok and v1_ok and registered else 1
