"""File descriptors: nsqd under ``ulimit -n 1024`` with thousands of topics, and ten thousand
clients connecting or closing at once.

Thousands of topics: every partition's segment files used to stay open (two descriptors per
partition), so ~500 topics exhausted 1024 descriptors; the daemon then failed every request
and could not restart. Now idle segments are closed (``--max-segment-fds``) and reopened on
use, so the daemon serves, restarts (SIGTERM and kill -9) and every message stays readable.
"""

from __future__ import annotations

import http.client
from pathlib import Path

import pytest

from protocol import Fin, Rdy, Sub
from tests.daemons import Daemon, pnsq_nsqd
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration

LIMIT = 1024  # RLIMIT_NOFILE of the daemon under test, soft and hard


def _open_fds(daemon: Daemon) -> int:
    assert daemon.proc is not None
    return sum(1 for _ in Path(f"/proc/{daemon.proc.pid}/fd").iterdir())


def _ping(daemon: Daemon) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", daemon.http_port, timeout=10)
    try:
        conn.request("GET", "/ping")
        return conn.getresponse().read()
    finally:
        conn.close()


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
    daemon.open_files = LIMIT
    daemon.start()
    try:
        _publish_one_per_topic(daemon, topics)
        assert _ping(daemon) == b"OK"
        assert _open_fds(daemon) < LIMIT // 2  # room left for clients
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
