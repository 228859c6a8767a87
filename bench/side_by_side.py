"""Side by side over the SQS protocol: lease-worker and its peers against the embedded endpoint.

Every contender drains the same queue of N small messages with a no-op handler, in turn, each
against a fresh `lease-worker serve-sqs` process (loopback, dummy credentials). The queue is
filled before the contender starts (not measured). The clock runs from the first receive to
the moment the queue is empty (visible + in flight = 0), both seen by polling
GetQueueAttributes (every 5 ms before the start, every 50 ms during the run, every 5 ms once
the contender says "done"); CPU is read from /proc (utime + stime of the contender's whole
process tree, and of the server) at those same two moments, so start-up is not counted.
Requests per operation come from the endpoint's `GET /_stats`, less the harness's own polls.
At full size the contenders take turns three times; each row shows its fastest round (the
least disturbed by anything else on the machine) with the median of the rounds and every
round's msgs/s in brackets.

"lease-worker" is `lease-worker run` with no flags: the default configuration, whatever SQS
client and event loop the code defaults to when the run starts; the rows named after a
client or a loop pass it as a flag (one that names the default is not run again). The
floor is a serial drain over raw HTTP/1.1 signed by botocore's SigV4Auth
(bench/apps/raw_floor.py); the bare aiobotocore loop and the libraries are peers.

Every contender may hold the same number of messages at once (10, one SQS batch; dramatiq's
defaults hold up to 10 per process), with leases or heartbeats on where the library has
them and its documented throughput settings; the list under the table gives them all.
Celery drains fewer messages (its settings say how many). bench/peers/setup.sh installs the
peers (run from here when they are missing).
"""

from __future__ import annotations

import base64
import json
import math
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench._harness import QUEUE, Process, Sqs, Via, cpu_s, server, started
from bench.peers import contenders as peers
from bench.peers.contenders import Contender

# -- one contender --------------------------------------------------------------------------


class Failed(Exception):
    """A contender that could not be measured; the message says why."""


@dataclass(frozen=True, slots=True)
class Sample:
    at: float
    worker_cpu_s: float
    server_cpu_s: float
    hop_cpu_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Row:
    contender: Contender
    version: str
    messages: int
    wall_s: float = 0.0
    worker_cpu_s: float = 0.0
    server_cpu_s: float = 0.0
    #: CPU of the hop the contender went through (bench/network.py's proxy), if any.
    hop_cpu_s: float = 0.0
    requests: Counter[str] = field(default_factory=Counter)
    failure: str | None = None
    #: msgs/s of every round, in order (the row's own figures are its fastest round's).
    rates: tuple[float, ...] = ()
    #: Worker CPU seconds per message of every round, in the same order.
    cpus: tuple[float, ...] = ()

    @property
    def rate(self) -> float:
        return self.messages / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def requests_per_message(self) -> float:
        return sum(self.requests.values()) / self.messages

    @property
    def median_rate(self) -> float:
        """The median of the rounds' msgs/s (the fastest round's when there is one)."""
        return statistics.median(self.rates) if self.rates else self.rate

    @property
    def cpu_per_message(self) -> float:
        """Worker CPU seconds per message in the fastest round."""
        return self.worker_cpu_s / self.messages if self.messages else 0.0

    @property
    def median_cpu_per_message(self) -> float:
        return statistics.median(self.cpus) if self.cpus else self.cpu_per_message


def _plain_body(index: int) -> str:
    return json.dumps({"n": index})


def _dramatiq_body(index: int) -> str:
    """What dramatiq-sqs's `enqueue` sends for `noop.send()`: base64 of dramatiq's JSON."""
    message = {
        "queue_name": QUEUE,
        "actor_name": "noop",
        "args": [],
        "kwargs": {},
        "options": {},
        "message_id": str(uuid.UUID(int=index)),
        "message_timestamp": int(time.time() * 1000),
    }
    return base64.b64encode(json.dumps(message, separators=(",", ":")).encode()).decode()


