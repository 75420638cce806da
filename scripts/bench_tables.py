"""The markdown tables of scripts/bench's report (python stdlib only; used by bench_report.py).

scripts/bench records one tab-separated line per workload, side and round in its results file:
workload key, side (go|pnsq), value (or "failed", "skipped"), note, and extras as space
separated key=value pairs (``round=N`` among them). The value is msgs/s for the throughput
rows, the p99 in ms for the latency rows and VmRSS in KiB for the memory rows.

A row shows each side's median over the rounds it ran and each round's ratio pnsq / Go nsqd
(Go nsqd and pnsq alternate within a round, so a round's two figures were taken under the same
machine load); the row's ratio is the median of the rounds' ratios. The pnsq-only tables
(idempotent publishing, the credential's cost, a move) compare a pnsq row with another pnsq row
of the same round in the same way.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Throughput workloads in table order: key -> label. scripts/bench uses the same keys.
WORKLOADS = {
    "mpub": "MPUB 200 x 200 B, bench_writer",
    "consume": "consume RDY 2500, bench_reader",
    "pub_pipelined": "PUB, 16 conns pipelined (window 1000), pnsq-loadgen",
    "pub_sync": "PUB, 16 conns sync (1 outstanding), pnsq-loadgen",
    "mpub_replicated": "MPUB as above; pnsq replicated (replicator=2) vs Go unreplicated",
    "pub_pipelined_replicated": (
        "PUB pipelined as above; pnsq replicated (replicator=2) vs Go unreplicated"
    ),
    "pub_sync_replicated": "PUB sync as above; pnsq replicated (replicator=2) vs Go unreplicated",
    "http_consume": "HTTP consume max=100, 4 consumers; pnsq vs Go's TCP consume",
}

# Workloads run on pnsq only (Go nsqd does not replicate): key -> the unreplicated workload whose
# Go nsqd figure their pnsq figure is compared with.
GO_BASELINE = {
    "mpub_replicated": "mpub",
    "pub_pipelined_replicated": "pub_pipelined",
    "pub_sync_replicated": "pub_sync",
    "http_consume": "consume",
}

# pnsq-only rows compared with another pnsq row of the same round (what a protection costs):
# key -> (the row without it, label).
PNSQ_BASELINE = {
    "mpub_replicated_secure": (
        "mpub_replicated",
        "MPUB replicated as above, with the cluster credential and TLS between nodes",
    ),
}

# pnsq's idempotent publishing (numbered publishes, docs/compatibility.md) against plain
# publishing with the same tool and flags, taking turns in slices on one pnsq nsqd a round:
# key -> (the plain row, label). The goal: numbered at least IDEMPOTENT_GOAL of plain.
PNSQ_IDEMPOTENT = {
    "pub_pipelined_idempotent": (
        "pub_pipelined_loadgen",
        "pipelined PUB, 16 conns (window 1000), pnsq-loadgen",
    ),
    "pub_sync_idempotent": (
        "pub_sync_loadgen",
        "sync PUB, 16 conns (1 outstanding), pnsq-loadgen",
    ),
    "mpub_idempotent": (
        "mpub_loadgen",
        "sync MPUB 200 x 200 B, one conn per core (as bench_writer), pnsq-loadgen",
    ),
}
IDEMPOTENT_GOAL = 0.9

# pnsq-only rows measured while an operation runs, against the steady window before it on the
# same cluster: key -> (the steady row, label). Their extras name how long each move took.
PNSQ_DURING = {
    "mpub_during_move": (
        "mpub_move_steady",
        "MPUB 200 x 200 B, pnsq's client, replicated (3 nodes, 2 partitions x 2 copies), while"
        " partition 0's replica, then its leader, is moved",
    ),
}

# Latency workloads (pnsq-loadgen latency, 200 B bodies; _gonsq: with -client go-nsq, go-nsq
# v1.1.0's Consumer and Producer): key -> label.
LATENCY = {
    "latency_10k_unbuffered": "10k msgs/s, consumer unbuffered (output_buffer_size -1)",
    "latency_10k_buffered": "10k msgs/s, consumer with go-nsq's default buffering",
    "latency_30k_unbuffered": "30k msgs/s, consumer unbuffered (output_buffer_size -1)",
    "latency_30k_buffered": "30k msgs/s, consumer with go-nsq's default buffering",
    "latency_1k_unbuffered_gonsq": "go-nsq client, 1k msgs/s, consumer unbuffered",
    "latency_3k_unbuffered_gonsq": "go-nsq client, 3k msgs/s, consumer unbuffered",
    "latency_10k_unbuffered_gonsq": "go-nsq client, 10k msgs/s, consumer unbuffered",
    "latency_10k_buffered_gonsq": "go-nsq client, 10k msgs/s, consumer buffered (defaults)",
    "latency_30k_unbuffered_gonsq": "go-nsq client, 30k msgs/s, consumer unbuffered",
    "latency_30k_buffered_gonsq": "go-nsq client, 30k msgs/s, consumer buffered (defaults)",
}
# A latency run whose publishers fell this far behind their target rate gets a note.
RATE_SHORTFALL = 0.95

# Memory workloads (scripts/bench_memory.py): key -> label.
MEMORY = {
    "mem_idle_conns": "{idle_conns} idle connections (each IDENTIFYed)",
    "mem_big_messages": "200 x 1 MB PUB, then all consumed",
    "mem_big_messages_3000": "3,000 x 1 MB PUB, consumed as published",
    "mem_slow_consumer": "100 MB MPUBed past a slow RDY 1 consumer",
}


SIDES = (("go", "Go nsqd"), ("pnsq", "pnsq"))


@dataclass
class Cell:
    value: str = "not run"
    note: str = ""
    extra: dict[str, str] = field(default_factory=dict)


# workload key -> side -> its cells, one per round in the order they ran
Results = dict[str, dict[str, list[Cell]]]

# Extras summarized by their median over the rounds (the others are taken from the first round).
MEDIAN_EXTRAS = ("p50", "p999", "max", "peak")


def last_json(path: str, tool: str) -> Any:
    """The last line of ``path`` that is a JSON object (what ``tool`` printed last); raises
    ValueError when it printed none."""
    lines = [ln for ln in Path(path).read_text(errors="replace").splitlines() if ln.startswith("{")]
    if not lines:
        raise ValueError(f"no JSON line from {tool}")
    return json.loads(lines[-1])


def read_results(path: str) -> Results:
    out: Results = {}
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        key, side, value, note, extra = [*line.split("\t"), "", "", "", ""][:5]
        pairs = dict(p.split("=", 1) for p in extra.split() if "=" in p)
        out.setdefault(key, {}).setdefault(side, []).append(Cell(value, note, pairs))
    return out


def as_float(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def median_cell(cells: list[Cell]) -> Cell:
    """One side of a row from its rounds: the median of the rounds that gave a figure (a
    failed round is left out and named in the note), every round's note with its round."""
    if not cells:
        return Cell()
    several = len(cells) > 1
    notes = [
        f"round {c.extra.get('round', '?')}: {c.note}" if several else c.note
        for c in cells
        if c.note or c.value == "failed"
    ]
    values = [v for c in cells if (v := as_float(c.value)) is not None]
    if not values:  # every round failed or was skipped: show what the first one said
        return Cell(cells[0].value, "; ".join(notes), dict(cells[0].extra))
    extra = dict(cells[0].extra)
    for name in MEDIAN_EXTRAS:
        found = [v for c in cells if (v := as_float(c.extra.get(name, "-"))) is not None]
        if found:
            extra[name] = repr(statistics.median(found))
    return Cell(repr(statistics.median(values)), "; ".join(notes), extra)


