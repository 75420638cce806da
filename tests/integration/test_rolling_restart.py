"""``scripts/rolling-restart`` on a cluster ``scripts/run --nodes 3`` runs (real processes,
driven as :mod:`tests.integration.scripts_run` says): lookupd's upgrade mode around it, every
nsqd restarted one by one (a new process each, with scripts/run's flags) while pnsq's client
publishes (with retries) to a topic with three partitions and two copies and consumes it; no
acknowledged message is lost and the cluster ends stable. The script's own report (the longest
write gap, its failed publishes, the messages it read back) is printed."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from protocol.cluster_auth import http_headers
from tests.daemons import ROOT
from tests.integration.cluster_load import load_around, report
from tests.integration.lookupd_helpers import request, wait_for
from tests.integration.scripts_run import Run, running

pytestmark = pytest.mark.integration

SCRIPT = ROOT / "scripts" / "rolling-restart"
NODE_PORTS = (4150, 4250, 4350)


def control(run: Run, path: str, method: str = "GET") -> Any:
    """lookupd's answer to a cluster-control request (with scripts/run's credential)."""
    secret = (run.data / "cluster.secret").read_bytes().strip()
    status, body, _ = request(f"{run.url(4161)}{path}", method, http_headers(secret))
    assert status == 200, (path, status, body)
    return json.loads(body) if body else None


def pids(run: Run) -> list[int]:
    return [int((run.data / f"nsqd-{n}.pid").read_text()) for n in (1, 2, 3)]


def test_rolling_restart_restarts_every_node_and_loses_nothing(tmp_path: Path) -> None:
    with running(tmp_path / "data", "--nodes", "3") as run:

        def ready() -> bool:
            assert run.proc.poll() is None, run.log()
            try:
                status, body, _ = request(f"{run.url(4161)}/nodes")
            except OSError:  # lookupd not listening yet
                return False
            return status == 200 and len(json.loads(body)["producers"]) == 3

        wait_for(ready, timeout=60, what="lookupd and three nodes")
        query = "topic=steady&partition_num=3&replicator=2"
        control(run, f"/topic/create?{query}", "POST")
        wait_for(lambda: control(run, "/cluster/stats")["stable"], timeout=30, what="in sync")
        before = pids(run)

        def rolling_restart() -> tuple[subprocess.CompletedProcess[str], float]:
            started = time.monotonic()
            done = subprocess.run(
                [str(SCRIPT), "--timeout=60"],
                env=run.env,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            return done, time.monotonic() - started

        (done, took), load = load_around(
            run.address(4150), run.address(4161), rolling_restart, "steady"
        )
        print(done.stdout)
        assert done.returncode == 0, (done.stdout, done.stderr, run.log()[-4000:])
        gap = re.search(r"longest write gap: (\d+) ms", done.stdout)
        assert gap, done.stdout
        assert "acknowledged messages not read back: 0" in done.stdout
        for n, port in enumerate(NODE_PORTS, 1):
            assert f"nsqd {n} (127.0.0.1:{port + run.offset}): pid {before[n - 1]} -> " in (
                done.stdout
            )
        assert "POST /cluster/upgrade/begin: /cluster/stats says upgrading true" in done.stdout

        # every node is a new process, scripts/run still supervises them all
        after = pids(run)
        assert all(new != old for new, old in zip(after, before, strict=True)), (before, after)
        assert run.proc.poll() is None, run.log()[-4000:]
        assert run.log().count("restarting (SIGTERM to pid") == 3

        # nothing acknowledged lost (load_around waited until every one was consumed)
        assert not load.lost
        assert len(load.acked) > 100
        stats = control(run, "/cluster/stats")
        assert stats["upgrading"] is False, stats

        # stable at the end (the script waited for it; deleting its topic may leave the
        # leaderships to balance again)
        def settled() -> bool:
            now = control(run, "/cluster/stats")
            return bool(now["stable"] and now["balanced"])

        wait_for(settled, timeout=30, what="the cluster stable and balanced")
        assert control(run, "/cluster/upgrade/done", "POST")["upgrading"] is False
        report(f"rolling restart of 3 nodes ({took:.1f} s)", load)
        assert "Traceback" not in run.log()


def test_rolling_restart_without_a_cluster_says_so(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(SCRIPT)],
        env={"PNSQ_DATA": str(tmp_path), "PNSQ_PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert f"no cluster of scripts/run in {tmp_path}" in done.stderr
