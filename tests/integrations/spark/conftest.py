"""One SparkSession for every Spark test (a session takes 6-10 s to start).

Local mode on two cores, two shuffle partitions (the data here is small), offline. The
tests skip when pyspark or a Java runtime is missing; CI has both.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs a Java runtime (java on PATH or JAVA_HOME)")
    from worker.integrations.spark.session import spark_session

    session = spark_session(
        master="local[2]",
        app_name="lease-worker-tests",
        config={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            # A streaming query's state in tests is tiny; no need to keep 100 batches.
            "spark.sql.streaming.minBatchesToRetain": "5",
            # How long a killed task's Python worker may run on (2 s by default): longer,
            # so that a test can have one act after its job was cancelled, on time.
            "spark.python.task.killTimeout": "10s",
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