#: Celery's task message for `noop()` as kombu's SQS transport writes it (protocol 2, the
#: JSON envelope base64-encoded); "ID" is each message's task id.
_CELERY_MESSAGE = {
    # base64 of '[[], {}, {"callbacks": null, "errbacks": null, "chain": null, "chord": null}]'
    "body": "W1tdLCB7fSwgeyJjYWxsYmFja3MiOiBudWxsLCAiZXJyYmFja3MiOiBudWxsLCAiY2hhaW4iOiBudWxsLCAi"
    "Y2hvcmQiOiBudWxsfV0=",
    "content-encoding": "utf-8",
    "content-type": "application/json",
    "headers": {
        **{"lang": "py", "task": "noop", "id": "ID", "shadow": None, "eta": None},
        **{"expires": None, "group": None, "group_index": None, "retries": 0},
        **{"timelimit": [None, None], "root_id": "ID", "parent_id": None, "argsrepr": "()"},
        **{"kwargsrepr": "{}", "origin": "bench", "ignore_result": True},
        **{"replaced_task_nesting": 0, "stamped_headers": None, "stamps": {}},
    },
    "properties": {
        **{"correlation_id": "ID", "reply_to": "bench", "delivery_mode": 2, "priority": 0},
        "delivery_info": {"exchange": "", "routing_key": QUEUE},
        **{"body_encoding": "base64", "delivery_tag": "bench"},
    },
}
_CELERY_TEMPLATE = json.dumps(_CELERY_MESSAGE)


def _celery_body(index: int) -> str:
    text = _CELERY_TEMPLATE.replace('"ID"', json.dumps(str(uuid.UUID(int=index))))
    return base64.b64encode(text.encode()).decode()


_BODIES: dict[str, Callable[[int], str]] = {
    "plain": _plain_body,
    "dramatiq": _dramatiq_body,
    "celery": _celery_body,
}


def _watch(
    sqs: Sqs, url: str, messages: int, process: Process, server_pid: int, hop_pid: int | None
) -> list[Sample]:
    """The first and last samples: when the first receive shows, when the queue is empty."""

    def sample(now: float) -> Sample:
        hop = cpu_s(hop_pid) if hop_pid is not None else 0.0
        return Sample(now, cpu_s(process.pid), cpu_s(server_pid), hop)

    limit_s = 30 + messages / 200
    deadline = time.monotonic() + limit_s
    samples: list[Sample] = []
    before: Sample | None = None  # the last poll that saw the queue untouched
    while True:
        code = process.exited()
        visible, in_flight = sqs.left(url)
        now = time.perf_counter()
        if not samples and (visible < messages or in_flight):
            # A drain done between two polls (a fast contender on a loaded machine) started
            # after the poll before: counted from there, not as a drain of no time at all.
            drained = visible + in_flight == 0
            samples.append(before if drained and before is not None else sample(now))
        elif not samples:
            before = sample(now)
        if samples and visible + in_flight == 0:
            samples.append(sample(now))
            return samples
        if code is not None:
            raise Failed(f"exited with status {code}: {process.stderr_tail() or 'no output'}")
        if time.monotonic() > deadline:
            left = visible + in_flight
            raise Failed(f"did not drain in {limit_s:.0f} s ({left:,} of {messages:,} left)")
        if not samples or process.done.is_set():
            time.sleep(0.005)
        else:
            process.done.wait(0.05)


