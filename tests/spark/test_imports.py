"""``from pnsq.spark import PnsqDataSource`` works, and imports pyspark only then."""

from __future__ import annotations

import subprocess
import sys

from tests.daemons import ROOT


def test_data_source_is_exported_lazily_from_the_package() -> None:
    code = (
        "import sys\n"
        "import pnsq.spark\n"
        "assert 'pyspark' not in sys.modules\n"
        "from pnsq.spark import PnsqDataSource\n"
        "from pnsq.spark.source import PnsqDataSource as Direct\n"
        "print('pyspark' in sys.modules, PnsqDataSource is Direct, PnsqDataSource.name())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT
    ).stdout
    assert out.split() == ["True", "True", "pnsq"]
