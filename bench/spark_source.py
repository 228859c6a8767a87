"""The leased streaming source into a parquet sink: messages per second end to end.

    python -m bench.spark_source [--messages 20000] [--rounds 3] [--client lean]
                                 [--grid max_batch=1000,5000 trigger=1s,0s ...]

A real local Spark session (`local[2]`) reads a queue of `lease-worker serve-sqs` (a process
of its own on 127.0.0.1, reached by the source with the real SQS backend, as a deployment
reaches SQS) through `read_leased_queue` into `writeStream.format("parquet")`. Each round
pre-loads the queue (not timed), starts the query, and stops the clock when every message
is committed and deleted: the queue answers 0 visible and 0 in flight. Then the parquet
output is read back: every message id must be there (at least once; duplicates counted).

Per setting: the median over rounds of messages/s, the CPU seconds each process spent
(serve-sqs, Spark's JVM, Spark's Python processes: the source runner and the executors'
workers) and the SQS calls the endpoint answered; the best setting last.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from backends.sqs import SqsBackend, SqsSettings
from backends.sqs.settings import SQS_CLIENTS, SqsClientKind
from bench._harness import CREDENTIALS, Server, Sqs, cpu_s, server
from bench.goals import SPARK_FIGURES
from worker.backend import Backend

QUEUE = "spark-source"
#: A small JSON event, ~100 bytes, as the example's events are.
BODY = '{{"n": {n}, "kind": "click", "region": "eu-west-1", "user": "u{u:05d}", "pad": "{pad}"}}'


async def open_sqs(url: str, client: SqsClientKind) -> Backend:
    """The source's `connect`: runs in Spark's source runner process (module level, so it
    pickles by reference)."""
    settings = SqsSettings(
        region=CREDENTIALS["AWS_REGION"],
        endpoint_url=url,
        access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        client=client,
    )
    return await SqsBackend.connect(settings)


@dataclass(frozen=True, slots=True)
class Setting:
    options: tuple[tuple[str, str], ...]
    trigger: str

    def label(self) -> str:
        parts = [f"{k}={v}" for k, v in self.options]
        return " ".join([*parts, f"trigger={self.trigger}"])


@dataclass(slots=True)
class Round:
    seconds: float
    rows: int
    distinct: int
    cpu: dict[str, float]
    calls: dict[str, int]
    batches: int

    def ceiling(self, messages: int) -> float:
        """Messages/s were the CPU all this run's: two free cores, the busiest single process
        (the runner's loop, serve-sqs) at most one of them. An estimate, not a figure."""
        parts = ("serve-sqs", "jvm", "python")
        busiest = max(self.cpu["runner"], self.cpu["serve-sqs"])
        return messages / max(sum(self.cpu[k] for k in parts) / 2, busiest)

    def cpu_ms(self, messages: int) -> float:
        """CPU per message of every process involved (the runner is among Python's)."""
        return 1000 * sum(self.cpu[k] for k in ("serve-sqs", "jvm", "python")) / messages


@dataclass(slots=True)
class Result:
    setting: Setting
    rounds: list[Round] = field(default_factory=list)

    def rate(self) -> float:
        return statistics.median(self.messages / r.seconds for r in self.rounds)

    messages: int = 0


def _grid(pairs: Sequence[str]) -> list[Setting]:
    axes: dict[str, list[str]] = {"max_batch": ["500", "1000"], "trigger": ["1s"]}
    for pair in pairs:
        name, _, listed = pair.partition("=")
        axes[name] = listed.split(",")
    triggers = axes.pop("trigger")
    names = sorted(axes)
    settings = []
    for combo in itertools.product(*(axes[n] for n in names), triggers):
        *values, trigger = combo
        settings.append(Setting(tuple(zip(names, values, strict=True)), trigger))
    return settings


def _listed(texts: Sequence[str]) -> list[Setting]:
    """Settings given one by one: "client=lean max_batch=20000 trigger=1s"."""
    settings = []
    for text in texts:
        pairs = dict(pair.partition("=")[::2] for pair in text.split())
        trigger = pairs.pop("trigger", "1s")
        settings.append(Setting(tuple(sorted(pairs.items())), trigger))
    return settings


def _jvm() -> int:
    """Spark's JVM: this process's java child."""
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    text = stat.read()
            except OSError:
                continue
            parent = int(text.rpartition(")")[2].split()[1])
            if parent == me and text[text.index("(") + 1 : text.rindex(")")] == "java":
                return int(entry)
    raise RuntimeError("no Spark JVM under this process")


def _runner(jvm: int) -> int | None:
    """The query's source runner: the Python process under the JVM that holds the leases."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as raw:
                    command = raw.read()
            except OSError:
                continue
            if b"python_streaming_source_runner" in command:
                return int(entry)
    return None


def _own_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu(endpoint: Server, jvm: int) -> dict[str, float]:
    """CPU seconds so far: serve-sqs, the JVM alone, and its Python descendants."""
    own = _own_cpu(jvm)
    return {"serve-sqs": cpu_s(endpoint.process.pid), "jvm": own, "python": cpu_s(jvm) - own}


def _fill(endpoint: Server, url: str, messages: int, pad: str) -> None:
    """Pre-load the queue over four connections at once (not timed)."""
    from concurrent.futures import ThreadPoolExecutor

    def part(first: int) -> None:
        sqs = Sqs(endpoint.port)
        try:
            count = min(_FILL_PART, messages - first)
            sqs.fill(url, count, lambda n: BODY.format(n=first + n, u=n % 1000, pad=pad))
        finally:
            sqs.close()

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(part, range(0, messages, _FILL_PART)))


_FILL_PART = 5_000


def _one_round(spark: Any, endpoint: Server, setting: Setting, messages: int, work: Path) -> Round:
    from functools import partial

    from worker.integrations.spark import read_leased_queue

    url = endpoint.sqs.call("GetQueueUrl", QueueName=QUEUE)["QueueUrl"]
    pad = "x" * 20
    _fill(endpoint, url, messages, pad)
    out, checkpoint = work / "out", work / "checkpoint"
    options = dict(setting.options)
    client = options.pop("client", "botocore")
    if client not in SQS_CLIENTS:
        raise ValueError(f"client={client!r}: choose from {', '.join(SQS_CLIENTS)}")
    connect = partial(open_sqs, endpoint.url, cast(SqsClientKind, client))
    jvm = _jvm()
    before_cpu = _cpu(endpoint, jvm)
    before_calls = endpoint.requests()
    frame = read_leased_queue(spark, connect, QUEUE, **options)
    writer = frame.writeStream.format("parquet").option("path", str(out))
    writer = writer.option("checkpointLocation", str(checkpoint))
    if setting.trigger != "default":
        writer = writer.trigger(processingTime=_interval(setting.trigger))
    start = time.monotonic()
    query = writer.start()
    try:
        while endpoint.sqs.left(url) != (0, 0):
            if query.exception() is not None:
                raise RuntimeError(f"query failed: {query.exception()}")
            time.sleep(0.02)
        seconds = time.monotonic() - start
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
        batches = len(progress)
        runner = _runner(jvm)
        runner_cpu = 0.0 if runner is None else cpu_s(runner)
        if os.environ.get("BENCH_SPARK_PROGRESS"):
            for p in progress:
                print("   ", p["numInputRows"], p["durationMs"])
    finally:
        query.stop()
    after_calls = endpoint.requests()
    after_cpu = _cpu(endpoint, jvm)
    written = spark.read.parquet(str(out))
    rows = written.count()
    distinct = written.select("message_id").distinct().count()
    shutil.rmtree(work)
    return Round(
        seconds=seconds,
        rows=rows,
        distinct=distinct,
        cpu={k: after_cpu[k] - before_cpu[k] for k in after_cpu} | {"runner": runner_cpu},
        calls={
            k: after_calls[k] - before_calls[k] for k in after_calls if k != "GetQueueAttributes"
        },
        batches=batches,
    )


def _interval(text: str) -> str:
    """'1s', '500ms', '0s' as Spark's interval text."""
    if text.endswith("ms"):
        return f"{int(text[:-2])} milliseconds"
    return f"{int(float(text.rstrip('s')) * 1000)} milliseconds"


def _session() -> Any:
    from worker.integrations.spark import spark_session

    session = spark_session(
        master="local[2]",
        app_name="bench-spark-source",
        config={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"},
    )
    session.sparkContext.setLogLevel("OFF")  # a stop mid-batch logs its interruption
    return session


def run(settings: Sequence[Setting], messages: int, rounds: int) -> list[Result]:
    results = [Result(s, messages=messages) for s in settings]
    spark = _session()
    with server() as endpoint, _workdir() as root:
        endpoint.sqs.call("CreateQueue", QueueName=QUEUE, Attributes={"VisibilityTimeout": "30"})
        # One untimed round warms the JVM, the Python workers and the endpoint.
        _one_round(spark, endpoint, settings[0], min(messages, 2000), root / "warm")
        for i in range(rounds):
            for n, result in enumerate(results):  # interleaved: drift hits every setting
                done = _one_round(spark, endpoint, result.setting, messages, root / f"{i}-{n}")
                if done.distinct != messages:
                    raise RuntimeError(f"{result.setting.label()}: {done.distinct} of {messages}")
                result.rounds.append(done)
                print(f"  round {i + 1} {result.setting.label()}: {messages / done.seconds:,.0f}/s")
    return results


@contextmanager
def _workdir() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _table(results: Sequence[Result]) -> str:
    lines = [
        "| setting | msgs/s (median) | rounds | s | CPU ms/msg | CPU-bound ceiling "
        "| CPU s serve-sqs / JVM / Python (runner) | receive, delete, extend calls "
        "| batches | duplicates |",
        "| --- | ---: | --- | ---: | ---: | ---: | --- | --- | ---: | ---: |",
    ]
    for result in results:
        mid = sorted(result.rounds, key=lambda r: r.seconds)[len(result.rounds) // 2]
        rates = ", ".join(f"{result.messages / r.seconds:,.0f}" for r in result.rounds)
        cpu = " / ".join(f"{mid.cpu[k]:.1f}" for k in ("serve-sqs", "jvm", "python"))
        cpu += f" ({mid.cpu['runner']:.1f})"
        calls = ", ".join(
            str(mid.calls.get(k, 0))
            for k in ("ReceiveMessage", "DeleteMessageBatch", "ChangeMessageVisibilityBatch")
        )
        lines.append(
            f"| {result.setting.label()} | {result.rate():,.0f} | {rates} | {mid.seconds:.2f} "
            f"| {mid.cpu_ms(result.messages):.3f} | {mid.ceiling(result.messages):,.0f} "
            f"| {cpu} | {calls} | {mid.batches} | {mid.rows - mid.distinct} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--grid",
        nargs="*",
        default=[],
        help="axes as NAME=V1,V2 (a source option, client, or trigger; 'default' for none)",
    )
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        help='one setting, e.g. "client=lean max_batch=20000 trigger=1s" (repeatable; '
        "instead of --grid)",
    )
    parser.add_argument(
        "--out",
        default=str(SPARK_FIGURES),
        help=f"write the best setting's figure here as JSON (default: {SPARK_FIGURES}; "
        "'' for none)",
    )
    args = parser.parse_args(argv)
    settings = _listed(args.setting) if args.setting else _grid(args.grid)
    results = run(settings, args.messages, args.rounds)
    print(_table(results))
    best = max(results, key=Result.rate)
    print(f"best: {best.setting.label()}: {best.rate():,.0f} messages/s")
    if args.out:
        # For bench/goals.py's table (docs/benchmarks.md): the median rate of the best setting.
        setting = f"{best.setting.label()}, {args.messages:,} messages"
        figures = {"rate": round(best.rate(), 1), "setting": setting}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(figures) + "\n")


if __name__ == "__main__":
    main()
