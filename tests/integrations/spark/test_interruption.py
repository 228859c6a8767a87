"""Which Spark call errors `stops_quietly` says as an interruption: no Spark session needed
(a Py4J error's text is what is read)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]

from worker.integrations.spark.interruption import BatchInterrupted, interruption_of

_CALL = "An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.\n"


class _Said(Py4JJavaError):  # type: ignore[misc]
    """A Py4J error whose text is given (the real one asks the JVM for it)."""

    def __init__(self, text: str) -> None:
        Exception.__init__(self, text)
        self._text = text

    def __str__(self) -> str:
        return self._text


def test_an_interrupted_call_is_an_interruption() -> None:
    said = interruption_of(_Said(_CALL + ": java.lang.InterruptedException\n\tat x.y(Z.java:1)"))
    assert isinstance(said, BatchInterrupted)
    assert said.java_exception == "java.lang.InterruptedException"


def test_a_job_cancelled_because_its_query_stopped_is_an_interruption_too() -> None:
    """Seen once in CI: the stop cancelled the batch's job before interrupting its thread,
    the error passed unchanged, and Spark's regex overflowed the JVM's stack."""
    text = (
        _CALL + ": org.apache.spark.SparkException: [SPARK_JOB_CANCELLED] Job 38 cancelled "
        "Query [id = 6c64, runId = f5f7] was stopped SQLSTATE: XXKDA\n\tat a.b(C.scala:222)"
    )
    said = interruption_of(_Said(text))
    assert isinstance(said, BatchInterrupted)
    assert "java.lang.InterruptedException" in str(said)
    assert said.call == "z:org.apache.spark.api.python.PythonRDD.collectAndServe"


def test_a_job_cancelled_for_another_reason_or_a_failure_passes_unchanged() -> None:
    cancelled = _CALL + ": org.apache.spark.SparkException: [SPARK_JOB_CANCELLED] Job 3 cancelled "
    assert interruption_of(_Said(cancelled + "part of cancelled job group x\n")) is None
    assert interruption_of(_Said(_CALL + ": java.lang.ArithmeticException: / by zero")) is None
    assert interruption_of(ValueError("not Py4J")) is None
