"""A scenario round's beginning and end, shared by the fault modules: publishers started (one
per partition, from the partitions' high-watermarks), then stopped and every acknowledged
message looked for (:func:`finish`), and the time until a partition took writes again."""

from __future__ import annotations

from tests.fault.harness import (
    PARTITIONS,
    FaultCluster,
    GoPublisher,
    PnsqPublisher,
    YouzanPublisher,
    check,
    high_watermarks,
    in_order,
    report,
)
from tests.integration.lookupd_helpers import wait_for


def start_publishers(cluster: FaultCluster, tag: str) -> list[PnsqPublisher]:
    """One publisher per partition; the partitions' high-watermarks are noted first (the
    checker reads from there: what earlier rounds stored was checked by them)."""
    cluster.round_start = high_watermarks(cluster)
    return [PnsqPublisher(cluster, p, f"{tag}p{p}").start() for p in range(PARTITIONS)]


def finish(
    scenario: str,
    cluster: FaultCluster,
    started: list[PnsqPublisher],
    go: GoPublisher | None = None,
    youzan: YouzanPublisher | None = None,
    **figures: object,
) -> None:
    """Stop the publishers, drain every partition and report; no acknowledged message lost."""
    for publisher in started:
        publisher.stop()
    acked = {body for publisher in started for body, _, _ in publisher.acked}
    if go is not None:
        acked |= go.finish()
    if youzan is not None:
        acked |= youzan.finish()
    outcome = check(cluster, acked, cluster.round_start)
    for publisher in started:
        assert in_order(outcome.stored[publisher.partition], publisher.name)
    report(
        scenario,
        acked=len(acked),
        lost=len(outcome.lost),
        duplicates=outcome.duplicates,
        refused=sum(len(p.refused) for p in started),
        **figures,
    )
    assert not outcome.lost, sorted(outcome.lost)[:10]
    assert all(len(p.acked) > 0 for p in started)


def writable_again(publisher: PnsqPublisher, since: float, timeout: float = 30) -> float:
    """Seconds from ``since`` until ``publisher`` had a publish acknowledged again."""
    wait_for(lambda: publisher.writable_after(since) is not None, timeout=timeout)
    return round(publisher.writable_after(since) or -1.0, 3)
