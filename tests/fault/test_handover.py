"""A clean shutdown, and pauses and kills, of a node that leads several partitions, under
pipelined load from several connections per partition (:class:`PipelinedPublisher`: pnsq's
own producer, many publishes in flight on each connection, routed through lookupd).

SIGTERM: the node hands its leaderships over and exits; a publish it acknowledged after the
signal must be on the new leader (it once was not: an ack went out for a record the new leader
never received). kill -9 and SIGSTOP: no acknowledged publish lost, and every publish call ends
(OK, an error or the client's reply timeout), none left waiting for a reply that never comes.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fault.harness import (
    FaultCluster,
    PipelinedPublisher,
    check,
    high_watermarks,
    report,
    rounds,
)

pytestmark = [pytest.mark.integration, pytest.mark.fault, pytest.mark.timeout(900)]

TOPIC = "handover"
PARTITIONS = 12  # over 3 nodes: each leads about 4


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FaultCluster]:
    started = FaultCluster(tmp_path)
    try:
        started.create_topic(TOPIC, PARTITIONS)
        yield started
    finally:
        started.stop()


def busiest_leader(cluster: FaultCluster) -> tuple[str, int]:
    """The node id leading the most partitions of the topic, and how many it leads."""
    leaders = Counter(p["leader"] for p in cluster.placement(TOPIC).values())
    return leaders.most_common(1)[0]


def run_round(cluster: FaultCluster, scenario: str, tag: str, fault: str) -> None:
    since = high_watermarks(cluster, TOPIC)
    publisher = PipelinedPublisher(cluster, TOPIC, tag).start()
    try:
        time.sleep(1.5)
        victim_id, led = busiest_leader(cluster)
        victim = cluster.by_id(victim_id)
        hit = time.monotonic()
        figures: dict[str, object] = {"led": led}
        if fault == "sigterm":
            status = victim.stop(timeout=15)
            figures["exit_s"] = round(time.monotonic() - hit, 3)
            assert status == 0, victim.log_text()[-3000:]
            time.sleep(1.0)
            victim.start()
        elif fault == "kill":
            victim.kill()
            time.sleep(1.0)
            victim.start()
        else:
            cluster.pause(victim)
            time.sleep(4.0)
            cluster.resume(victim)
        cluster.wait_in_sync(TOPIC)
        time.sleep(1.0)
        after = [t for _, _, t in publisher.acked if t > hit + 0.5]
        assert after, "no publish acknowledged after the fault"
    finally:
        publisher.stop()
    late = [b for b, sent, acked in publisher.acked if sent <= hit < acked]
    outcome = check(cluster, publisher.bodies(), since, TOPIC)
    report(
        scenario,
        acked=len(publisher.acked),
        lost=len(outcome.lost),
        duplicates=outcome.duplicates,
        duplicates_pnsq=outcome.duplicates,  # every publisher here is pnsq's client
        duplicates_stock=0,
        refused=len(publisher.refused),
        reply_timeouts=len(publisher.timeouts),
        acked_across_fault=len(late),
        **figures,
    )
    assert not outcome.lost, sorted(outcome.lost)[:10]
    assert not outcome.duplicates, [b for b, n in outcome.copies.items() if n > 1][:10]
    assert publisher.hung == 0, f"{publisher.hung} publish call(s) never ended"
    # a reply overdue means nsqd lost it: SIGSTOP is shorter than the client's timeout
    assert not publisher.timeouts, publisher.timeouts[:5]


def test_sigterm_of_a_leader_of_several_partitions_under_pipelined_load(
    cluster: FaultCluster,
) -> None:
    for round_ in range(rounds()):
        run_round(cluster, "sigterm_leader", f"t{round_}", "sigterm")


# kill -9 and SIGSTOP run in the default suite in test_faults.py; scripts/chaos runs these too
@pytest.mark.slow
def test_kill_9_of_a_leader_under_pipelined_load(cluster: FaultCluster) -> None:
    for round_ in range(rounds()):
        run_round(cluster, "kill_pipelined", f"k{round_}", "kill")


@pytest.mark.slow
def test_sigstop_of_a_leader_under_pipelined_load(cluster: FaultCluster) -> None:
    for round_ in range(rounds()):
        run_round(cluster, "sigstop_pipelined", f"s{round_}", "stop")
