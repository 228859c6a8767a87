"""A rate limit shared through Redis by three worker processes (issue 31, Must show 1).

    python -m bench.flow_rate [--messages 3000 --workers 3 --per-s 50]

A `lease-worker serve-sqs` and a redis-server (both started here, on loopback); one queue
filled with `--messages` messages; `--workers` processes of `lease-worker run
bench.apps.flow_app:app --rate-limit PER_S --rate-limit-shared redis://...` (no-op
handler) drain it. Measured: the overall rate (messages after the first burst, over the
time from the first to the last handled), the slowest and fastest 10 s window, each
worker's share, and the Redis calls (INFO commandstats: every command, grants, script loads and
handshakes alike) per 10
messages handled. Goals: 50 +- 2.5 messages/s overall, at most 1 call per 10 messages.
Exits 1 when a goal is missed.

    python -m bench.flow_rate --restart [--workers 3 --per-s 50 --down-s 3 --after-s 10]

Redis restarted under a fleet failing open (`--rate-limit-outage open`; the queue holds
enough for the whole run, `--messages` is not used): after `--warmup-s` on the shared
limit, the redis-server is stopped (SHUTDOWN SAVE) for `--down-s`, while the processes go
on alone (up to `--workers` x `--per-s`), and started again on the same port; "listening
again" is when it first answers PING. Measured from outside, on the handled messages' wall
times: the messages of each second before, during and after, and the seconds from
listening again to the fleet being back at the shared limit (from then on, no 1 s window
holds more than the limit's own most, `per_s` + a burst), and the messages handled after
it beyond what the shared limit allows. Goals: at most one grant's worth of time (`grant` /
`per_s`: 0.2 s at 50 a second), what each process's last local grant may still take to be
used, and at most one grant a process over the limit. Exits 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import tempfile
import time
from pathlib import Path

from bench import _flow, _harness
from bench.idempotency_outage import RedisServer

QUEUE = "flow-rate"


#: What the workers' clients send; TIME, GET and SET are counted too, but run inside the script.
_CLIENT_COMMANDS = ("evalsha", "eval", "script|load", "hello", "ping", "client|setinfo")


async def _commands(url: str) -> dict[str, tuple[int, int]]:
    """Each command's (calls, failed or rejected calls), from INFO commandstats."""
    from redis.asyncio import Redis

    redis = Redis.from_url(url)
    try:
        stats = await redis.info("commandstats")
    finally:
        await redis.aclose()
    return {
        name.removeprefix("cmdstat_"): (
            int(value.get("calls", 0)),
            int(value.get("failed_calls", 0)) + int(value.get("rejected_calls", 0)),
        )
        for name, value in stats.items()
        if name.startswith("cmdstat_") and name != "cmdstat_info"
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.flow_rate", description=__doc__)
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--per-s", type=float, default=50.0)
    parser.add_argument("--restart", action="store_true", help="restart Redis, failing open")
    parser.add_argument("--warmup-s", type=float, default=5.0)
    parser.add_argument("--down-s", type=float, default=3.0)
    parser.add_argument("--after-s", type=float, default=10.0)
    args = parser.parse_args(argv)
    if args.restart:
        return restart(args)
    redis = RedisServer(Path(tempfile.mkdtemp(prefix="flow-rate-redis-")))
    redis.start()
    try:
        with _harness.server() as server:
            url = _flow.create_queue(server, QUEUE)
            server.sqs.fill(url, args.messages, lambda i: f'{{"n": {i}}}')
            options = ["--rate-limit", str(args.per_s), "--rate-limit-shared", redis.url]
            began = time.time()
            with _flow.workers(server, QUEUE, args.workers, options) as outs:
                rows = _flow.wait_for(outs, args.messages, args.messages / args.per_s * 2 + 30)
                calls = asyncio.run(_commands(redis.url))
                shares = [len(_flow.read_handled([out])) for out in outs]
    finally:
        redis.stop(save=False)
    return report(args, rows, calls, shares, began)


def report(
    args: argparse.Namespace,
    rows: list[_flow.Handled],
    commands: dict[str, tuple[int, int]],
    shares: list[int],
    began: float,
) -> int:
    handled = len(rows)
    first, last = rows[0].at, rows[-1].at
    burst = min(10, math.ceil(args.per_s))  # RateLimit.burst_for: also the grant's size
    rate = (handled - burst) / (last - first)
    windows = []
    start = first
    while start + 10 <= last:
        windows.append(sum(start <= row.at < start + 10 for row in rows) / 10)
        start += 10
    grant_calls = sum(commands.get(name, (0, 0))[0] for name in ("evalsha", "eval"))
    refused = sum(commands.get(name, (0, 0))[1] for name in ("evalsha", "eval"))
    granted = (grant_calls - refused) * burst
    round_trips = sum(commands.get(name, (0, 0))[0] for name in _CLIENT_COMMANDS)
    per_granted = grant_calls / granted * 10
    rate_ok = abs(rate - args.per_s) <= args.per_s * 0.05
    calls_ok = per_granted <= 1.0 + 1 / args.workers / 10  # a NOSCRIPT retry per worker at most
    print(f"{args.workers} workers sharing {args.per_s:g} messages/s through Redis\n")
    print("| figure | measured | goal |")
    print("|---|---:|---|")
    print(f"| messages handled | {handled} | {args.messages} |")
    print(f"| first to last handled, s | {last - first:.2f} | |")
    print(f"| overall rate, messages/s | {rate:.2f} | {args.per_s:g} +- {args.per_s * 0.05:g} |")
    if windows:
        print(f"| 10 s windows, slowest / fastest | {min(windows):.1f} / {max(windows):.1f} | |")
    print(f"| handled per worker | {' / '.join(map(str, shares))} | |")
    print(f"| grant calls (EVALSHA, EVAL) / refused (NOSCRIPT) | {grant_calls} / {refused} | |")
    print(f"| messages granted ({burst} a grant) | {granted} | |")
    print(f"| grant calls per 10 messages granted | {per_granted:.3f} | <= 1 |")
    print(f"| grant calls per 10 messages handled | {grant_calls / handled * 10:.3f} | |")
    print(f"| all round trips (with HELLO, SCRIPT LOAD, PING) | {round_trips} | |")
    print(f"| round trips per 10 messages handled | {round_trips / handled * 10:.3f} | |")
    print(f"| start-up to first handled, s | {first - began:.2f} | |")
    ok = handled >= args.messages and rate_ok and calls_ok
    print(f"\ngoals {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


# -- --restart: back to the shared limit after Redis restarts, failing open ------------------


def restart(args: argparse.Namespace) -> int:
    redis = RedisServer(Path(tempfile.mkdtemp(prefix="flow-rate-redis-")))
    redis.start()
    # Enough for the whole run at the fleet's local rate (every process alone at per_s).
    span_s = args.warmup_s + args.down_s + args.after_s
    messages = math.ceil(args.per_s * args.workers * span_s * 1.2) + 100
    try:
        with _harness.server() as server:
            url = _flow.create_queue(server, QUEUE)
            server.sqs.fill(url, messages, lambda i: f'{{"n": {i}}}')
            options = ["--rate-limit", str(args.per_s), "--rate-limit-shared", redis.url]
            options += ["--rate-limit-outage", "open"]
            with _flow.workers(server, QUEUE, args.workers, options) as outs:
                time.sleep(args.warmup_s)
                redis.stop(save=True)
                down = time.time()
                time.sleep(args.down_s)
                redis.start()  # returns once it answers PING
                listening = time.time()
                time.sleep(args.after_s)
                rows = _flow.read_handled(outs)
    finally:
        redis.stop(save=False)
    return restart_report(args, [row.at for row in rows], down, listening)


def back_at(times: list[float], since: float, most: float) -> float:
    """The first time from `since` on after which no 1 s window [t, t + 1) starting at a
    handled message holds more than `most` messages. `most` is the limit's own (a burst on
    top of a second's worth), so up to a burst over the limit reads as within it: the time
    can read early by a burst over the rate in excess (0.1 s for 10 at 150 instead of 50 a
    second); `over_after` counts what went over."""
    back = since
    end = 0
    for start, at in enumerate(times):
        end = max(end, start)
        while end < len(times) and times[end] < at + 1.0:
            end += 1
        if at >= since and end - start > most:
            back = times[start + 1] if start + 1 < len(times) else at
    return back


def over_after(times: list[float], since: float, span_s: float, per_s: float, burst: int) -> int:
    """Messages handled in the `span_s` from `since` beyond what the shared limit allows in
    that time (a burst, then `per_s`): what the processes' own limits still granted."""
    handled = sum(since <= at < since + span_s for at in times)
    return max(0, handled - math.floor(burst + per_s * span_s))


def restart_report(
    args: argparse.Namespace, times: list[float], down: float, listening: float
) -> int:
    burst = min(10, math.ceil(args.per_s))  # RateLimit.burst_for; the grant is 10 at most
    grant_s = burst / args.per_s
    # Windows that end before the outage (up to 1 s before it) cannot hold local messages.
    back = back_at(times, down - 1.0, args.per_s + burst) - listening
    # Up to half a second before the end: the last lines may not be written yet.
    over = over_after(times, listening, args.after_s - 0.5, args.per_s, burst)
    ok = back <= grant_s and over <= args.workers * burst
    print(
        f"{args.workers} workers sharing {args.per_s:g} messages/s through Redis, failing open;"
        f" Redis down {listening - down:.2f} s\n"
    )
    _per_second(times, -math.ceil(listening - down) - 2, math.floor(args.after_s), listening)
    print("\n| figure | measured | goal |")
    print("|---|---:|---|")
    alone = sum(down + 0.5 <= at < listening for at in times) / max(listening - down - 0.5, 1e-9)
    print(f"| messages/s while Redis was down | {alone:.1f} | {args.workers} x {args.per_s:g} |")
    after = [at for at in times if listening + 1.0 <= at < listening + args.after_s]
    settled = len(after) / max(args.after_s - 1.0, 1e-9)
    print(f"| messages/s from 1 s after listening again | {settled:.1f} | {args.per_s:g} |")
    print(f"| listening again to back at the shared limit, s | {back:.3f} | <= {grant_s:g} |")
    print(
        f"| messages over the shared limit after listening again | {over} |"
        f" <= {args.workers * burst} (a grant a process) |"
    )
    print(f"\ngoals {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


def _per_second(times: list[float], first: int, last: int, origin: float) -> None:
    print("| seconds from listening again | messages handled |")
    print("|---|---:|")
    for second in range(first, last):
        start = origin + second
        count = sum(start <= at < start + 1 for at in times)
        print(f"| {second:+d} to {second + 1:+d} | {count} |")


if __name__ == "__main__":
    sys.exit(main())
