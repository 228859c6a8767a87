"""The one SparkSession of a worker process, where the worker is Spark's driver.

Rules:
- One session per process: `spark_session()` builds it the first time and returns the same
  one after (a session takes 6-10 s to start and holds a JVM).
- Local mode unless told otherwise: `master` argument, then `SPARK_MASTER`, then
  `local[*]`. A cluster URL (`spark://`, `yarn`, `k8s://`) makes this process the driver.
- Offline and quiet: no UI, no console progress bar, driver bound to loopback in local mode;
  nothing is downloaded (no `spark.jars.packages` unless the caller asks).
- `PYSPARK_PYTHON` is set to this interpreter unless already set: otherwise Spark starts
  another Python for its workers, and they fail with only "Python worker failed to connect
  back" after ~10 s.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping

from pyspark.sql import SparkSession

__all__ = ["spark_session"]

_lock = threading.Lock()
_session: SparkSession | None = None

#: Settings applied unless the caller's `config` gives its own.
_DEFAULTS: Mapping[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
}
_LOCAL: Mapping[str, str] = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}


def spark_session(
    *,
    master: str | None = None,
    app_name: str = "lease-worker",
    config: Mapping[str, str] | None = None,
) -> SparkSession:
    """The process's SparkSession, started on the first call with these settings.

    Later calls return the running session and ignore their arguments (Spark's own
    `getOrCreate` rule); stop it with `session.stop()` to start a different one.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    with _lock:
        global _session
        if _session is not None and not _stopped(_session):
            return _session
        chosen = master or os.environ.get("SPARK_MASTER") or "local[*]"
        settings = dict(_DEFAULTS)
        if chosen.startswith("local"):
            settings.update(_LOCAL)
        settings.update(config or {})
        builder = SparkSession.builder.master(chosen).appName(app_name)
        for key, value in settings.items():
            builder = builder.config(key, value)
        _session = builder.getOrCreate()
        return _session


def _stopped(session: SparkSession) -> bool:
    # A stopped session's context has dropped its Java side.
    return session.sparkContext._jsc is None
