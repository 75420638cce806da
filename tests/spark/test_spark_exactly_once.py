"""The pnsq sink exactly once across a driver crash: a streaming copy job (its own process,
tests/spark/copy_stream.py) is killed with kill -9 while it writes, and started again from its
checkpoint; the micro-batch it was writing runs again under the same query id and batch id, so
the target topic holds every source message exactly once (with ``exactlyOnce=false`` the
re-run batch's rows would be there twice)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from pnsq.client.blocking import Producer
from tests.daemons import ROOT, Daemon
from tests.spark.conftest import create_topic

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]

MESSAGES = 3_000  # over 3 partitions


def target_bodies(nsqd: Daemon, topic: str) -> Counter[bytes]:
    bodies: Counter[bytes] = Counter()
    with Producer(http_address=nsqd.http_address) as reader:
        for partition in range(3):
            offset = 0
            while True:
                batch = reader.read_range(topic, partition, offset, 1000)
                if not batch.records:
                    break
                bodies.update(r.body for r in batch.records)
                offset = batch.records[-1].offset + 1
    return bodies


def start_job(nsqd: Daemon, checkpoint: Path, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    argv = [sys.executable, str(ROOT / "tests/spark/copy_stream.py"), nsqd.http_address]
    argv += ["copy_in", "copy_out", str(checkpoint)]
    return subprocess.Popen(argv, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)


@pytest.mark.timeout(400)  # two Spark drivers starting
def test_a_streaming_copy_killed_mid_batch_stores_each_row_once(
    shared_nsqd: Daemon, tmp_path: Path
) -> None:
    create_topic(shared_nsqd, "copy_in", 3)
    create_topic(shared_nsqd, "copy_out", 3)
    sent = [b"msg-%05d" % i for i in range(MESSAGES)]
    with Producer(shared_nsqd.tcp_address, shared_nsqd.http_address) as producer:
        for i, body in enumerate(sent):
            producer.publish("copy_in", body, partition=i % 3)
    checkpoint, log = tmp_path / "checkpoint", tmp_path / "job.log"
    job = start_job(shared_nsqd, checkpoint, log)
    try:
        deadline = time.monotonic() + 120
        while sum(target_bodies(shared_nsqd, "copy_out").values()) < MESSAGES // 3:
            assert job.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the copy did not start"
            time.sleep(0.2)
        os.kill(job.pid, signal.SIGKILL)  # in the middle of writing a micro-batch
        job.wait()
        before = sum(target_bodies(shared_nsqd, "copy_out").values())
        assert before < MESSAGES  # killed before the end
        job = start_job(shared_nsqd, checkpoint, log)
        while sum(target_bodies(shared_nsqd, "copy_out").values()) < MESSAGES:
            assert job.poll() is None, log.read_text()
            assert time.monotonic() < deadline + 120, "the restarted copy did not finish"
            time.sleep(0.5)
        time.sleep(2.0)  # anything written twice would show up now
        counts = target_bodies(shared_nsqd, "copy_out")
        print(f"copy killed at {before} of {MESSAGES} rows, restarted from its checkpoint")
        assert set(counts) == set(sent)
        assert [b for b, n in counts.items() if n > 1] == []
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
