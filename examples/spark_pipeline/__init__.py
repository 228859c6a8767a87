"""An example data pipeline on Spark under lease-worker: `python -m examples.spark_pipeline`.

1. A producer writes small generated sales datasets (CSV) and sends one message per
   dataset to `aggregate`, naming its input and output.
2. The worker runs a real aggregation in Spark for each message (`SparkJobs`), its lease
   renewed while the job runs, and commits Parquet output atomically.
3. A streaming query reads the `events` queue through the leased source, counts events per
   kind and region in each micro-batch, and writes the counts to `summaries` with the
   queue sink.
4. A report (`report.md` and `report.png`) shows the totals, the jobs' renewals and the
   streaming counts; the plot only when matplotlib is installed (the `[spark]` extra is
   all the rest needs).

Queues are the embedded in-memory engine behind its SQS endpoint on 127.0.0.1 (Spark's
Python processes reach it like SQS), or a real SQS-compatible endpoint given with
`--endpoint-url`.
"""
