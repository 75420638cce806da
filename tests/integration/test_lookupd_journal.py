"""A real nsqlookupd's metadata journal: a change to one topic of many is appended to the
journal, survives kill -9, and a clean exit folds the journal into the snapshot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.daemons import pnsq_lookupd, pnsq_nsqd
from tests.integration.lookupd_helpers import free_port, get_json, lookup, post, wait_for

TOPICS = [f"t{i:02d}" for i in range(12)]


def leaders(found: dict[str, Any]) -> dict[str, int]:
    """Each partition's leader, by its TCP port."""
    return {number: node["tcp_port"] for number, node in found["partitions"].items()}


def test_the_journal_survives_kill_9_and_a_clean_exit_folds_it(tmp_path: Path) -> None:
    data = tmp_path / "lookupd"
    tcp, http = free_port(), free_port()  # the node finds it again after the restart
    fixed = (f"--tcp-address=127.0.0.1:{tcp}", f"--http-address=127.0.0.1:{http}")
    lookupd = pnsq_lookupd(data, *fixed).start()
    node = pnsq_nsqd(tmp_path / "node", f"--lookupd-tcp-address={lookupd.tcp_address}").start()
    snapshot, journal = data / "nsqlookupd.meta.json", data / "nsqlookupd.meta.journal"
    try:
        wait_for(lambda: get_json(lookupd, "/nodes")["producers"], what="the node registered")
        for name in TOPICS:
            assert post(lookupd, f"/topic/create?topic={name}&partition_num=4") == (200, b"")
        placed = lookup(lookupd, "t03", "&metainfo=true")
        assert len(placed["partitions"]) == 4
        before = snapshot.stat()
        assert post(lookupd, "/topic/delete?topic=t05") == (200, b"")
        assert journal.stat().st_size > 0  # the deletion was appended, not a new snapshot
        assert snapshot.stat().st_mtime_ns == before.st_mtime_ns
        lookupd.kill()
        lookupd.start()  # same --data-path
        kept = sorted(set(TOPICS) - {"t05"})
        assert sorted(get_json(lookupd, "/topics")["topics"]) == kept
        again = wait_for(
            lambda: (
                (found := lookup(lookupd, "t03", "&metainfo=true"))
                and found["partitions"]
                and found
            ),
            what="the node registered again",
        )
        assert again["meta"] == placed["meta"]
        assert leaders(again) == leaders(placed)
        assert post(lookupd, "/topic/create?topic=t12&partition_num=2") == (200, b"")
        assert journal.stat().st_size > 0
    finally:
        node.stop()
        assert lookupd.stop() == 0
    assert journal.read_bytes() == b""  # folded into the snapshot on the way out
    document = json.loads(snapshot.read_bytes())  # as a release before the journal reads it
    assert sorted(document["topics"]) == [*kept, "t12"]
    assert "t05" in document["deleted"]
    lookupd.start()
    try:
        assert sorted(get_json(lookupd, "/topics")["topics"]) == [*kept, "t12"]
    finally:
        lookupd.stop()
