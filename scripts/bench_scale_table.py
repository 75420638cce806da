"""scripts/bench's partitions-at-scale rows (python stdlib only; used by bench_report.py):
reading scripts/bench_scale.py's result, and the table of the rows against issue 38's goals.

Partitions at scale (pnsq only, once, scripts/bench_scale.py: a lookupd and three nsqd, topics
of 200 partitions with 2 copies each): rows "scale_N" for N partitions, the value the seconds
from the first /topic/create until every partition took a PUB ("none": not in time), the
extras its idle CPU, and the failover of the node leading the most partitions. The goals
(issue 38): all writable within SCALE_WRITABLE_GOAL s, idle CPU per nsqd under
SCALE_IDLE_GOAL cores at SCALE_GOAL_PARTITIONS, a node leading 1,000 partitions failed over
within SCALE_FAILOVER_GOAL s.

lookupd's cost per decision (pnsq only, once, scripts/bench_decide.py: lookupd's supervisor
in process over N partitions, its metadata saved to a file): rows "decide_N", the value the
milliseconds of a decision shrinking one partition's in-sync set, the extras those of a
node's death and the partitions it changed.
"""

from __future__ import annotations

from bench_tables import Results, as_float, last_json, number

SCALE_PREFIX = "scale_"
DECIDE_PREFIX = "decide_"
#: a decision on one partition at the largest size may take this many times its time at the
#: smallest: "flat in the partitions it does not touch" (issue 38), with room for the
#: metadata file's write, which grows with the cluster
DECIDE_FLAT_GOAL = 2.0
SCALE_WRITABLE_GOAL = 60.0
SCALE_IDLE_GOAL = 0.1
SCALE_GOAL_PARTITIONS = 10_000
SCALE_FAILOVER_GOAL = 1.0


def parse_scale(path: str) -> str:
    """scripts/bench_scale.py's JSON line as scripts/bench records it: ``"WRITABLE_S
    create=.. idle=.. lookupd=.. led=.. failover=.. promoted=.. shrink=.."`` (``none``: not
    every partition took a PUB in time; ``idle``: the busiest nsqd's, in cores; ``-``: not
    measured), bench_report.py's ``parse-scale``."""
    r = last_json(path, "bench_scale.py")
    idle = r.get("idle_cpu", {})
    nodes = [v for k, v in idle.items() if k.startswith("nsqd")]
    before = r.get("before_kill", {})
    extras = {
        "create": r.get("create_s"),
        "idle": max(nodes) if nodes else None,
        "lookupd": idle.get("lookupd"),
        "led": r.get("victim_led"),
        "failover": r.get("failover_s"),
        "promoted": before.get("promoted"),
        "shrink": before.get("isr shrink"),
    }
    writable = r.get("writable_s")
    return " ".join(
        [
            "none" if writable is None else str(writable),
            *(f"{k}={'-' if v is None else v}" for k, v in extras.items()),
        ]
    )


def parse_decide(path: str) -> str:
    """scripts/bench_decide.py's JSON line as scripts/bench records it: ``"ONE_MS node=..
    touched=.."`` (bench_report.py's ``parse-decide``)."""
    r = last_json(path, "bench_decide.py")
    return f"{r['one_ms']} node={r['node_ms']} touched={r['node_touched']}"


def decide_table(results: Results) -> list[str]:
    """lookupd's cost per decision (see :data:`DECIDE_PREFIX`), one row per size, smallest
    first: one partition's decision against the smallest size's (the goal: flat), and a node's
    death per partition it touched."""
    sizes = sorted(
        (int(key[len(DECIDE_PREFIX) :]), key)
        for key in results
        if key.startswith(DECIDE_PREFIX) and key[len(DECIDE_PREFIX) :].isdigit()
    )
    cells = [(size, results[key]["pnsq"][0]) for size, key in sizes if results[key].get("pnsq")]
    if not cells:
        return []
    rows = [
        "| partitions x 2 copies, 3 nodes, lookupd in process"
        " | one partition's ISR shrink, ms"
        f" | against the smallest size (goal ≤ {DECIDE_FLAT_GOAL:.0f}: flat)"
        " | a node's death: ms | partitions it changed | µs per partition changed |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    base = as_float(cells[0][1].value)
    for size, cell in cells:
        one = as_float(cell.value)
        node, touched = cell.extra.get("node", "-"), cell.extra.get("touched", "-")
        per = "-"
        if as_float(node) is not None and as_float(touched):
            per = format(float(node) * 1e3 / float(touched), ".1f")
        flat = "-" if one is None or not base else format(one / base, ".2f")
        rows.append(
            f"| {size:,} | {number(cell.value, '.2f')} | {flat} | {number(node, '.1f')}"
            f" | {number(touched, ',.0f')} | {per} |"
        )
    return rows


def scale_table(results: Results, pnsq_label: str) -> list[str]:
    """pnsq's partitions at scale (see :data:`SCALE_PREFIX`), one row per size, smallest first;
    each figure against its goal."""
    rows = [
        f"| partitions x 2 copies, 3 nodes, {pnsq_label}"
        f" | all writable, s from the first create (goal ≤ {SCALE_WRITABLE_GOAL:.0f})"
        " | idle CPU of the busiest nsqd, cores"
        f" (goal < {SCALE_IDLE_GOAL} at {SCALE_GOAL_PARTITIONS:,})"
        " | idle CPU of lookupd, cores"
        " | kill -9 of the node leading the most: partitions it led, all writable again s"
        f" (goal ≤ {SCALE_FAILOVER_GOAL:.0f} at 1,000 led)"
        " | lookupd promotions / ISR shrinks before the kill (healthy nodes failed over) |",
        "|---:|---:|---:|---:|---|---|",
    ]
    sizes = sorted(
        (int(key[len(SCALE_PREFIX) :]), key)
        for key in results
        if key.startswith(SCALE_PREFIX) and key[len(SCALE_PREFIX) :].isdigit()
    )
    for size, key in sizes:
        cells = results[key].get("pnsq", [])
        if not cells:
            continue
        cell = cells[0]  # run once
        extra = cell.extra
        writable = "not all (timed out)" if cell.value == "none" else number(cell.value, ".1f")
        if cell.note:
            writable = f"{writable} ({cell.note})"
        failover = extra.get("failover", "-")
        failed_over = (
            f"{number(extra.get('led', '-'), ',.0f')}: {number(failover, '.2f')}"
            if failover != "-"
            else "not measured"
        )
        rows.append(
            f"| {size:,} | {writable} | {number(extra.get('idle', '-'), '.3f')}"
            f" | {number(extra.get('lookupd', '-'), '.3f')} | {failed_over}"
            f" | {extra.get('promoted', '-')} / {extra.get('shrink', '-')} |"
        )
    return rows
