# mypy: ignore-errors
"""The Celery peer of bench/side_by_side.py: a Celery worker on SQS (kombu's SQS transport),
run with bench/peers/.venv's Python.

    cd bench/peers && BENCH_ENDPOINT=... BENCH_QUEUE=... BENCH_QUEUE_URL=... \
        .venv/bin/python celery_driver.py

One no-op task, `noop`, on BENCH_QUEUE given as a predefined queue (kombu neither lists nor
creates queues then). Celery's defaults otherwise: the prefork pool with a child per core,
acknowledgement (kombu's DeleteMessage, one call per message) before the task runs, no
visibility extension. The prefetch multiplier is set so that the worker holds at most
BENCH_CONCURRENCY messages (the others' budget); results are ignored (no result backend).
The queue's bodies must be Celery task messages as kombu's SQS transport writes them
(bench/side_by_side.py writes them). Prints "ready" before the worker starts; it never says
"done" (the tasks run in the pool's children), so the harness sees the end by polling.
"""

from __future__ import annotations

import os

from celery import Celery

env = os.environ
QUEUE = env.get("BENCH_QUEUE", "side-by-side")
CORES = os.cpu_count() or 1
BUDGET = int(env.get("BENCH_CONCURRENCY", "10"))

#: kombu builds the endpoint from the broker URL's host and port (http with is_secure off).
_HOST = env.get("BENCH_ENDPOINT", "http://127.0.0.1:9324").removeprefix("http://").rstrip("/")
app = Celery("bench", broker=f"sqs://testing:testing@{_HOST}")
app.conf.update(
    broker_transport_options={
        "region": "us-east-1",
        "is_secure": False,
        "predefined_queues": {
            QUEUE: {
                "url": env.get("BENCH_QUEUE_URL", ""),
                "access_key_id": "testing",
                "secret_access_key": "testing",
            }
        },
        "wait_time_seconds": int(env.get("BENCH_WAIT_S", "20")),
        "visibility_timeout": int(env.get("BENCH_VISIBILITY_S", "30")),
        # kombu waits this long between polls (default 1 s); long polls make it needless.
        "polling_interval": float(env.get("BENCH_POLLING_INTERVAL_S", "0")),
    },
    broker_connection_retry_on_startup=True,
    task_default_queue=QUEUE,
    task_ignore_result=True,
    worker_prefetch_multiplier=max(1, BUDGET // CORES),
    worker_concurrency=CORES,
    worker_hijack_root_logger=False,
    worker_send_task_events=False,
)


@app.task(name="noop")
def noop() -> None:
    return None


def main() -> None:
    print("ready", flush=True)
    app.worker_main(
        [
            "worker",
            "--loglevel",
            "WARNING",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-Q",
            QUEUE,
        ]
    )


if __name__ == "__main__":
    main()
