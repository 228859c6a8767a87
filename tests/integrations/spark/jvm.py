"""What the driver's JVM prints on `System.err`, captured through Py4J.

An uncaught error of a JVM thread (Spark's stream execution thread, say) is printed there
by the JVM itself, beyond pytest's capture and Python's logging.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyspark.sql import SparkSession


class Printed:
    """The text printed while the block ran (set when it ends)."""

    text = ""


@contextmanager
def jvm_stderr(spark: SparkSession) -> Iterator[Printed]:
    jvm: Any = spark.sparkContext._jvm
    buffer = jvm.java.io.ByteArrayOutputStream()
    system = jvm.java.lang.System
    before = system.err
    printed = Printed()
    system.setErr(jvm.java.io.PrintStream(buffer, True))
    try:
        yield printed
    finally:
        system.setErr(before)
        printed.text = str(buffer.toString())