def measure(
    contender: Contender,
    messages: int,
    *,
    version: str = "",
    on_start: Callable[[Process], None] | None = None,
    via: Via | None = None,
) -> Row:
    """One drain by `contender` (of `messages`, or of its `max_messages` if fewer);
    `on_start(process)` once it has started (for a profiler); through `via`'s hop when given
    (the harness's own calls go to the endpoint directly)."""
    messages = min(messages, contender.max_messages or messages)
    with server() as endpoint, via(endpoint.url) if via else nullcontext() as hop:
        target = hop.url if hop is not None else endpoint.url
        sqs = endpoint.sqs
        attributes = {"VisibilityTimeout": "30"}
        url = str(sqs.call("CreateQueue", QueueName=QUEUE, Attributes=attributes)["QueueUrl"])
        sqs.fill(url, messages, _BODIES[contender.body])
        before = endpoint.requests()
        sqs.calls.clear()
        env = {
            "BENCH_ENDPOINT": target,
            "BENCH_QUEUE": QUEUE,
            "BENCH_QUEUE_URL": url,
            "BENCH_MESSAGES": str(messages),
            **contender.env,
        }
        command = [arg.replace("{endpoint}", target) for arg in contender.command]
        with started(command, env=env, cwd=contender.cwd) as process:
            if on_start is not None:
                on_start(process)
            hop_pid = hop.pid if hop is not None else None
            first, last = _watch(sqs, url, messages, process, endpoint.process.pid, hop_pid)
            requests = endpoint.requests() - before - sqs.calls
    return Row(
        contender,
        version,
        messages,
        wall_s=last.at - first.at,
        worker_cpu_s=last.worker_cpu_s - first.worker_cpu_s,
        server_cpu_s=last.server_cpu_s - first.server_cpu_s,
        hop_cpu_s=last.hop_cpu_s - first.hop_cpu_s,
        requests=requests,
    )


def attempt(
    contender: Contender,
    messages: int,
    on_start: Callable[[Process], None] | None = None,
    via: Via | None = None,
) -> Row | str:
    """`measure`, or why the contender could not be measured."""
    reason = peers.missing(contender)
    if reason is not None:
        return reason
    try:
        return measure(contender, messages, on_start=on_start, via=via)
    except (Failed, RuntimeError, OSError, ValueError, KeyError) as error:
        return str(error) or type(error).__name__


def run(
    messages: int, rounds: int = 1, *, smoke: bool = False, only: tuple[str, ...] = ()
) -> list[Row]:
    """Install the peers if need be, then measure every contender, `rounds` times in turn.

    Each row is the contender's fastest round (the one least disturbed by whatever else the
    machine was doing), with every round's rate in `rates`. A contender that fails once is
    reported as failed and not run again. `smoke`: only the contenders marked for smoke runs;
    `only`: only the contenders of these names (for tuning).
    """
    trouble = peers.install()
    if trouble:
        print(f"side_by_side: PEERS NOT (ALL) INSTALLED: {trouble}", file=sys.stderr)
    versions = peers.versions()
    # A named configuration that is what no flags mean is the default's row already.
    everyone = [c for c in peers.contenders() if (c.smoke or not smoke) and not c.same_as_default]
    if only:
        everyone = [c for c in everyone if c.name in only]
    measured: dict[str, list[Row]] = {c.name: [] for c in everyone}
    failures: dict[str, str] = {}
    for round_ in range(1, rounds + 1):
        for contender in everyone:
            if contender.name in failures:
                continue
            got = attempt(contender, messages)
            if isinstance(got, str):
                failures[contender.name] = got
                print(f"side_by_side: {contender.name} NOT MEASURED: {got}", file=sys.stderr)
                continue
            measured[contender.name].append(got)
            print(
                f"side_by_side: round {round_}/{rounds}: {contender.name}: {got.rate:,.0f} msgs/s",
                file=sys.stderr,
            )
    rows: list[Row] = []
    for contender in everyone:
        version = versions.get(contender.name, "?")
        if contender.name in failures:
            rows.append(Row(contender, version, messages, failure=failures[contender.name]))
            continue
        tries = measured[contender.name]
        best = max(tries, key=lambda row: row.rate)
        rows.append(
            replace(
                best,
                version=version,
                rates=tuple(r.rate for r in tries),
                cpus=tuple(r.cpu_per_message for r in tries),
            )
        )
    return rows


