"""A scenario round's beginning and end, shared by the fault modules: publishers started (one
per partition, from the partitions' high-watermarks), then stopped and every acknowledged
message looked for and none of pnsq's client's stored twice (:func:`finish`), and the time until
a partition took writes again."""

from __future__ import annotations

from tests.fault.harness import (
    PARTITIONS,
    FaultCluster,
    GoPublisher,
    Outcome,
    PnsqPublisher,
    YouzanPublisher,
    check,
    high_watermarks,
    in_order,
    report,
)
from tests.fault.numbered import copies_by_kind
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
    """Stop the publishers, drain every partition and report (the extra copies stored of pnsq's
    client's messages and of the stock clients' apart); no acknowledged message lost, none of
    pnsq's client stored twice (stock clients are at-least-once: theirs are counted)."""
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
    pnsq_dups, stock_dups = copies_by_kind(outcome.copies, (f"{p.name}-" for p in started))
    report(
        scenario,
        acked=len(acked),
        lost=len(outcome.lost),
        duplicates=outcome.duplicates,
        duplicates_pnsq=pnsq_dups,
        duplicates_stock=stock_dups,
        told_duplicate=sum(p.told_duplicate for p in started),
        retried=sum(p.retried for p in started),
        failed=sum(p.failed for p in started),
        refused=sum(len(p.refused) for p in started),
        **figures,
    )
    assert not outcome.lost, sorted(outcome.lost)[:10]
    assert not pnsq_dups, twice(outcome, started)
    assert all(len(p.acked) > 0 for p in started)


def twice(outcome: Outcome, started: list[PnsqPublisher]) -> list[tuple[int, bytes, list[int]]]:
    """pnsq's bodies stored more than once: ``(partition, body, the offsets from the round's
    start where it lies)``, the first ten."""
    found = []
    for publisher in started:
        bodies = outcome.stored[publisher.partition]
        for body, count in outcome.copies.items():
            if count > 1 and body.startswith(f"{publisher.name}-".encode()):
                at = [i for i, stored in enumerate(bodies) if stored == body]
                found.append((publisher.partition, body, at))
    return sorted(found)[:10]


def writable_again(publisher: PnsqPublisher, since: float, timeout: float = 30) -> float:
    """Seconds from ``since`` until ``publisher`` had a publish acknowledged again."""
    wait_for(lambda: publisher.writable_after(since) is not None, timeout=timeout)
    return round(publisher.writable_after(since) or -1.0, 3)
