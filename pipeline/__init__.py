"""pnsq's PySpark data source.

Only :mod:`pipeline.source` imports pyspark; :mod:`pipeline.planning` is plain Python, tested
without Spark, so this package's ``__init__`` imports nothing eagerly.
"""
