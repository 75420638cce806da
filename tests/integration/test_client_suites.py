"""The NSQ clients' own test suites against pnsq (``scripts/compat``): every test of a client's
suite that passes against Go nsqd 1.3.0 passes against pnsq too, but for the known differences
allowed below, each listed with its reason in docs/compatibility.md ("Client test suites").

go-nsq's suite (24 tests, about 15 s for both daemons) and gnsq's (108 tests, about 35 s; it
caught the stock-behaviour differences) run by default; nsqjs's (171 tests) is ``slow``. gnsq
and nsqjs are installed from PyPI and npm into .tools/compat on first use.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.daemons import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.interop]

COMPAT = ROOT / "scripts" / "compat"


#: client -> {test: reason} for tests that pass on Go and are known to fail on pnsq (none now:
#: gnsq's 23 went with the stock nsqd/nsqlookupd 1.3.0 behaviour, see docs/compatibility.md)
ALLOWED: dict[str, dict[str, str]] = {"go-nsq": {}, "nsqjs": {}, "gnsq": {}}

Outcomes = dict[str, list[str]]


def run_compat(client: str, tmp_path: Path) -> dict[str, Outcomes]:
    """Both sides' per-test outcomes, ``{"go": {test: [outcome, first line]}, "pnsq": ...}``."""
    out = tmp_path / "compat.json"
    proc = subprocess.run(
        [sys.executable, str(COMPAT), "--clients", client, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    sides: dict[str, Outcomes] = json.loads(out.read_text())[client]
    return sides


def check(client: str, sides: dict[str, Outcomes], expected_tests: int) -> None:
    go, pnsq = sides["go"], sides["pnsq"]
    # the suite really ran, and Go nsqd passes all of it
    assert len(go) == expected_tests
    assert {name: r for name, r in go.items() if r[0] != "pass"} == {}
    broken = {
        name: pnsq.get(name, ["fail", "not run"])[1]
        for name in go
        if pnsq.get(name, ["fail"])[0] != "pass" and name not in ALLOWED[client]
    }
    assert broken == {}


def test_gonsq_suite_passes_on_pnsq_as_on_go(tmp_path: Path) -> None:
    check("go-nsq", run_compat("go-nsq", tmp_path), expected_tests=24)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_nsqjs_suite_passes_on_pnsq_as_on_go(tmp_path: Path) -> None:
    check("nsqjs", run_compat("nsqjs", tmp_path), expected_tests=171)


@pytest.mark.timeout(900)
def test_gnsq_suite_passes_on_pnsq_as_on_go(tmp_path: Path) -> None:
    check("gnsq", run_compat("gnsq", tmp_path), expected_tests=108)
