"""``--version`` answers without importing the daemon: clients' test harnesses (gnsq's) run
``nsqd --version`` before every daemon they start, and importing pnsq's ~300 modules for it
doubled the time each start took."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.daemons import ROOT

PROBE = """
import sys
from {package}.cli import main
main(["--version"])
daemon = ("{package}.app", "{package}.broker", "{package}.http", "hypercorn")
print(sorted(name for name in daemon if name in sys.modules))
"""


@pytest.mark.parametrize(
    ("package", "line"),
    [("nsqd", "nsqd v1.3.0 (built w/pnsq-"), ("lookupd", "nsqlookupd v1.3.0 (built w/pnsq-")],
)
def test_version_does_not_import_the_daemon(package: str, line: str) -> None:
    probe = PROBE.format(package=package)
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    version, imported = done.stdout.splitlines()
    assert version.startswith(line)
    assert imported == "[]"
