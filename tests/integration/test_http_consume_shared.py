"""HTTP consume with several batches of one partition out at once, against a real nsqd: each
batch has its own messages and is acked or times out on its own, and what was acked stays
acked across a kill -9 while what was not comes back."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.daemons import pnsq_nsqd
from tests.integration.test_http_consume import _consume, _post, _publish, _stats

pytestmark = pytest.mark.integration

SHORT_MS = 800  # the one lease left to end
LONG_MS = 60_000


def _ids(batch: dict[str, Any]) -> list[str]:
    return [m["id"] for m in batch["messages"]]


def test_concurrent_batches_of_one_partition_are_disjoint_and_end_on_their_own(
    tmp_path: Path,
) -> None:
    daemon = pnsq_nsqd(tmp_path / "nsqd").start()
    try:
        _publish(daemon, "multi", 0, [b"m%02d" % i for i in range(40)])
        batches: list[dict[str, Any]] = [{} for _ in range(4)]
        start = threading.Barrier(4)

        def consumer(index: int) -> None:
            start.wait()
            lease_ms = SHORT_MS if index == 0 else LONG_MS
            batches[index] = _consume(
                daemon, "multi", "ch", max=10, wait_ms=5000, lease_ms=lease_ms
            )

        threads = [threading.Thread(target=consumer, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        short, acked, kept, left = batches
        # four concurrent requests of one partition: four batches, no message in two of them
        got = [_ids(batch) for batch in batches]
        assert all(len(ids) == 10 for ids in got), got
        assert len({b["token"] for b in batches}) == 4
        assert len(set().union(*got)) == 40
        (channel,) = _stats(daemon, "multi")["channels"]
        assert (channel["in_flight_count"], channel["depth"]) == (40, 0)

        # an ack while the three others are out
        assert _post(daemon, "/consume/ack", token=acked["token"]) == (200, b"OK")
        # the short lease ends: its messages alone come back, the others stay with their holders
        again = _consume(daemon, "multi", "ch", max=40, wait_ms=10_000, lease_ms=LONG_MS)
        assert sorted(_ids(again)) == sorted(_ids(short))
        assert {m["attempts"] for m in again["messages"]} == {2}
        assert _post(daemon, "/consume/ack", token=short["token"]) == (
            409,
            {"message": "TOKEN_EXPIRED"},
        )
        assert _post(daemon, "/consume/ack", token=kept["token"]) == (200, b"OK")
        (channel,) = _stats(daemon, "multi")["channels"]
        assert channel["in_flight_count"] == 20  # the redelivered batch and the one left

        # the acks moved only the cursor: they are in the cursor journal, not yet folded into
        # state.json, when the process dies
        journal = tmp_path / "nsqd" / "topics" / "t-multi" / "0" / "cursors.journal"
        assert journal.stat().st_size > 0
        daemon.kill()  # right after the acks' 200: nothing acked may come back
        daemon.start()
        seen: list[str] = []
        while True:
            batch = _consume(daemon, "multi", "ch", max=100, wait_ms=300)
            if not batch["messages"]:
                break
            seen.extend(_ids(batch))
            assert _post(daemon, "/consume/ack", token=batch["token"]) == (200, b"OK")
        assert sorted(seen) == sorted(_ids(again) + _ids(left))
        (channel,) = _stats(daemon, "multi")["channels"]
        assert [p["confirmed_offset"] for p in channel["partitions"]] == [40]
        assert daemon.stop() == 0  # a clean stop folds the journal into state.json
        state = json.loads((journal.parent / "state.json").read_text())
        assert state["channels"]["ch"]["confirmed"] == 40
        assert journal.read_bytes() == b""
    finally:
        daemon.stop()
