"""The Spark data source's tests: ONE SparkSession for the whole run (starting one costs 5-10 s)
and one pnsq nsqd shared by the tests (each uses its own topics).

The environment the JVM and its Python workers inherit is set here, at import time, before any
session starts: the workers must run this venv's interpreter (``PYSPARK_PYTHON``) and import
``pipeline`` from this checkout (``PYTHONPATH``); ``SPARK_LOCAL_IP`` keeps Spark on loopback.

Without pyspark, pyarrow or Java the Spark tests are skipped on a developer's machine but FAIL
in CI (``CI=true``), so a missing install step cannot hide behind "skipped".
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemons import ROOT, Daemon, pnsq_nsqd

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
)


def spark_missing() -> str | None:
    """Why the Spark tests cannot run here, or None."""
    for module in ("pyspark", "pyarrow"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install -e '.[spark]')"
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") is None and not (java_home and Path(java_home, "bin/java").exists()):
        return "java is not on PATH (Spark needs Java 17)"
    return None


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local SparkSession with pnsq's data source registered."""
    missing = spark_missing()
    if missing is not None:  # scripts/setup installs all of it: a missing piece is a failure
        pytest.fail(f"the Spark tests cannot run: {missing}")
    from pyspark.sql import SparkSession

    from pnsq.spark.source import PnsqDataSource

    session = (
        # local[threads, maxFailures]: a failed task is tried again, as on a cluster
        # (spark.task.maxFailures is not read in local mode)
        SparkSession.builder.master(os.environ.get("SPARK_TEST_MASTER", "local[2,4]"))
        .appName("pnsq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(PnsqDataSource)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def shared_nsqd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """One pnsq nsqd for every test in tests/spark (topics are per test)."""
    daemon = pnsq_nsqd(tmp_path_factory.mktemp("spark") / "nsqd").start()
    try:
        yield daemon
    finally:
        daemon.stop()


def create_topic(nsqd: Daemon, topic: str, partitions: int) -> None:
    """``POST /topic/create?topic=&partition_num=`` on nsqd's HTTP port."""
    url = f"http://{nsqd.http_address}/topic/create?topic={topic}&partition_num={partitions}"
    with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=10) as r:
        assert r.status == 200
