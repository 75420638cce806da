"""scripts/bench's report: each side's median over the rounds, every round's ratio and their
median (scripts/bench_tables.py), and the scale rows (scripts/bench_scale_table.py); stdlib
only, loaded from their paths."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # dataclasses look their module up; bench_scale_table imports bench_tables by name
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tables() -> ModuleType:
    return _load("bench_tables")


@pytest.fixture(scope="module")
def scale(tables: ModuleType) -> ModuleType:
    """scripts/bench_scale_table.py: the scale rows (it reads bench_tables, loaded first)."""
    return _load("bench_scale_table")


def write(tmp_path: Path, lines: list[tuple[str, ...]]) -> str:
    path = tmp_path / "results.tsv"
    path.write_text("".join("\t".join(fields) + "\n" for fields in lines))
    return str(path)


def row_line(rows: list[str], label_start: str) -> str:
    (found,) = [r for r in rows if r.startswith(f"| {label_start}")]
    return found


def row(rows: list[str], label_start: str) -> list[str]:
    return [cell.strip() for cell in row_line(rows, label_start).strip("|").split("|")]


def test_a_rows_ratio_is_the_median_of_its_rounds_ratios(
    tables: ModuleType, tmp_path: Path
) -> None:
    path = write(
        tmp_path,
        [
            ("consume", "go", "200000", "", "round=1"),
            ("consume", "pnsq", "260000", "", "round=1"),
            ("consume", "go", "300000", "", "round=2"),
            ("consume", "pnsq", "240000", "", "round=2"),
            ("consume", "go", "250000", "", "round=3"),
            ("consume", "pnsq", "225000", "", "round=3"),
        ],
    )
    rows = tables.build_tables(tables.read_results(path), "pnsq", "10")
    cells = row(rows, "consume")
    # the medians' ratio would be 240,000 / 250,000 = 0.960: the rounds' pairs decide
    assert cells[1:] == ["250,000", "240,000", "0.900", "1.300 · 0.800 · 0.900"]


def test_a_failed_round_is_left_out_of_the_median_and_named(
    tables: ModuleType, tmp_path: Path
) -> None:
    path = write(
        tmp_path,
        [
            ("pub_sync", "go", "40000", "", "round=1"),
            ("pub_sync", "pnsq", "failed", "tool exited non-zero", "round=1"),
            ("pub_sync", "go", "50000", "", "round=2"),
            ("pub_sync", "pnsq", "30000", "", "round=2"),
        ],
    )
    rows = tables.build_tables(tables.read_results(path), "pnsq", "10")
    cells = row(rows, "PUB, 16 conns sync")
    assert cells[1:] == ["45,000", "30,000 [1]", "0.600", "- · 0.600"]
    assert "- [1] PUB, 16 conns sync (1 outstanding), pnsq-loadgen, pnsq: round 1:" in "\n".join(
        rows
    )


def test_replicated_rows_compare_with_go_unreplicated_rounds(
    tables: ModuleType, tmp_path: Path
) -> None:
    path = write(
        tmp_path,
        [
            ("mpub", "go", "100", "", "round=1"),
            ("mpub", "go", "300", "", "round=2"),
            ("mpub_replicated", "pnsq", "100", "", "round=1"),
            ("mpub_replicated", "pnsq", "120", "", "round=2"),
        ],
    )
    rows = tables.build_tables(tables.read_results(path), "pnsq", "10")
    cells = row(rows, "MPUB as above")
    assert cells[1:] == ["200", "110", "0.700", "1.000 · 0.400"]


def test_latency_extras_are_medians_and_a_short_round_gets_a_note(
    tables: ModuleType, tmp_path: Path
) -> None:
    path = write(
        tmp_path,
        [
            ("latency_10k_buffered", "go", "2.0", "", "p50=1.0 rate=10000 target=10000 round=1"),
            ("latency_10k_buffered", "pnsq", "1.0", "", "p50=0.5 rate=9000 target=10000 round=1"),
            ("latency_10k_buffered", "go", "4.0", "", "p50=3.0 rate=10000 target=10000 round=2"),
            ("latency_10k_buffered", "pnsq", "3.0", "", "p50=0.7 rate=10000 target=10000 round=2"),
        ],
    )
    rows = tables.build_tables(tables.read_results(path), "pnsq", "10")
    cells = row(rows, "10k msgs/s, consumer with")
    assert cells[1:] == ["3.00", "2.00 [1]", "0.625", "0.500 · 0.750", "2.00", "0.60"]
    assert "round 1: published only 9,000 of the target 10,000 msgs/s" in "\n".join(rows)


def test_a_single_round_row_has_no_round_in_its_note(tables: ModuleType, tmp_path: Path) -> None:
    path = write(
        tmp_path,
        [
            ("mem_idle_conns", "go", "1024", "", "peak=2048 round=1"),
            ("mem_idle_conns", "pnsq", "2048", "held 10", "peak=4096 round=1"),
        ],
    )
    text = "\n".join(tables.build_tables(tables.read_results(path), "pnsq", "10"))
    assert "| 10 idle connections (each IDENTIFYed) | 1.0 | 2.0 [1] | 2.000 | 2.0 | 4.0 |" in text
    assert "- [1] 10 idle connections (each IDENTIFYed), pnsq: held 10" in text


def test_the_cost_of_the_credential_and_tls_is_pnsq_against_pnsq(
    tables: ModuleType, tmp_path: Path
) -> None:
    path = write(
        tmp_path,
        [
            ("mpub", "go", "500000", "", "round=1"),
            ("mpub_replicated", "pnsq", "100000", "", "round=1"),
            ("mpub_replicated_secure", "pnsq", "80000", "", "round=1"),
            ("mpub_replicated", "pnsq", "120000", "", "round=2"),
            ("mpub_replicated_secure", "pnsq", "90000", "", "round=2"),
        ],
    )
    rows = tables.cost_table(tables.read_results(path), "pnsq", tables.Notes())
    assert row(rows, "MPUB replicated as above, with the cluster credential") == [
        "MPUB replicated as above, with the cluster credential and TLS between nodes",
        "110,000",
        "85,000",
        "0.775",
        "0.800 · 0.750",
    ]


def test_mpub_during_a_move_is_against_the_steady_window_with_each_rounds_moves(
    tables: ModuleType, tmp_path: Path
) -> None:
    moved = "replica_move={} leader_move={} failed={} gap_ms={}"
    path = write(
        tmp_path,
        [
            ("mpub_move_steady", "pnsq", "100000", "", "failed=0 gap_ms=9 round=1"),
            ("mpub_during_move", "pnsq", "40000", "", moved.format(6.4, 0.14, 2, 300) + " round=1"),
            ("mpub_move_steady", "pnsq", "80000", "", "failed=0 gap_ms=8 round=2"),
            ("mpub_during_move", "pnsq", "60000", "", moved.format(4.5, 0.26, 2, 214) + " round=2"),
            ("mpub_move_steady", "pnsq", "140000", "", "failed=0 gap_ms=9 round=3"),
            (
                "mpub_during_move",
                "pnsq",
                "20000",
                "the moves ended 12.08 s into the 10 s window",
                moved.format(10.8, 0.23, 0, 465) + " round=3",
            ),
        ],
    )
    notes = tables.Notes()
    rows = tables.during_table(tables.read_results(path), "pnsq", notes)
    cells = row(rows, "MPUB 200 x 200 B, pnsq's client")
    assert cells[1:] == [
        "100,000",
        "40,000 [1]",
        "0.400",
        "0.400 · 0.750 · 0.143",
        "6.4 · 4.5 · 10.8",
        "0.14 · 0.26 · 0.23",
        "2 · 2 · 0",
        "300 · 214 · 465",
    ]
    assert "round 3: the moves ended 12.08 s" in notes.lines[0]
    # and the report builds it among the other tables
    assert any(
        r.startswith("| MPUB 200 x 200 B, pnsq's client")
        for r in tables.build_tables(tables.read_results(path), "pnsq", "10")
    )


def test_idempotent_publishing_is_numbered_against_plain_pnsq_round_by_round(
    tables: ModuleType, tmp_path: Path
) -> None:
    path = write(
        tmp_path,
        [
            ("pub_pipelined", "go", "80000", "", "round=1"),
            ("pub_pipelined", "pnsq", "100000", "", "round=1"),
            ("pub_pipelined_loadgen", "pnsq", "200000", "", "round=1"),
            ("pub_pipelined_idempotent", "pnsq", "190000", "", "round=1"),
            ("mpub_loadgen", "pnsq", "500000", "", "round=1"),
            ("mpub_idempotent", "pnsq", "450000", "", "round=1"),
            ("pub_pipelined", "go", "90000", "", "round=2"),
            ("pub_pipelined", "pnsq", "100000", "", "round=2"),
            ("pub_pipelined_loadgen", "pnsq", "300000", "", "round=2"),
            ("pub_pipelined_idempotent", "pnsq", "240000", "", "round=2"),
            ("mpub_loadgen", "pnsq", "400000", "", "round=2"),
            ("mpub_idempotent", "pnsq", "failed", "tool exited non-zero", "round=2"),
            ("pub_pipelined", "go", "85000", "", "round=3"),
            ("pub_pipelined", "pnsq", "250000", "", "round=3"),
            ("pub_pipelined_loadgen", "pnsq", "250000", "", "round=3"),
            ("pub_pipelined_idempotent", "pnsq", "250000", "", "round=3"),
        ],
    )
    notes = tables.Notes()
    rows = tables.idempotent_table(tables.read_results(path), "pnsq", notes)
    assert rows[0].startswith("| idempotent publishing (numbered) vs plain, pnsq |")
    assert "goal ≥ 0.9" in rows[0]
    # the plain figures are pnsq's own, measured beside the numbered ones (not step 3's, nor Go
    # nsqd's), paired with them by round
    assert row(rows, "pipelined PUB") == [
        "pipelined PUB, 16 conns (window 1000), pnsq-loadgen",
        "250,000",
        "240,000",
        "0.950",
        "0.950 · 0.800 · 1.000",
    ]
    # a failed numbered round has no ratio and is named, under the numbered column's name
    assert row(rows, "sync MPUB")[1:] == ["450,000", "450,000 [1]", "0.900", "0.900 · -"]
    assert notes.lines == [
        "sync MPUB 200 x 200 B, one conn per core (as bench_writer), pnsq-loadgen,"
        " pnsq numbered: round 2: tool exited non-zero"
    ]
    # a row that did not run says so
    assert row(rows, "sync PUB")[1:] == ["not run", "not run", "-", "-"]
    # and the report builds it among the other tables, the Go comparison unchanged
    report = tables.build_tables(tables.read_results(path), "pnsq", "10")
    assert any(r.startswith("| idempotent publishing (numbered) vs plain") for r in report)
    assert row(report, "PUB, 16 conns pipelined")[1:4] == ["85,000", "100,000", "1.250"]


def test_a_pnsq_only_tables_footnote_names_its_own_column(
    tables: ModuleType, tmp_path: Path
) -> None:
    path = write(
        tmp_path,
        [
            ("mpub_replicated", "pnsq", "failed", "cluster did not start", "round=1"),
            ("mpub_replicated_secure", "pnsq", "80000", "", "round=1"),
        ],
    )
    notes = tables.Notes()
    tables.cost_table(tables.read_results(path), "pnsq", notes)
    assert notes.lines == [
        "MPUB replicated as above, with the cluster credential and TLS between nodes,"
        " pnsq without: cluster did not start"
    ]


def test_a_runs_result_is_recorded_with_the_busiest_nodes_idle_cpu(
    scale: ModuleType, tmp_path: Path
) -> None:
    out = tmp_path / "scale.out"
    result = {
        "partitions": 3000,
        "create_s": 6.33,
        "writable_s": 14.3,
        "before_kill": {"promoted": 0, "OFFLINE": 0, "isr shrink": 1, "isr expand": 5},
        "idle_cpu": {"lookupd": 0.014, "nsqd0": 0.24, "nsqd1": 0.237, "nsqd2": 0.25},
        "victim_led": 1000,
        "failover_s": 0.8,
    }
    out.write_text("a log line\n" + json.dumps(result) + "\n")
    assert scale.parse_scale(str(out)) == (
        "14.3 create=6.33 idle=0.25 lookupd=0.014 led=1000 failover=0.8 promoted=0 shrink=1"
    )
    result.update(writable_s=None, failover_skipped="not every partition took a PUB")
    del result["victim_led"], result["failover_s"]
    out.write_text(json.dumps(result) + "\n")
    assert scale.parse_scale(str(out)).startswith("none create=6.33 idle=0.25")
    assert "led=- failover=-" in scale.parse_scale(str(out))


def test_scale_rows_show_each_size_once_against_its_goals(
    scale: ModuleType, tables: ModuleType, tmp_path: Path
) -> None:
    extras = "create=6.3 idle=0.24 lookupd=0.014 led=1000 failover=0.8 promoted=0 shrink=0"
    path = write(
        tmp_path,
        [
            (
                "scale_10000",
                "pnsq",
                "none",
                "",
                "create=75.4 idle=0.544 lookupd=0.398 led=- "
                "failover=- promoted=12325 shrink=16529 round=1",
            ),
            ("scale_3000", "pnsq", "14.3", "", f"{extras} round=1"),
        ],
    )
    rows = scale.scale_table(tables.read_results(path), "pnsq")
    header = next(r for r in rows if r.startswith("| partitions x 2 copies"))
    assert "goal ≤ 60" in header
    assert "goal < 0.1 at 10,000" in header
    # smallest first: 3,000 above 10,000
    assert rows.index(row_line(rows, "3,000 |")) < rows.index(row_line(rows, "10,000 |"))
    assert row(rows, "3,000 |") == ["3,000", "14.3", "0.240", "0.014", "1,000: 0.80", "0 / 0"]
    assert row(rows, "10,000 |") == [
        "10,000",
        "not all (timed out)",
        "0.544",
        "0.398",
        "not measured",
        "12325 / 16529",
    ]


def test_decide_rows_show_one_partitions_decision_against_the_smallest_size(
    scale: ModuleType, tables: ModuleType, tmp_path: Path
) -> None:
    out = tmp_path / "decide.out"
    result = {"partitions": 3000, "one_ms": 2.4, "node_ms": 68.5, "node_touched": 2000}
    out.write_text("a log line\n" + json.dumps(result) + "\n")
    assert scale.parse_decide(str(out)) == "2.4 node=68.5 touched=2000"
    path = write(
        tmp_path,
        [
            ("decide_10000", "pnsq", "3.6", "", "node=262.0 touched=6666 round=1"),
            ("decide_1000", "pnsq", "2.0", "", "node=23.6 touched=666 round=1"),
        ],
    )
    rows = scale.decide_table(tables.read_results(path))
    header = next(r for r in rows if r.startswith("| partitions x 2 copies"))
    assert "goal ≤ 2: flat" in header
    assert rows.index(row_line(rows, "1,000 |")) < rows.index(row_line(rows, "10,000 |"))
    assert row(rows, "1,000 |") == ["1,000", "2.00", "1.00", "23.6", "666", "35.4"]
    assert row(rows, "10,000 |") == ["10,000", "3.60", "1.80", "262.0", "6,666", "39.3"]
    assert scale.decide_table(tables.read_results(write(tmp_path, []))) == []