def round_ratios(results: Results, key: str) -> tuple[str, str]:
    """pnsq / Go nsqd for each round that has both figures: their median (the row's ratio:
    each round's two figures were taken under the same machine load) and all of them in round
    order."""
    by_round = {
        side: {c.extra.get("round", "1"): c.value for c in results.get(key, {}).get(side, [])}
        for side, _name in SIDES
    }
    rounds = sorted(by_round["pnsq"], key=lambda r: int(r) if r.isdigit() else 0)
    pairs = [(by_round["go"][r], by_round["pnsq"][r]) for r in rounds if r in by_round["go"]]
    shown = [ratio(go, pnsq) for go, pnsq in pairs]
    values = [v for v in map(as_float, shown) if v is not None]
    median = f"{statistics.median(values):.3f}" if values else "-"
    return median, " · ".join(shown) if shown else "-"


def number(value: str, fmt: str, scale: float = 1.0) -> str:
    try:
        return format(float(value) * scale, fmt)
    except ValueError:
        return value  # "failed", "skipped", "not run", ...


def ratio(go: str, pnsq: str) -> str:
    try:
        g, p = float(go), float(pnsq)
    except ValueError:
        return "-"
    return f"{p / g:.3f}" if g > 0 else "-"


class Notes:
    """Footnotes shared by all the tables: [1], [2], ... in order of appearance."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def mark(self, note: str, where: str) -> str:
        if not note:
            return ""
        self.lines.append(f"{where}: {note}")
        return f" [{len(self.lines)}]"

    def render(self) -> list[str]:
        return [f"- [{i}] {n}" for i, n in enumerate(self.lines, 1)]


def side_cells(
    results: Results,
    key: str,
    label: str,
    notes: Notes,
    show: Callable[[Cell], str],
    names: tuple[str, str] = (SIDES[0][1], SIDES[1][1]),
) -> list[Cell]:
    """The Go and pnsq cells of one row (medians over the rounds), each shown with its footnote
    mark (in .value); a footnote names its column by ``names`` (a pnsq-only table's baseline
    sits in the "go" side)."""
    cells = []
    for (side, _side_name), name in zip(SIDES, names, strict=True):
        cell = median_cell(results.get(key, {}).get(side, []))
        shown = show(cell) + notes.mark(cell.note, f"{label}, {name}")
        cells.append(Cell(shown, cell.note, {"raw": cell.value, **cell.extra}))
    return cells


def throughput_table(results: Results, pnsq_label: str, notes: Notes) -> list[str]:
    rows = [
        f"| workload | Go nsqd 1.3.0 msgs/s (median) | {pnsq_label} msgs/s (median)"
        " | ratio pnsq/nsqd (median of the rounds') | each round's ratio |",
        "|---|---:|---:|---:|---|",
    ]
    for key, label in WORKLOADS.items():
        if key in GO_BASELINE:  # Go's figures are the unreplicated row's (its notes are there)
            go_cells = results.get(GO_BASELINE[key], {}).get("go", [])
            go_only = [Cell(c.value, "", dict(c.extra)) for c in go_cells]
            results = {**results, key: {**results.get(key, {}), "go": go_only}}
        go, pn = side_cells(results, key, label, notes, lambda c: number(c.value, ",.0f"))
        ratio_, rounds = round_ratios(results, key)
        rows.append(f"| {label} | {go.value} | {pn.value} | {ratio_} | {rounds} |")
    return rows


def pnsq_pairs(
    results: Results,
    pairs: dict[str, tuple[str, str]],
    names: tuple[str, str],
    notes: Notes,
) -> list[str]:
    """One row per pnsq-only workload against another pnsq row of the same rounds (``pairs``:
    key -> (that row, label)): both medians, the median of the rounds' ratios, every round's."""
    rows = []
    for key, (baseline, label) in pairs.items():
        pair = {
            key: {
                "go": results.get(baseline, {}).get("pnsq", []),
                "pnsq": results.get(key, {}).get("pnsq", []),
            }
        }
        base, this = side_cells(pair, key, label, notes, lambda c: number(c.value, ",.0f"), names)
        ratio_, rounds = round_ratios(pair, key)
        rows.append(f"| {label} | {base.value} | {this.value} | {ratio_} | {rounds} |")
    return rows


def cost_table(results: Results, pnsq_label: str, notes: Notes) -> list[str]:
    """pnsq-only rows against the pnsq row without their protection, round by round."""
    return [
        f"| workload | {pnsq_label} without msgs/s (median) | {pnsq_label} with msgs/s (median)"
        " | ratio with/without (median of the rounds') | each round's ratio |",
        "|---|---:|---:|---:|---|",
        *pnsq_pairs(results, PNSQ_BASELINE, (f"{pnsq_label} without", f"{pnsq_label} with"), notes),
    ]


def idempotent_table(results: Results, pnsq_label: str, notes: Notes) -> list[str]:
    """pnsq's numbered (idempotent) publishes against plain ones, round by round, with the
    goal for their ratio."""
    return [
        f"| idempotent publishing (numbered) vs plain, {pnsq_label}"
        f" | {pnsq_label} plain msgs/s (median) | {pnsq_label} numbered msgs/s (median)"
        " | ratio numbered/plain (median of the rounds';"
        f" goal ≥ {IDEMPOTENT_GOAL}) | each round's ratio |",
        "|---|---:|---:|---:|---|",
        *pnsq_pairs(
            results, PNSQ_IDEMPOTENT, (f"{pnsq_label} plain", f"{pnsq_label} numbered"), notes
        ),
    ]


def during_table(results: Results, pnsq_label: str, notes: Notes) -> list[str]:
    """pnsq-only rows measured during an operation against the steady window before it, round
    by round, with each round's move times and the MPUBs that failed and were sent again."""
    rows = [
        f"| workload | {pnsq_label} steady msgs/s (median) | {pnsq_label} during msgs/s (median)"
        " | ratio during/steady (median of the rounds') | each round's ratio"
        " | replica move s, each round | leader move s, each round"
        " | failed MPUBs (sent again), each round | longest MPUB gap ms, each round |",
        "|---|---:|---:|---:|---|---|---|---|---|",
    ]
    for key, (baseline, label) in PNSQ_DURING.items():
        pair = {
            key: {
                "go": results.get(baseline, {}).get("pnsq", []),
                "pnsq": results.get(key, {}).get("pnsq", []),
            }
        }
        steady, during = side_cells(
            pair,
            key,
            label,
            notes,
            lambda c: number(c.value, ",.0f"),
            (f"{pnsq_label} steady", f"{pnsq_label} during"),
        )
        ratio_, rounds = round_ratios(pair, key)
        cells = results.get(key, {}).get("pnsq", [])
        each = [
            " · ".join(c.extra.get(name, "-") for c in cells) or "-"
            for name in ("replica_move", "leader_move", "failed", "gap_ms")
        ]
        rows.append(
            f"| {label} | {steady.value} | {during.value} | {ratio_} | {rounds} | "
            + " | ".join(each)
            + " |"
        )
    return rows


