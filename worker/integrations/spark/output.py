"""Atomic job output: a job writes to a staging path, and a commit renames it into place.

Rules:
- The staging path is a hidden sibling of the final path (`.<name>.staging-<token>` in the
  same directory), so the rename stays on one filesystem and Spark's readers of the parent
  directory skip it (they ignore names starting with `.` or `_`).
- A commit is one `FileSystem.rename` of the staging directory onto a final path that does
  not exist yet: readers see no output or all of it. On the local filesystem and HDFS that
  rename is atomic; on object stores (S3A, GCS) it is a copy, and only a committer made for
  the store (the S3A magic committer) is atomic: point `output` at a filesystem that renames.
- A final path that exists already was committed by an earlier run of the same message (a
  redelivery after a lost delete): it is kept, the new staging output is discarded.
- Paths go through Hadoop's `FileSystem` (the JVM side of the session), so `file:`, `hdfs:`
  and any other scheme the cluster knows work alike.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

__all__ = ["StagedOutput"]


@dataclass(frozen=True, slots=True)
class StagedOutput:
    """Where a job writes (`staging`) and where its commit puts it (`final`)."""

    final: str
    staging: str

    @classmethod
    def beside(cls, spark: SparkSession, final: str) -> StagedOutput:
        path = _path(spark, final)
        parent, name = path.getParent(), path.getName()
        if parent is None:
            raise ValueError(f"output {final!r}: the root cannot be an output path")
        staging = f"{parent.toString()}/.{name}.staging-{uuid.uuid4().hex}"
        return cls(final=path.toString(), staging=staging)

    def commit(self, spark: SparkSession) -> bool:
        """Rename the staging output onto the final path; False when the final path was
        already there (kept as it is; the staging output is removed)."""
        fs, staging, final = (
            _fs(spark, self.final),
            _path(spark, self.staging),
            _path(spark, self.final),
        )
        if fs.exists(final):
            fs.delete(staging, True)
            return False
        if not fs.exists(staging):
            raise FileNotFoundError(f"the job wrote nothing to its output {self.staging!r}")
        fs.mkdirs(final.getParent())
        if not fs.rename(staging, final):
            raise OSError(f"could not rename {self.staging!r} to {self.final!r}")
        return True

    def discard(self, spark: SparkSession) -> None:
        """Remove whatever a job left in the staging path."""
        _fs(spark, self.final).delete(_path(spark, self.staging), True)


def committed(spark: SparkSession, final: str) -> bool:
    """Whether `final` exists (an earlier run of the same message committed it)."""
    return bool(_fs(spark, final).exists(_path(spark, final)))


def _path(spark: SparkSession, path: str) -> Any:
    jvm: Any = spark.sparkContext._jvm
    return jvm.org.apache.hadoop.fs.Path(path)


def _fs(spark: SparkSession, path: str) -> Any:
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    return _path(spark, path).getFileSystem(conf)
