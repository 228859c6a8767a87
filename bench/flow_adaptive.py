"""The adaptive concurrency limit against a downstream that serves 20 at once (issue 31,
Must show 3).

    python -m bench.flow_adaptive [--messages 3000 --serves 20 --fails 40 --service-s 0.1]

Each run: a fresh `lease-worker serve-sqs`, one queue filled with `--messages`, one worker
process (`lease-worker run bench.apps.flow_app:app --max-in-flight 100`) whose handler calls
a downstream that serves `--serves` requests at once in `--service-s` each, queues the rest
(so it slows beyond that), and refuses a request that arrives while `--fails` or more are
inside (the handler then fails, and its message comes back later). With
`--adaptive-concurrency`, then without. Measured: the limit
(`lease_worker_flow_concurrency_limit`, read from the worker's /metrics every 0.25 s) over
the second half of the run, the requests inside the downstream as each handler began
(median, p90), the handler error ratio, and the drain rate. Goals (adaptive run): the
limit's median over the second half within 20-30 and the error ratio under 1%.
Exits 1 when missed.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field

from bench import _flow, _harness

QUEUE = "flow-adaptive"
_LIMIT = re.compile(rb'^lease_worker_flow_concurrency_limit\{queue="[^"]+"\} ([0-9.e+]+)$', re.M)


@dataclass
class Result:
    rows: list[_flow.Handled]
    limits: list[tuple[float, float]] = field(default_factory=list)


def _sample(port: int, into: list[tuple[float, float]], stop: threading.Event) -> None:
    sqs = _harness.Sqs(port)
    try:
        while not stop.wait(0.25):
            try:
                status, raw = sqs.get("/metrics")
            except OSError:
                continue
            found = _LIMIT.search(raw) if status == 200 else None
            if found:
                into.append((time.time(), float(found.group(1))))
    finally:
        sqs.close()


def one(adaptive: bool, args: argparse.Namespace) -> Result:
    port = _harness.free_port()
    options = ["--max-in-flight", "100", "--ops-port", str(port)]
    if adaptive:
        options.append("--adaptive-concurrency")
    env = {"FLOW_DOWNSTREAM": f"{args.serves},{args.fails},{args.service_s}"}
    limits: list[tuple[float, float]] = []
    stop = threading.Event()
    with _harness.server() as server:
        url = _flow.create_queue(server, QUEUE)
        server.sqs.fill(url, args.messages, lambda i: f'{{"n": {i}}}')
        with _flow.workers(server, QUEUE, 1, options, env) as outs:
            sampler = threading.Thread(target=_sample, args=(port, limits, stop), daemon=True)
            sampler.start()
            rows = _flow.wait_for(outs, args.messages, 300)
            stop.set()
            sampler.join(2)
    return Result(rows, limits)


def _line(name: str, result: Result) -> tuple[str, bool]:
    rows = result.rows
    ok_rows = [row for row in rows if row.ok]
    first, last = rows[0].at, rows[-1].at
    middle = first + (last - first) / 2
    late = [value for at, value in result.limits if at >= middle]
    inside = [row.inside for row in ok_rows if row.at >= middle]
    errors = len(rows) - len(ok_rows)
    ratio = errors / len(rows)
    limit = (
        f"{statistics.median(late):.0f} ({min(late):.0f}-{max(late):.0f})" if late else "- (100)"
    )
    inside_text = (
        f"{statistics.median(inside):.0f} / {statistics.quantiles(inside, n=10)[-1]:.0f}"
        if len(inside) > 1
        else "-"
    )
    rate = len(ok_rows) / (last - first)
    print(
        f"| {name} | {limit} | {inside_text} | {len(rows)} | {errors} | {ratio:.2%} | {rate:.0f} |"
    )
    met = bool(late) and 20 <= statistics.median(late) <= 30 and ratio < 0.01
    return limit, met


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.flow_adaptive", description=__doc__)
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--serves", type=int, default=20)
    parser.add_argument("--fails", type=int, default=40)
    parser.add_argument("--service-s", type=float, default=0.1)
    args = parser.parse_args(argv)
    adaptive, fixed = one(True, args), one(False, args)
    print(
        f"a downstream serving {args.serves} at once in {args.service_s:g} s, queueing beyond, "
        f"refusing at {args.fails} inside; {args.messages} messages, max_in_flight 100\n"
    )
    print(
        "| run | limit, 2nd half: median (range) | inside downstream: median / p90 | "
        "handler runs | errors | error ratio | handled/s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    _, ok = _line("adaptive concurrency", adaptive)
    _line("fixed max_in_flight 100", fixed)
    print(f"\ngoal (limit 20-30, errors < 1%) {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
