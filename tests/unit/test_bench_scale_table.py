"""scripts/bench's scale rows: bench_scale.py's result as recorded, and their table against
issue 38's goals (scripts/bench_scale_table.py, stdlib only, run from scripts/ as
bench_report.py runs it)."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _load(name: str) -> ModuleType:
    sys.path.insert(0, str(SCRIPTS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(SCRIPTS))


@pytest.fixture(scope="module")
def scale() -> ModuleType:
    return _load("bench_scale_table")


@pytest.fixture(scope="module")
def tables() -> ModuleType:
    return _load("bench_tables")


def write(tmp_path: Path, lines: list[tuple[str, ...]]) -> str:
    path = tmp_path / "results.tsv"
    path.write_text("".join("\t".join(fields) + "\n" for fields in lines))
    return str(path)


def row_line(rows: list[str], label_start: str) -> str:
    (found,) = [r for r in rows if r.startswith(f"| {label_start}")]
    return found


def row(rows: list[str], label_start: str) -> list[str]:
    return [cell.strip() for cell in row_line(rows, label_start).strip("|").split("|")]


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
