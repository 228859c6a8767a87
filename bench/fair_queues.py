"""Issue 30, Must show 3: on a fair queue, a noisy tenant sending 10x the others leaves the
quiet tenants' dwell time about where it was without it.

lease-worker runs for real on the in-memory engine under looptime (virtual time: the
figures are seconds of the engine's clock, the same on any machine). Its `max_in_flight`
handlers each take 0.25-0.75 s (uniform, drawn per message from a fixed seed). Tenants send
in bursts every `--period` seconds, as the AWS sample for fair queues does
(aws-samples/sample-amazon-sqs-fair-queues: one noisy group and nine quiet ones per burst):
nine quiet tenants `--quiet` messages each, and in two of the runs a noisy tenant ten times
as many. Dwell time is SQS's: from a message's send to its receive (its handler's start).

Three runs on the same schedule:
- alone: the quiet tenants only;
- fair: with the noisy tenant, every message carrying its tenant as MessageGroupId, so the
  engine's fair queue (`backends.memory.fairness`) prefers quiet tenants while it is noisy;
- unfair: with the noisy tenant, no MessageGroupId (a standard queue before fair queues).
The goal: the quiet tenants' median dwell in `fair` within 2x of `alone`; `unfair` shows
what the fair queue saves them. Each run ends once every message sent has been handled.

What the ratio depends on: a fair queue reorders the backlog, it does not take slots back.
With the noisy tenant every slot is busy, so a quiet message waits for the next handler to
finish (about handler time / slots, continuously); alone, a burst first finds idle slots.
`--sweep` runs bursts of other sizes at the same load: the smaller the quiet tenants' bursts
are against the slots, the nearer to zero their dwell alone, and the larger the ratio.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from dataclasses import dataclass, replace

import anyio

from backends.memory import MemoryBackend
from bench._common import run_async, run_until_handled
from worker import Message, Worker, WorkerConfig
from worker.cli.logging import configure_logging
from worker.types import OutgoingMessage, QueueSpec

QUEUE = "tenants"
QUIET = tuple(f"quiet-{n}" for n in range(1, 10))
NOISY = "noisy"
#: Issue 30's goal: quiet tenants' median dwell with a noisy neighbour at most this many
#: times their median dwell alone.
GOAL = 2.0


@dataclass(frozen=True, slots=True)
class Setup:
    slots: int = 200
    quiet: int = 50
    noisy_factor: int = 10
    bursts: int = 15
    period_s: float = 2.0
    seed: int = 30


@dataclass(frozen=True, slots=True)
class Run:
    name: str
    #: Dwell times (s) of the quiet tenants' messages, and of the noisy tenant's.
    quiet: list[float]
    noisy: list[float]
    #: Virtual seconds from the first burst until the last message was handled.
    took_s: float

    def median(self, which: str = "quiet") -> float:
        values = self.quiet if which == "quiet" else self.noisy
        return statistics.median(values) if values else float("nan")

    def p90(self) -> float:
        return statistics.quantiles(self.quiet, n=10)[-1]


def schedule(setup: Setup, *, noisy: bool) -> list[list[tuple[str, float]]]:
    """Per burst, its messages in send order: (tenant, handler duration)."""
    rng = random.Random(setup.seed)
    bursts = []
    for _ in range(setup.bursts):
        tenants = [t for t in QUIET for _ in range(setup.quiet)]
        extra = [NOISY] * (setup.quiet * setup.noisy_factor)
        rng.shuffle(tenants)
        # The noisy tenant's share is drawn too (and dropped when alone), so that the quiet
        # tenants' messages keep their durations from one run to the next.
        mixed = tenants + extra
        durations = [rng.uniform(0.25, 0.75) for _ in mixed]
        burst = list(zip(mixed, durations, strict=True))
        if noisy:
            rng.shuffle(burst)
        else:
            burst = [m for m in burst if m[0] != NOISY]
        bursts.append(burst)
    return bursts


async def _run(setup: Setup, name: str, bursts: list[list[tuple[str, float]]]) -> Run:
    grouped = name != "unfair"
    backend = MemoryBackend()
    engine = backend.engine
    await backend.create_queue(QueueSpec(QUEUE))
    dwell: dict[str, list[float]] = {"quiet": [], "noisy": []}
    app = Worker(WorkerConfig(max_in_flight=setup.slots, wait_s=20))

    @app.handler(QUEUE)
    async def work(message: Message) -> None:
        tenant, sent_at, duration = json.loads(message.raw_body)
        kind = "noisy" if tenant == NOISY else "quiet"
        dwell[kind].append(engine.clock.now() - sent_at)
        await anyio.sleep(duration)

    async def produce() -> None:
        start = engine.clock.now()
        for number, burst in enumerate(bursts):
            await anyio.sleep(start + number * setup.period_s - engine.clock.now())
            now = engine.clock.now()
            for first in range(0, len(burst), 10):
                entries = [
                    OutgoingMessage(
                        entry_id=str(i),
                        body=json.dumps([tenant, now, duration]),
                        group_id=tenant if grouped else None,
                    )
                    for i, (tenant, duration) in enumerate(burst[first : first + 10])
                ]
                assert not engine.send(QUEUE, entries).failed

    started = engine.clock.now()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(produce)
        await run_until_handled(app, backend, sum(map(len, bursts)))
    return Run(name, dwell["quiet"], dwell["noisy"], engine.clock.now() - started)


def run(setup: Setup) -> list[Run]:
    return [
        run_async(_run, setup, name, schedule(setup, noisy=name != "alone"), virtual_time=True)
        for name in ("alone", "fair", "unfair")
    ]


def sweep(setup: Setup) -> list[str]:
    """The three runs for quiet bursts of other sizes, the period scaled to the same load."""
    lines = [
        "| quiet burst ÷ slots | alone median (s) | fair median (s) | **fair ÷ alone** | "
        "unfair median (s) | unfair ÷ alone |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for quiet in (35, 50, 70, 100):
        scaled = replace(setup, quiet=quiet, period_s=setup.period_s * quiet / setup.quiet)
        alone, fair, unfair = (r.median() for r in run(scaled))
        lines.append(
            f"| {len(QUIET) * quiet / setup.slots:.2f} | {alone:.3f} | {fair:.3f} | "
            f"**{_ratio(fair, alone)}** | {unfair:.3f} | {_ratio(unfair, alone)} |"
        )
    return lines


def _ratio(value: float, alone: float) -> str:
    return f"{value / alone:.2f}" if alone > 0 else "∞ (alone: 0)"


def table(setup: Setup, runs: list[Run]) -> list[str]:
    alone = runs[0].median()
    per_burst = len(QUIET) * setup.quiet
    lines = [
        f"{setup.slots} handlers of 0.25-0.75 s; a burst every {setup.period_s:g} s "
        f"({setup.bursts} bursts): {len(QUIET)} quiet tenants x {setup.quiet} messages "
        f"({per_burst}), the noisy tenant {setup.noisy_factor}x as many each "
        f"({setup.quiet * setup.noisy_factor})",
        "",
        "| run | quiet tenants' median dwell (s) | p90 (s) | ÷ alone | noisy tenant's median "
        "dwell (s) | all handled after (s) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in runs:
        lines.append(
            f"| {r.name} | {r.median():.3f} | {r.p90():.3f} | **{r.median() / alone:.2f}** | "
            f"{r.median('noisy'):.3f} | {r.took_s:.1f} |"
        )
    fair = runs[1].median() / alone
    verdict = "met" if fair <= GOAL else "NOT met"
    lines += ["", f"goal: fair ÷ alone ≤ {GOAL:g}: {fair:.2f}, {verdict}"]
    return lines


def main() -> None:
    configure_logging(level="error")  # not the warning that the queue has no DLQ
    parser = argparse.ArgumentParser(description=__doc__)
    defaults = Setup()
    parser.add_argument("--slots", type=int, default=defaults.slots, help="max_in_flight")
    parser.add_argument("--quiet", type=int, default=defaults.quiet, help="per tenant a burst")
    parser.add_argument("--noisy-factor", type=int, default=defaults.noisy_factor)
    parser.add_argument("--bursts", type=int, default=defaults.bursts)
    parser.add_argument("--period", type=float, default=defaults.period_s, help="seconds")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--sweep", action="store_true", help="and bursts of other sizes")
    args = parser.parse_args()
    setup = Setup(args.slots, args.quiet, args.noisy_factor, args.bursts, args.period, args.seed)
    print("\n".join(table(setup, run(setup))))
    if args.sweep:
        print("\n" + "\n".join(sweep(setup)))


if __name__ == "__main__":
    main()