def latency_table(results: Results, pnsq_label: str, notes: Notes) -> list[str]:
    rows = [
        f"| publish→deliver latency | Go nsqd 1.3.0 p99 ms (median) | {pnsq_label} p99 ms"
        " (median) | ratio pnsq/nsqd p99, lower is better (median of the rounds')"
        " | each round's ratio"
        " | Go nsqd p50 ms | pnsq p50 ms |",
        "|---|---:|---:|---:|---|---:|---:|",
    ]
    for key, label in LATENCY.items():
        for side, _name in SIDES:  # a publisher that could not keep the rate up gets a note
            for cell in results.get(key, {}).get(side, []):
                if cell.extra.get("rate") and cell.extra.get("target"):
                    rate, target = float(cell.extra["rate"]), float(cell.extra["target"])
                    if rate < RATE_SHORTFALL * target:
                        short = f"published only {rate:,.0f} of the target {target:,.0f} msgs/s"
                        cell.note = f"{cell.note}; {short}" if cell.note else short
        go, pn = side_cells(results, key, label, notes, lambda c: number(c.value, ".2f"))
        p50 = [number(c.extra.get("p50", "-"), ".2f") for c in (go, pn)]
        ratio_, rounds = round_ratios(results, key)
        rows.append(
            f"| {label} | {go.value} | {pn.value} | {ratio_} | {rounds} | {p50[0]} | {p50[1]} |"
        )
    return rows


