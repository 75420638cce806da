"""scripts/bench's MPUB load for its partition-move row: pnsq's partition-aware client, which
follows each partition's leader through lookupd and publishes again after
``E_FAILED_ON_NOT_LEADER`` (NSQ's bench_writer stops at the first error reply, and a leadership
move answers the publishes caught in it with one).

    python scripts/bench_mpub.py LOOKUPD_HTTP SEED_TCP TOPIC SECONDS [CONNECTIONS]

CONNECTIONS (default 2, bench_writer's one per core here) producers each send MPUBs of
200 x 200 B, round-robin over the topic's partitions, one at a time, for SECONDS; a failed MPUB
(a handover, a lost connection) is counted, the partitions are looked up again and the same
batch is sent again. Prints one JSON line: ``msgs_per_sec`` (acknowledged messages / run
time), ``msgs``, ``failed`` (attempts) and ``longest_gap_ms`` (the longest time between two
acknowledged MPUBs of one producer).
"""

from __future__ import annotations

import json
import sys
import time

import trio

from pnsq.client import open_producer
from pnsq.client.retry import RETRIED, retryable

BATCH = [b"m" * 200] * 200  # bench_writer's --size=200 --batch-size=200


class Tally:
    """What every producer saw."""

    def __init__(self) -> None:
        self.msgs = 0
        self.failed = 0
        self.longest_gap = 0.0


async def produce(lookupd: str, seed: str, topic: str, until: float, tally: Tally) -> None:
    async with open_producer(seed, lookupd_http_address=lookupd, max_attempts=1) as producer:
        last = time.monotonic()
        while time.monotonic() < until:
            try:
                with trio.fail_after(10):
                    await producer.mpublish(topic, BATCH)
            except (*RETRIED, trio.TooSlowError) as exc:
                if not isinstance(exc, trio.TooSlowError) and not retryable(exc):
                    raise
                tally.failed += 1
                await trio.sleep(0.01)
                try:
                    await producer.partitions(topic)  # the leaders, looked up again
                except RETRIED:
                    tally.failed += 1
                continue
            now = time.monotonic()
            tally.longest_gap = max(tally.longest_gap, now - last)
            last = now
            tally.msgs += len(BATCH)


async def run(lookupd: str, seed: str, topic: str, seconds: float, connections: int) -> None:
    tally = Tally()
    started = time.monotonic()
    async with trio.open_nursery() as nursery:
        for _ in range(connections):
            nursery.start_soon(produce, lookupd, seed, topic, started + seconds, tally)
    took = time.monotonic() - started
    result = {
        "msgs_per_sec": tally.msgs / took,
        "msgs": tally.msgs,
        "failed": tally.failed,
        "longest_gap_ms": round(tally.longest_gap * 1000, 1),
    }
    print(json.dumps(result), flush=True)


def main(argv: list[str]) -> int:
    if len(argv) not in (4, 5):
        print(__doc__, file=sys.stderr)
        return 2
    connections = int(argv[4]) if len(argv) == 5 else 2
    trio.run(run, argv[0], argv[1], argv[2], float(argv[3]), connections)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
