"""pnsq's PySpark data source (``docs/spark.md``).

Only :mod:`pnsq.spark.source` and :mod:`pnsq.spark.sink` import pyspark (they are what Spark loads);
the rest (:mod:`pnsq.spark.planning`, options, discovery, range reads, publishing) is plain
Python, tested without Spark, so this package's ``__init__`` imports nothing eagerly.
"""
