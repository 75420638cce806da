"""kill -9 never loses an acknowledged message."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.daemons import pnsq_nsqd
from tests.interop.drivers import Driver

pytestmark = pytest.mark.integration


def test_kill_9_after_publish_loses_nothing(tmp_path: Path) -> None:
    daemon = pnsq_nsqd(tmp_path / "nsqd").start()
    go = Driver("go-nsq")
    try:
        pub = go.run(go.pub_argv(daemon.tcp_address, "crash", 10_000, "mpub"))
        assert pub.returncode == 0, pub.stderr
        assert pub.summary["published"] == 10_000  # every one acknowledged
        daemon.kill()
        daemon.start()
        sub = go.run(go.sub_argv(daemon.tcp_address, "crash", "ch", 10_000, timeout=60))
        assert sub.returncode == 0, sub.stderr
        bodies = [str(d["body"]) for d in sub.deliveries]
        assert set(bodies) == {f"msg-{i}" for i in range(10_000)}
        print(f"duplicates after kill -9: {len(bodies) - len(set(bodies))}")
    finally:
        daemon.stop()
        go.cleanup()


def test_kill_9_while_consuming_redelivers_what_was_not_fined(tmp_path: Path) -> None:
    daemon = pnsq_nsqd(tmp_path / "nsqd").start()
    py = Driver("pynsq")
    try:
        pub = py.run(py.pub_argv(daemon.tcp_address, "crash2", 10_000, "mpub"))
        assert pub.returncode == 0, pub.stderr
        consumer = py.start(
            py.sub_argv(daemon.tcp_address, "crash2", "ch", 10_000, max_in_flight=50, timeout=30)
        )
        time.sleep(1.5)  # part of the backlog is FINed, part in flight, part untouched
        daemon.kill()
        first = Driver.finish(consumer, timeout=60)
        daemon.start()
        sub = py.run(py.sub_argv(daemon.tcp_address, "crash2", "ch", 10_000, timeout=60))
        before = {str(d["body"]) for d in first.deliveries}
        after = [str(d["body"]) for d in sub.deliveries]
        assert before | set(after) == {f"msg-{i}" for i in range(10_000)}
        assert 0 < len(before) < 10_000, "the kill should land mid-consumption"
        duplicates = len(before & set(after)) + len(after) - len(set(after))
        print(f"consumed before kill: {len(before)}, redelivered after restart: {duplicates}")
    finally:
        daemon.stop()
        py.cleanup()
