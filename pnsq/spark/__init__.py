"""pnsq's PySpark data source (``docs/spark.md``).

    from pnsq.spark import PnsqDataSource
    spark.dataSource.register(PnsqDataSource)

Only :mod:`pnsq.spark.source` and :mod:`pnsq.spark.sink` import pyspark (they are what Spark loads);
the rest (:mod:`pnsq.spark.planning`, options, discovery, range reads, publishing) is plain
Python, tested without Spark, so this package's ``__init__`` imports nothing eagerly:
``PnsqDataSource`` is imported (with pyspark) on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .source import PnsqDataSource as PnsqDataSource

__all__ = ["PnsqDataSource"]


def __getattr__(name: str) -> object:
    if name == "PnsqDataSource":
        from .source import PnsqDataSource

        globals()[name] = PnsqDataSource
        return PnsqDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
