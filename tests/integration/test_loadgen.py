"""pnsq-loadgen's MPUB mode (``-mpub N``), which scripts/bench's MPUB rows run, against a real
pnsq nsqd: every message it counts is stored, and with ``-numbered`` each connection is one
producer whose MPUBs carry the number of their first message (a wrong number is answered
``DUPLICATE`` or ``E_PUB_SEQUENCE_GAP``, which the tool reports as a failed run).

The tool is built from tests/interop/loadgen for the test (scripts/setup builds the same source
into .tools/bin), so the test checks the source it sits beside."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.daemons import ROOT, Daemon

pytestmark = pytest.mark.integration

SOURCE = ROOT / "tests" / "interop"


@pytest.fixture(scope="module")
def loadgen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    go = shutil.which("go")
    assert go is not None, "go is required (scripts/setup)"
    binary = tmp_path_factory.mktemp("loadgen") / "pnsq-loadgen"
    env = {**os.environ, "GOFLAGS": "-buildvcs=false"}
    subprocess.run(
        [go, "build", "-o", str(binary), "./loadgen"], cwd=SOURCE, env=env, check=True, timeout=300
    )
    return binary


def run(loadgen: Path, nsqd: Daemon, topic: str, *flags: str) -> dict[str, Any]:
    done = subprocess.run(
        [str(loadgen), "pub", "-addr", nsqd.tcp_address, "-topic", topic, "-runfor", "1s", *flags],
        capture_output=True,
        timeout=60,
        check=False,
    )
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    assert done.returncode == 0, (result, done.stderr[-2000:])
    return result


def partition_zero(nsqd: Daemon, topic: str) -> tuple[int, dict[str, Any]]:
    """The topic's message count and its partition 0 as /stats gives them."""
    url = f"http://{nsqd.http_address}/stats?format=json&topic={topic}"
    with urllib.request.urlopen(url, timeout=5) as resp:
        stats = json.loads(resp.read())
    (entry,) = [t for t in stats["topics"] if t["topic_name"] == topic]
    (part,) = [p for p in entry["partitions"] if p["partition"] == 0]
    return int(entry["message_count"]), part


@pytest.mark.parametrize("mode", ["sync", "pipelined"])
@pytest.mark.parametrize("numbered", [False, True], ids=["plain", "numbered"])
def test_mpub_mode_stores_every_message_it_counts(
    loadgen: Path, nsqd: Daemon, mode: str, numbered: bool
) -> None:
    topic = f"lg_{mode}_{'numbered' if numbered else 'plain'}"
    flags = ["-conns", "3", "-size", "50", "-mode", mode, "-window", "4", "-mpub", "7"]
    result = run(loadgen, nsqd, topic, *flags, *(["-numbered"] if numbered else []))

    assert result["mpub"] == 7
    assert result["commands"] > 3
    # messages, not commands: an MPUB of 7 counts 7
    assert result["msgs"] == 7 * result["commands"]
    stored, part = partition_zero(nsqd, topic)
    assert stored == result["msgs"]
    # one producer per connection, and none for plain MPUBs
    assert part["producers"] == (3 if numbered else 0)


def test_pub_mode_counts_one_message_per_ok(loadgen: Path, nsqd: Daemon) -> None:
    """Single-message PUBs (no -mpub) count one message per OK, numbered or not."""
    for numbered in (False, True):
        topic = f"lg_pub_{numbered}"
        flags = ["-conns", "2", "-mode", "sync", *(["-numbered"] if numbered else [])]
        result = run(loadgen, nsqd, topic, *flags)
        assert "mpub" not in result
        assert result["msgs"] == result["commands"] > 0
        stored, part = partition_zero(nsqd, topic)
        assert stored == result["msgs"]
        assert part["producers"] == (2 if numbered else 0)


@pytest.mark.parametrize("client", ["raw", "go-nsq"])
def test_latency_mode_receives_every_measured_message(
    loadgen: Path, nsqd: Daemon, client: str
) -> None:
    """The latency mode (scripts/bench's latency rows), with its own connections and with
    go-nsq's Consumer and Producer: every message sent in the window arrives, and its
    percentiles are of those messages; the topic holds every message published."""
    topic = f"lg_latency_{client.replace('-', '')}"
    done = subprocess.run(
        [
            str(loadgen),
            "latency",
            "-addr",
            nsqd.tcp_address,
            "-topic",
            topic,
            "-rate",
            "2000",
            "-runfor",
            "1s",
            "-warmup",
            "200ms",
            "-cooldown",
            "100ms",
            "-output-buffer-size=-1",
            "-client",
            client,
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    assert done.returncode == 0, (result, done.stderr[-2000:])
    assert result["client"] == client
    assert 1800 <= result["msgs"] <= 2200  # the window's share of 2,000 msgs/s
    assert 0 < result["p50_ms"] <= result["p99_ms"] <= result["max_ms"]
    stored, _ = partition_zero(nsqd, topic)
    assert stored >= result["msgs"]  # the warm-up's and cool-down's too
