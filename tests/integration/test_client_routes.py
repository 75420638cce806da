"""pnsq's client routes through lookupd when one leader does not answer: a paused leader
(SIGSTOP) holds neither the lookups of the other partitions nor their publishes, and the
route keeps what it knew of the paused one's partitions."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import trio

from pnsq.client import open_producer
from tests.integration.lookupd_helpers import pnsq_cluster, post, roles, wait_for

pytestmark = pytest.mark.integration

TOPIC = "routes"


def test_a_paused_leader_does_not_hold_the_other_partitions_publishes(tmp_path: Path) -> None:
    with pnsq_cluster(tmp_path, 2) as (lookupd, nodes):
        query = f"/topic/create?topic={TOPIC}&partition_num=2&replicator=1"
        assert post(lookupd, query)[0] == 200
        led = wait_for(
            lambda: (
                (held := [roles(node, TOPIC) for node in nodes])
                and all(h and "leader" in h.values() for h in held)
                and held
            ),
            what="one partition led by each node",
        )
        paused_node = nodes[1]
        paused = next(p for p, role in (led[1] or {}).items() if role == "leader")
        live = 1 - paused

        async def publish_while_paused() -> tuple[float, str | None]:
            async with open_producer(
                nodes[0].tcp_address, lookupd_http_address=lookupd.http_address, route_ttl=0
            ) as producer:
                await producer.publish(TOPIC, b"before", partition=live)
                assert paused_node.proc is not None
                os.kill(paused_node.proc.pid, signal.SIGSTOP)
                try:
                    started = trio.current_time()
                    # every publish looks the route up again (route_ttl=0), asking the paused
                    # leader too: it must not wait the HTTP timeout (10 s) for it
                    with trio.fail_after(5):
                        for n in range(3):
                            await producer.publish(TOPIC, b"%d" % n, partition=live)
                    took = trio.current_time() - started
                    route = await producer.partitions(TOPIC)
                    kept = route.get(paused) if route is not None else None
                    return took, kept.tcp_address if kept is not None else None
                finally:
                    os.kill(paused_node.proc.pid, signal.SIGCONT)

        took, kept = trio.run(publish_while_paused)
        assert took < 5
        assert kept == paused_node.tcp_address  # what the client knew of it, kept
