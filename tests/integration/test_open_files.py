"""File descriptors: nsqd under ``ulimit -n 1024`` with thousands of topics, and ten thousand
clients connecting or closing at once.

Thousands of topics: every partition's segment files used to stay open (two descriptors per
partition), so ~500 topics exhausted 1024 descriptors; the daemon then failed every request
and could not restart. Now idle segments are closed (``--max-segment-fds``) and reopened on
use, so the daemon serves, restarts (SIGTERM and kill -9) and every message stays readable.

Out of descriptors (more clients than ``ulimit -n``): the TCP and HTTP accept loops back off and
log one line each per 10 s, no traceback, and serve again once clients leave.

Ten thousand clients: all connect at once and each gets its IDENTIFY answered, then all close at
once; two seconds later pnsq must hold no more of their descriptors than the Go nsqd does in the
same test. (The listen queue is capped by ``net.core.somaxconn``; a client whose SYN it dropped
retries 1 s, 3 s, ... later, so "served" is checked after a bounded wait, not at once. A client
reset before any reply connects once more, and at most :data:`RECONNECTS` may.)
"""

from __future__ import annotations

import http.client
import resource
import threading
import time
from pathlib import Path

import pytest

from protocol import Fin, Rdy, Sub
from tests.daemons import Daemon, go_nsqd, pnsq_nsqd
from tests.massclients import Crowd
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration

LIMIT = 1024  # RLIMIT_NOFILE of the daemon under test, soft and hard
CROWD = 10_000  # clients connecting (then closing) at once
SERVE_WAIT = 60.0  # seconds for every client of the crowd to be served (SYN retries included)
RELEASE_WAIT = 2.0  # seconds after the crowd closed when the daemons' descriptors are counted
#: clients of the crowd that may be reset before any reply and connect again: one of 10,000 was
#: seen reset twice in six full parallel runs (nothing in the daemon's log; never alone, nor
#: under two cores of busy loops); a daemon that resets clients resets more than this
RECONNECTS = 10


def _open_fds(daemon: Daemon) -> int:
    """Open descriptors of the daemon, cheaply (Linux >= 6.2: the size of /proc/<pid>/fd)."""
    assert daemon.proc is not None
    fds = Path(f"/proc/{daemon.proc.pid}/fd")
    return fds.stat().st_size or sum(1 for _ in fds.iterdir())


def _get(daemon: Daemon, path: str) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", daemon.http_port, timeout=10)
    try:
        conn.request("GET", path)
        return conn.getresponse().read()
    finally:
        conn.close()


def _ping(daemon: Daemon) -> bytes:
    return _get(daemon, "/ping")


def _metric(daemon: Daemon, name: str) -> float:
    for line in _get(daemon, "/metrics").decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


def _publish_one_per_topic(daemon: Daemon, topics: int) -> None:
    """``PUB`` over HTTP (one keep-alive connection): topic ``t<i>`` gets the body ``m<i>``."""
    conn = http.client.HTTPConnection("127.0.0.1", daemon.http_port, timeout=10)
    try:
        for i in range(topics):
            conn.request("POST", f"/pub?topic=t{i}", body=b"m%d" % i)
            response = conn.getresponse()
            assert (response.status, response.read()) == (200, b"OK"), f"topic t{i}"
    finally:
        conn.close()


def _read_one_per_topic(daemon: Daemon, topics: int) -> None:
    """Every topic's message, from a channel created by this SUB (it starts at the oldest
    message: the topic's first channel), read from disk after the restart."""
    for i in range(topics):
        client = RawClient(daemon.tcp_address)
        try:
            client.send(Sub(f"t{i}", "c"), Rdy(1))
            assert client.read().data == b"OK"
            frame = client.read(skip_heartbeats=True)
            assert frame.is_message, f"topic t{i}"
            assert frame.body == b"m%d" % i
            client.send(Fin(frame.message_id))
        finally:
            client.close()