# -- the report -----------------------------------------------------------------------------


def _operations(requests: Counter[str]) -> str:
    return ", ".join(f"{op} {count:,}" for op, count in requests.most_common())


def table(rows: list[Row]) -> list[str]:
    lines = [
        "| contender | version | msgs/s, best (median; each round) | worker CPU ms/msg, best "
        "(median) | server CPU ms/msg | requests/msg | requests by operation |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in rows:
        name = row.contender.name
        if row.failure is not None:
            reason = row.failure.replace("|", "/")
            lines.append(f"| {name} | {row.version} | | | | | **not measured**: {reason} |")
            continue
        if row.contender.same_as_default:
            lines.append(f"| {name} | {row.version} | | | | | the default's row (no flags) |")
            continue
        each = " / ".join(f"{rate:,.0f}" for rate in row.rates)
        lines.append(
            f"| {name} | {row.version} | **{row.rate:,.0f}** ({row.median_rate:,.0f}; {each}) | "
            f"{1000 * row.cpu_per_message:.3f} ({1000 * row.median_cpu_per_message:.3f}) | "
            f"{1000 * row.server_cpu_s / row.messages:.3f} | "
            f"{row.requests_per_message:.3f} | {_operations(row.requests)} |"
        )
    return lines


#: Issue 33's goals for the default configuration against the fastest peer: msgs/s at
#: least GOAL times, CPU per message at least CPU_GOAL times less; and client CPU per
#: message at most FLOOR_GOAL times the floor's.
GOAL = 1.5
CPU_GOAL = 2.0
FLOOR_GOAL = 2.0


def _ours(row: Row) -> bool:
    return row.contender.name.startswith("lease-worker")


def _measured(row: Row) -> bool:
    return row.failure is None and row.rate > 0 and not row.contender.same_as_default


def _cpu(row: Row) -> float:
    return row.worker_cpu_s / row.messages


def ratio(a: float, b: float) -> float:
    """a / b, NaN when b is not positive (a CPU time too small for /proc's 10 ms clock to
    read, at smoke sizes): the table then says nan and no goal is met, rather than the
    report failing."""
    return a / b if b > 0 else math.nan


def references(rows: list[Row]) -> list[Row]:
    """The fastest one-process peer (by msgs/s) and the floor, those that were measured."""
    peers_ = [r for r in rows if not _ours(r) and _measured(r)]
    fastest = [
        max(
            (r for r in peers_ if not r.contender.is_floor and r.contender.processes == 1),
            key=lambda r: r.rate,
            default=None,
        )
    ]
    floor = [r for r in peers_ if r.contender.is_floor]
    return [r for r in (*fastest, *floor) if r is not None]


def ratios(rows: list[Row]) -> list[str]:
    """lease-worker's rows against the fastest peer and the floor: msgs/s and CPU per
    message, each as a ratio where above 1 means lease-worker does better."""
    against = references(rows)
    if not against or not any(_ours(r) and _measured(r) for r in rows):
        return ["(no ratios: lease-worker or every peer went unmeasured)"]
    head = " | ".join(
        f"msgs/s ÷ {r.contender.name} | {r.contender.name}'s CPU/msg ÷ ours" for r in against
    )
    lines = [f"| lease-worker | {head} |", "| --- |" + " ---: |" * (2 * len(against))]
    for row in rows:
        if not _ours(row) or row.contender.same_as_default:
            continue
        if not _measured(row):
            lines.append(f"| {row.contender.name} |" + " |" * (2 * len(against)))
            continue
        cells = " | ".join(
            f"**{row.rate / ref.rate:.2f}** | **{ratio(_cpu(ref), _cpu(row)):.2f}**"
            for ref in against
        )
        lines.append(f"| {row.contender.name} | {cells} |")
    return [
        *lines,
        "",
        f"Goals (issue 33), for the default: ≥ {GOAL}x the fastest peer's msgs/s and ≥ "
        f"{CPU_GOAL}x less CPU per message, and ≥ {1 / FLOOR_GOAL} against the floor's CPU per "
        "message (at most twice the floor's). Ratios are of each side's fastest round. Rows "
        "with 2 or more processes use more cores than the one-process peers: read their CPU "
        "per message, not their msgs/s, against a one-process peer.",
    ]


def summary(rows: list[Row]) -> str:
    missing = [row.contender.name for row in rows if row.failure is not None]
    if not any(_ours(r) and _measured(r) for r in rows):
        return "lease-worker itself was not measured, so there are no ratios."
    return f"**Not measured: {', '.join(missing)}.**" if missing else ""


def plot(rows: list[Row], path: Path) -> None:
    def panel(axes: Any, values: list[float], labels: list[str], title: str) -> None:
        names = [row.contender.name for row in shown]
        colors = ["tab:orange" if _ours(row) else "tab:blue" for row in shown]
        bars = axes.barh(names, values, color=colors)
        axes.bar_label(bars, labels, padding=3, fontsize=7)
        axes.margins(x=0.2)
        axes.set_title(title, fontsize=9)
        axes.tick_params(labelsize=7)

    shown = list(reversed(rows))
    rates = [row.rate for row in shown]
    cpu = [1e3 * _cpu(row) if _measured(row) else 0.0 for row in shown]
    figure, (left, right) = _pyplot().subplots(
        1, 2, figsize=(9.6, 0.3 * len(rows) + 1.4), dpi=100, sharey=True
    )
    panel(left, rates, [_label(r, f"{r.rate:,.0f}") for r in shown], "messages per second")
    panel(
        right, cpu, [_label(r, f"{1e3 * _cpu(r):.3f}") for r in shown], "worker CPU ms per message"
    )
    figure.suptitle(f"Draining {rows[0].messages:,} messages over SQS's protocol", fontsize=10)
    figure.tight_layout()
    figure.savefig(path)
    _pyplot().close(figure)


def _label(row: Row, text: str) -> str:
    return text if _measured(row) else "not measured"


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    return pyplot


def rounds_for(messages: int) -> int:
    """3 rounds at full size, 1 at smoke size (under 5,000 messages)."""
    return 3 if messages >= 5_000 else 1


def section(rows: list[Row], images: Path) -> list[str]:
    """The section's markdown; the chart goes to `images`/side_by_side.png."""
    plot(rows, images / "side_by_side.png")
    settings = [f"- {row.contender.name}: {row.contender.settings}" for row in rows]
    said = summary(rows)
    return [
        _body(__doc__),
        "",
        *table(rows),
        "",
        *([said, ""] if said else []),
        "Ratios, measured side by side in this run (above 1: lease-worker does better):",
        "",
        *ratios(rows),
        "",
        f"![side by side]({images.name}/side_by_side.png)",
        "",
        "Settings (the handler is a no-op everywhere; a budget of "
        f"{peers.CONCURRENCY} messages held at once):",
        "",
        *settings,
    ]


def report(
    messages: int, images: Path, rounds: int | None = None, only: tuple[str, ...] = ()
) -> list[str]:
    return section(run(messages, rounds or rounds_for(messages), only=only), images)


def _body(docstring: str | None) -> str:
    return (docstring or "").strip().partition("\n")[2].strip()


def main() -> None:
    """`python -m bench.side_by_side [--messages N] [--rounds R] [--images DIR]`: this section
    alone, printed as markdown (`python -m bench.report` runs it with the rest)."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--images", type=Path, default=Path(tempfile.gettempdir()) / "bench")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="run only the contender of this name, as the table gives it (repeatable)",
    )
    args = parser.parse_args()
    args.images.mkdir(parents=True, exist_ok=True)
    print("\n".join(report(args.messages, args.images, args.rounds, tuple(args.only))))


if __name__ == "__main__":
    main()
