"""What ``pip install pnsq`` puts into a user's site-packages: exactly four import names."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_the_wheel_installs_only_pnsq_nsqd_lookupd_and_protocol(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(tmp_path)],
        check=True,
        cwd=tmp_path,
    )
    (wheel,) = tmp_path.glob("pnsq-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = {name.split("/", 1)[0] for name in archive.namelist()}
    top_level = {name for name in names if not name.endswith(".dist-info")}
    assert top_level == {"pnsq", "nsqd", "lookupd", "protocol"}


def test_importing_pnsq_imports_neither_trio_nor_pyspark() -> None:
    code = (
        "import sys, pnsq, pnsq.client, pnsq.spark, pnsq.client.blocking\n"
        "print(sorted(m for m in ('trio', 'pyspark', 'nsqd', 'lookupd') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT
    ).stdout
    assert out.strip() == "[]"
