"""What Spark computes in the example: a job per dataset, and a transform per micro-batch."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from worker.integrations.spark import JobContext, QueueSink

SALES_SCHEMA = "day INT, region STRING, product STRING, amount LONG"
EVENT_SCHEMA = "n INT, kind STRING, region STRING"


def sales_totals(source: str, spark: SparkSession, job: JobContext) -> int:
    """Totals and counts per region and product of one day's sales, as Parquet."""
    sales = spark.read.csv(source, header=True, schema=SALES_SCHEMA)
    totals = sales.groupBy("day", "region", "product").agg(
        F.sum("amount").alias("total_cents"), F.count("*").alias("sales")
    )
    assert job.output is not None
    totals.write.parquet(job.output)
    return int(sales.count())


class EventCounts:
    """A `foreachBatch` function: counts per kind and region, sent on as one message each."""

    def __init__(self, sink: QueueSink) -> None:
        self.sink = sink

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        events = frame.select(F.from_json("body", EVENT_SCHEMA).alias("e")).select("e.*")
        counts = events.groupBy("kind", "region").count()
        bodies = counts.select(
            F.to_json(F.struct(F.lit(batch_id).alias("batch"), "kind", "region", "count")).alias(
                "body"
            ),
            F.format_string("%d-%s-%s", F.lit(batch_id), "kind", "region").alias("key"),
        )
        self.sink.write(bodies)