def _many_topics(tmp_path: Path, topics: int) -> None:
    daemon = pnsq_nsqd(tmp_path / "data")
    daemon.open_files = (LIMIT, LIMIT)
    daemon.start()
    try:
        _publish_one_per_topic(daemon, topics)
        assert _ping(daemon) == b"OK"
        assert _open_fds(daemon) < LIMIT // 2  # room left for clients
        assert _metric(daemon, "pnsq_segment_fds_max") == LIMIT // 4  # the default
        assert _metric(daemon, "pnsq_segment_fds") <= LIMIT // 4
        assert _metric(daemon, "pnsq_segment_fd_evictions_total") >= topics - LIMIT // 8
        assert daemon.stop() == 0
        daemon.start(timeout=120)  # every topic's log is opened and recovered
        assert _ping(daemon) == b"OK"
        daemon.kill()
        daemon.start(timeout=120)
        _read_one_per_topic(daemon, topics)
        assert _ping(daemon) == b"OK"
        assert "Too many open files" not in daemon.log_text()
    finally:
        daemon.stop()


def test_1500_topics_under_1024_descriptors(tmp_path: Path) -> None:
    _many_topics(tmp_path, 1500)


@pytest.mark.slow
def test_5000_topics_under_1024_descriptors(tmp_path: Path) -> None:
    _many_topics(tmp_path, 5000)


def _crowd_comes_and_goes(daemon: Daemon) -> int:
    """Connect :data:`CROWD` clients at once (all must be served), close them all at once and
    return how many of their descriptors the daemon still holds :data:`RELEASE_WAIT` later."""
    before = _open_fds(daemon)
    crowd = Crowd(daemon.tcp_address, CROWD, reconnects=True)
    try:
        crowd.connect_all(SERVE_WAIT)
        assert (crowd.served, crowd.failed) == (CROWD, 0), (
            crowd.reasons,
            daemon.log_text()[-3000:],
        )
        assert crowd.reconnected <= RECONNECTS, daemon.log_text()[-3000:]
        assert _open_fds(daemon) > CROWD  # every client holds one (give or take a transient one)
    finally:
        crowd.close_all()
    time.sleep(RELEASE_WAIT)
    return max(_open_fds(daemon) - before, 0)


def test_ten_thousand_clients_connect_and_leave_at_once(tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard >= CROWD + 1000, "this test needs a hard RLIMIT_NOFILE above the crowd"
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the crowd's sockets
    go = go_nsqd(tmp_path / "go").start()
    try:
        go_held = _crowd_comes_and_goes(go)
    finally:
        go.stop()
    pnsq = pnsq_nsqd(tmp_path / "pnsq").start()
    try:
        pnsq_held = _crowd_comes_and_goes(pnsq)
        assert _ping(pnsq) == b"OK"
    finally:
        pnsq.stop()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert pnsq_held <= go_held + CROWD // 100, (pnsq_held, go_held)


def test_out_of_descriptors_logs_once_and_recovers(tmp_path: Path) -> None:
    daemon = pnsq_nsqd(tmp_path / "data")
    daemon.open_files = (LIMIT, LIMIT)
    daemon.start()
    try:
        crowd = Crowd(daemon.tcp_address, LIMIT + 100)
        answers: list[bytes] = []
        try:
            crowd.connect_all(3.0)  # those past the limit wait in the listen queue
            assert 0 < crowd.served < LIMIT
            ping = threading.Thread(target=lambda: answers.append(_ping(daemon)))
            ping.start()  # HTTP accept fails with EMFILE while the crowd stays
            time.sleep(1.5)
        finally:
            crowd.close_all()
        ping.join(15)
        assert answers == [b"OK"]
        assert _ping(daemon) == b"OK"
        log = daemon.log_text()
        assert log.count("TCP: cannot accept connections: Too many open files") == 1
        assert log.count("HTTP: cannot accept connections: Too many open files") == 1
        assert "Traceback" not in log
    finally:
        assert daemon.stop() == 0


def test_soft_open_files_limit_is_raised_to_the_hard_limit(tmp_path: Path) -> None:
    daemon = pnsq_nsqd(tmp_path / "data")
    daemon.open_files = (LIMIT, 4 * LIMIT)
    daemon.start()
    try:
        assert daemon.proc is not None
        limits = Path(f"/proc/{daemon.proc.pid}/limits").read_text().splitlines()
        row = next(line for line in limits if line.startswith("Max open files"))
        assert row.split()[3:5] == [str(4 * LIMIT)] * 2  # soft, hard
        assert f"open files limit: {4 * LIMIT} (was {LIMIT}, hard limit {4 * LIMIT})" in (
            daemon.log_text()
        )
    finally:
        daemon.stop()
