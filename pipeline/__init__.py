"""pnsq's PySpark data source (``docs/spark.md``).

Only :mod:`pipeline.source` and :mod:`pipeline.sink` import pyspark (they are what Spark loads);
the rest (:mod:`pipeline.planning`, options, discovery, range reads, publishing) is plain
Python, tested without Spark, so this package's ``__init__`` imports nothing eagerly.
"""
