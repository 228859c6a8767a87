"""SMQ renewal cost: the client choice and the runtime's rounds, at N leases (default 1,000),
against a `lease-worker serve-smq` process on loopback (its CPU is not counted).

1. Client: one renewal round, N ChangeMessageVisibility calls (SMQ has no batch), through
   (a) `SmqBackend`, the async client on aiohttp (one process, one thread, 64 connections),
   and (b) the official SDK `aliyun-mns-sdk` (synchronous, not thread-safe), one `Account`
   per worker thread in a pool of 8 and of 32. Reported: calls/s and the client process's
   CPU per call (utime + stime), the best of `--rounds` rounds.
2. Runtime: N handlers held for 7 s against a 4 s visibility and a 2 s margin on
   `SmqBackend`: calls per renewal round (must be N: one lease a call), leases lapsed (must
   be 0) and the worker process's CPU per extension call.

    python -m bench.smq_renewals [-n 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import anyio

from backends.smq import SmqBackend, SmqSettings
from worker import LeaseConfig, Message, Worker, WorkerConfig
from worker.cli.logging import configure_logging
from worker.testing import run_worker
from worker.types import OutgoingMessage, VisibilityChange

KEY = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "bench", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "bench"}


@contextmanager
def serve_smq(queues: list[str]) -> Iterator[str]:
    args = [sys.executable, "-m", "worker", "serve-smq", "--port", "0", "--log-format", "json"]
    for queue in queues:
        args += ["--queue", queue]
    env = {**os.environ, **KEY}
    proc = subprocess.Popen(args, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        url = next(json.loads(x)["url"] for x in proc.stderr if "smq_endpoint.started" in x)
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _backend(url: str) -> SmqBackend:
    return SmqBackend(SmqSettings(endpoint=url, access_key_id="bench", access_key_secret="bench"))


async def _hold(url: str, queue: str, count: int) -> list[str]:
    """Send `count` messages and receive them all (visibility 600 s); their handles."""
    backend = _backend(url)
    try:
        for start in range(0, count, 16):
            batch = [
                OutgoingMessage(body="{}", entry_id=str(i)) for i in range(min(16, count - start))
            ]
            await backend.send(queue, batch)
        handles: list[str] = []
        while len(handles) < count:
            got = await backend.receive(queue, max_messages=16, wait_s=1)
            handles += [m.receipt_handle for m in got]
        result = await backend.extend(
            queue, [VisibilityChange(str(i), h, 600) for i, h in enumerate(handles)]
        )
        return [result.new_handles[str(i)] for i in range(len(handles))]
    finally:
        await backend.aclose()


def _timed(round_: Callable[[], Any]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    round_()
    return time.perf_counter() - wall, time.process_time() - cpu


def client_async(url: str, queue: str, handles: list[str]) -> tuple[float, float]:
    async def round_() -> None:
        backend = _backend(url)
        try:
            changes = [VisibilityChange(str(i), h, 600) for i, h in enumerate(handles)]
            result = await backend.extend(queue, changes)
            assert len(result.succeeded) == len(handles), result.failed[:1]
            handles[:] = [result.new_handles[str(i)] for i in range(len(handles))]
        finally:
            await backend.aclose()

    return _timed(lambda: anyio.run(round_))


def client_sdk(url: str, queue: str, handles: list[str], threads: int) -> tuple[float, float]:
    # Optional (the dev extra): the SDK is here for comparison only.
    account: Any = importlib.import_module("mns.account")

    local = threading.local()

    def change(handle: str) -> str:
        if not hasattr(local, "queue"):
            local.queue = account.Account(url, "bench", "bench").get_queue(queue)
        return str(local.queue.change_message_visibility(handle, 600).receipt_handle)

    def round_() -> None:
        with ThreadPoolExecutor(threads) as pool:
            handles[:] = list(pool.map(change, handles))

    return _timed(round_)


async def _runtime(url: str, count: int) -> dict[str, Any]:
    lease = LeaseConfig(visibility_s=4, extension_s=4, renew_margin_s=2, coalesce_window_s=0.5)
    app = Worker(WorkerConfig(lease=lease, max_in_flight=count, wait_s=1))

    @app.handler("runtime")
    async def slow(message: Message) -> None:
        await anyio.sleep(7)

    backend = _backend(url)
    for start in range(0, count, 16):
        batch = [OutgoingMessage(body="{}", entry_id=str(i)) for i in range(min(16, count - start))]
        await backend.send("runtime", batch)
    calls: list[float] = []
    extend = backend.extend

    async def counted(queue: str, entries: Any) -> Any:
        calls.append(time.monotonic())
        return await extend(queue, entries)

    backend.extend = counted  # type: ignore[method-assign]
    cpu = time.process_time()
    try:
        async with run_worker(app, backend=backend) as harness:
            with anyio.fail_after(120):
                await harness.wait_for_handled(count)
            lapsed = harness.metrics.value(
                "lease_worker_leases_lost_total", queue="runtime", reason="lapsed"
            )
        cpu = time.process_time() - cpu
    finally:
        await backend.aclose()
    rounds: list[int] = []
    last = -1.0
    for at in calls:
        if at - last > 1.0:
            rounds.append(0)
        rounds[-1] += 1
        last = at
    return {
        "leases": count,
        "calls_per_round": rounds,
        "lapsed": lapsed,
        "cpu_per_call_ms": 1000 * cpu / max(1, len(calls)),
        "cpu_s": cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    configure_logging(fmt="console", level="warning")
    count = args.n
    with serve_smq(["clients", "runtime"]) as url:
        handles = anyio.run(_hold, url, "clients", count)
        rows: dict[str, list[tuple[float, float]]] = {}
        contenders: dict[str, Callable[[], tuple[float, float]]] = {
            "aiohttp (SmqBackend)": lambda: client_async(url, "clients", handles),
            "SDK, 8 threads": lambda: client_sdk(url, "clients", handles, 8),
            "SDK, 32 threads": lambda: client_sdk(url, "clients", handles, 32),
        }
        for _ in range(args.rounds):
            for name, contender in contenders.items():
                rows.setdefault(name, []).append(contender())
        for name, timings in rows.items():
            wall, cpu = min(timings)
            print(
                json.dumps(
                    {
                        "client": name,
                        "calls": count,
                        "calls_per_s": round(count / wall),
                        "cpu_per_call_ms": round(1000 * cpu / count, 3),
                        "rounds_calls_per_s": [round(count / w) for w, _ in timings],
                    }
                )
            )
        print(json.dumps(anyio.run(_runtime, url, count)))


if __name__ == "__main__":
    main()