def memory_table(
    results: Results, pnsq_label: str, notes: Notes, idle_conns: str = "10,000"
) -> list[str]:
    rows = [
        f"| daemon memory | Go nsqd 1.3.0 RSS MiB | {pnsq_label} RSS MiB"
        " | ratio pnsq/nsqd RSS (lower is better) | Go nsqd peak MiB | pnsq peak MiB |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    mib = 1 / 1024
    for key, label in MEMORY.items():
        label = label.format(idle_conns=idle_conns)
        go, pn = side_cells(results, key, label, notes, lambda c: number(c.value, ",.1f", mib))
        peak = [number(c.extra.get("peak", "-"), ",.1f", mib) for c in (go, pn)]
        ratio_, _rounds = round_ratios(results, key)  # one round
        rows.append(f"| {label} | {go.value} | {pn.value} | {ratio_} | {peak[0]} | {peak[1]} |")
    return rows


def build_tables(results: Results, pnsq_label: str, idle_conns: str) -> list[str]:
    """The six tables, then the footnotes of all of them (the scale table is
    bench_scale_table.py's)."""
    notes = Notes()
    lines = [
        *throughput_table(results, pnsq_label, notes),
        "",
        *idempotent_table(results, pnsq_label, notes),
        "",
        *cost_table(results, pnsq_label, notes),
        "",
        *during_table(results, pnsq_label, notes),
        "",
        *latency_table(results, pnsq_label, notes),
        "",
        *memory_table(results, pnsq_label, notes, idle_conns),
    ]
    if notes.lines:
        lines += ["", *notes.render()]
    return lines
