"""``scripts/run --ha``: etcd, two HA lookupds and three nsqd registered with both, in the
foreground; SIGTERM stops them all (driven as :mod:`tests.integration.scripts_run` says)."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from pnsq.client import open_consumer, open_producer
from protocol.cluster_auth import http_headers
from tests.integration.lookupd_helpers import get_json, request, wait_for
from tests.integration.scripts_run import Run, running

pytestmark = pytest.mark.integration


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    with running(tmp_path / "data", "--ha") as started:
        yield started


def _json(url: str, path: str) -> Any:
    try:
        return get_json(url, path)
    except (AssertionError, OSError):
        return None


def test_scripts_run_ha_starts_etcd_two_lookupds_and_three_nodes(run: Run) -> None:
    lookupds = [run.url(4161), run.url(4261)]

    def ready() -> bool:
        assert run.proc.poll() is None, run.log()
        leaders = set()
        for url in lookupds:
            listed, nodes = _json(url, "/listlookup"), _json(url, "/nodes")
            if not listed or not listed["lookupdleader"] or not nodes:
                return False
            if len(listed["lookupdnodes"]) != 2 or len(nodes["producers"]) != 3:
                return False
            leaders.add(listed["lookupdleader"]["ID"])
        return len(leaders) == 1

    wait_for(ready, timeout=90, what="a leader lookupd and three nodes on both")
    leader_id = _json(lookupds[0], "/listlookup")["lookupdleader"]["ID"]
    follower = next(url for url in lookupds if not leader_id.endswith(f":{url.rsplit(':')[-1]}"))

    # a write on the follower is forwarded to the leader; the topic has two copies
    status, body, _ = request(
        f"{follower}/topic/create?topic=runha&partition_num=1&replicator=2", "POST"
    )
    assert status == 200, body

    # the cluster runs with the credential scripts/run made: lookupd's control endpoints want it
    secret = (run.data / "cluster.secret").read_bytes().strip()
    assert len(secret) == 64
    assignments = f"{follower}/pnsq/assignments?node={run.address(4150)}"
    status, body, _ = request(assignments, "GET", {})
    assert (status, json.loads(body)) == (401, {"message": "CLUSTER_AUTH_REQUIRED"})

    def in_sync() -> bool:
        for port in (4150, 4250, 4350):
            url = f"{follower}/pnsq/assignments?node={run.address(port)}"
            status, raw, _ = request(url, "GET", http_headers(secret))
            doc = json.loads(raw) if status == 200 else {}
            part = doc.get("topics", {}).get("runha", {}).get("partitions", {}).get("0")
            if part:
                return len(part["replicas"]) == 1 and len(part["isr"]) == 2
        return False

    wait_for(in_sync, timeout=30, what="the topic placed, its two copies in sync")

    async def round_trip() -> bytes:
        with trio.fail_after(30):
            async with open_producer(
                run.address(4150), lookupd_http_address=run.address(4161)
            ) as producer:
                await producer.publish("runha", b"hello ha")
            async with open_consumer(
                run.address(4150), "runha", "ch", lookupd_http_address=run.address(4261)
            ) as consumer:
                async for message in consumer:
                    await message.finish()
                    return message.body
        raise AssertionError("the subscription ended")

    assert trio.run(round_trip) == b"hello ha"

    run.proc.send_signal(signal.SIGTERM)
    assert run.proc.wait(60) == 0 or run.proc.returncode is not None
    deadline = time.monotonic() + 20
    while run.group_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not run.group_alive(), "a process of scripts/run outlived it"
    log = run.log()
    assert "etcd: client" in log
    assert log.count("(HA)") == 2
    assert "Traceback" not in log
