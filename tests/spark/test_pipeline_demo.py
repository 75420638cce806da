"""scripts/pipeline_demo.py's pipeline, small, in the shared session: every published event is
counted exactly once, and the counts reach both pnsq and Parquet."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from pnsq.client.blocking import BlockingClient
from tests.daemons import ROOT, Daemon

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def load_demo() -> Any:
    spec = importlib.util.spec_from_file_location(
        "pipeline_demo", ROOT / "scripts" / "pipeline_demo.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_demo_pipeline_counts_every_event(spark: Any, shared_nsqd: Daemon, tmp_path: Path) -> None:
    demo = load_demo()
    tcp, http = shared_nsqd.tcp_address, shared_nsqd.http_address
    rows = demo.run(
        spark, tcp, http, tmp_path / "out", events=400, keys=5, rate=0, trigger="200 milliseconds"
    )
    assert sum(r.events for r in rows) == 400
    assert {r.user for r in rows} == {f"user-{i}" for i in range(5)}
    assert all(r.avg_publish_ms >= 0 and r.max_end_to_end_ms >= r.avg_end_to_end_ms for r in rows)
    with BlockingClient(http_address=http) as nsq:
        route = nsq.partitions(demo.COUNTS)
        published = [
            record
            for p in route.partitions
            for record in nsq.read_range(demo.COUNTS, p.partition, p.earliest, 1000).records
        ]
    assert published
    assert all(record.trace_id > 0 for record in published)
