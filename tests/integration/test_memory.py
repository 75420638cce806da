"""Memory is bounded in bytes: big messages and stalled consumers, against Go nsqd 1.3.0.

Each test runs the same workload on pnsq's nsqd and on the real Go nsqd, one after the other,
and compares their resident memory read from ``/proc/<pid>/status``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from protocol import Fin, Mpub, Rdy, Sub
from tests.daemons import Daemon, go_nsqd, pnsq_nsqd
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration


def memory_kb(daemon: Daemon, field: str) -> int:
    """``VmRSS`` (now) or ``VmHWM`` (peak) of the daemon's process, in KiB."""
    assert daemon.proc is not None
    status = Path(f"/proc/{daemon.proc.pid}/status").read_text()
    line = next(x for x in status.splitlines() if x.startswith(f"{field}:"))
    return int(line.split()[1])


def consumer(daemon: Daemon, topic: str, channel: str, rdy: int) -> RawClient:
    c = RawClient(daemon.tcp_address, timeout=30)
    assert c.identify(heartbeat_interval=60_000).type == 0
    c.send(Sub(topic, channel), Rdy(rdy))
    assert c.read().data == b"OK"
    return c


def side_by_side(tmp_path: Path, workload: Callable[[Daemon], int]) -> tuple[int, int]:
    """(pnsq, Go): what ``workload`` returns for each, run on a fresh daemon of each."""
    results = []
    for name, make in (("pnsq", pnsq_nsqd), ("go", go_nsqd)):
        daemon = make(tmp_path / name).start()
        try:
            results.append(workload(daemon))
        finally:
            daemon.stop()
    return results[0], results[1]


def stream_big_messages(daemon: Daemon, count: int, size: int) -> int:
    """Publish ``count`` messages of ``size`` bytes in MPUBs of 4 and consume each batch (FIN)
    as it arrives; the peak RSS (KiB)."""
    c = consumer(daemon, "big", "ch", rdy=4)
    p = RawClient(daemon.tcp_address, timeout=30)
    batch = 4
    for start in range(0, count, batch):
        bodies = [b"%08d" % i + b"m" * (size - 8) for i in range(start, start + batch)]
        p.send(Mpub("big", bodies))
        assert p.read(skip_heartbeats=True).data == b"OK"  # a loaded machine: >30 s in total
        for expected in bodies:
            frame = c.read(skip_heartbeats=True)
            assert frame.body[:8] == expected[:8]
            c.send(Fin(frame.message_id))
    peak = memory_kb(daemon, "VmHWM")
    p.close()
    c.close()
    return peak


def test_big_messages_stream_through_in_bounded_memory(tmp_path: Path) -> None:
    pnsq, go = side_by_side(tmp_path, lambda d: stream_big_messages(d, 3000, 1_000_000))
    print(f"peak RSS for 3000 x 1 MB streamed: pnsq {pnsq} KiB, Go {go} KiB")
    # Go's resident memory here is ~35 MiB; a Python process alone starts at ~30 MiB
    assert pnsq <= 3 * go, (pnsq, go)


def stalled_consumers(daemon: Daemon, consumers: int, count: int, size: int) -> int:
    """``consumers`` clients, each on its own channel with RDY 1000, stop reading; ``count``
    messages of ``size`` bytes are published. The RSS (KiB) once delivery has stalled."""
    clients = [consumer(daemon, "slow", f"ch{i}", rdy=1000) for i in range(consumers)]
    p = RawClient(daemon.tcp_address, timeout=30)
    batch = 40
    for start in range(0, count, batch):
        p.send(Mpub("slow", [b"%08d" % i + b"s" * (size - 8) for i in range(start, start + batch)]))
        assert p.read(skip_heartbeats=True).data == b"OK"  # a loaded machine: >30 s in total
    time.sleep(2)  # every consumer's pump takes what its RDY allows and blocks on its socket
    rss = memory_kb(daemon, "VmHWM")
    p.close()
    for c in clients:
        c.close()
    return rss


def test_stalled_consumers_do_not_pull_their_window_into_memory(tmp_path: Path) -> None:
    pnsq, go = side_by_side(tmp_path, lambda d: stalled_consumers(d, 5, 1000, 100_000))
    print(
        f"peak RSS with 5 stalled RDY-1000 consumers, 1000 x 100 KB: pnsq {pnsq} KiB, Go {go} KiB"
    )
    assert pnsq <= 2 * go, (pnsq, go)
