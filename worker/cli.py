"""The `lease-worker` command (also `python -m worker`).

`lease-worker run APP` runs a worker; `lease-worker serve-sqs` serves the in-memory engine
over SQS's JSON protocol (`backends.sqs_endpoint`) until SIGTERM/SIGINT, then exits 0.

Settings of `run` come from the command line, else from `LEASE_WORKER_*` environment variables, else
from the application's own `WorkerConfig`. Invalid settings end the process with status 2
and one line saying which setting and why; a fatal queue-service error with status 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

import anyio
import structlog
from prometheus_client import start_http_server

from worker.app import Worker, WorkerContext
from worker.backend import Backend
from worker.config import LeaseConfig, ShutdownConfig, WorkerConfig
from worker.errors import ConfigError, FatalBackendError, QueueNotFound
from worker.logging import configure_logging
from worker.metrics import Metrics
from worker.supervisor import Supervisor

__all__ = ["build_parser", "load_app", "main"]

_ENV = "LEASE_WORKER_"


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(_ENV + name, default)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lease-worker",
        description="Run queue handlers whose leases extend themselves.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="run a worker application until SIGTERM/SIGINT",
        description="Run APP (module:attribute naming a lease-worker Worker) until SIGTERM or "
        "SIGINT; a second signal cuts the drain short. Each option can also be set in the "
        "environment as LEASE_WORKER_<OPTION>, e.g. LEASE_WORKER_BACKEND=sqs or "
        "LEASE_WORKER_MAX_IN_FLIGHT=50. Lease and flow options default to the app's "
        "WorkerConfig.",
    )
    run.add_argument("app", metavar="APP", help="the worker, e.g. examples.hello:app")
    where = run.add_argument_group("queue service")
    where.add_argument(
        "--backend",
        choices=["memory", "sqs"],
        default=_env("BACKEND", "memory"),
        help="memory: the embedded in-memory engine (default); sqs: Amazon SQS",
    )
    where.add_argument(
        "--region",
        default=_env("REGION"),
        help="AWS region (default: the AWS chain, e.g. AWS_REGION)",
    )
    where.add_argument(
        "--endpoint-url",
        default=_env("ENDPOINT_URL"),
        metavar="URL",
        help="another SQS endpoint (moto, LocalStack, a VPC endpoint)",
    )
    where.add_argument(
        "--queue-url",
        action="append",
        default=_env_list("QUEUE_URL"),
        metavar="NAME=URL",
        help="use URL for the handler of queue NAME; repeatable (env: comma-separated)",
    )
    leases = run.add_argument_group("leases")
    leases.add_argument(
        "--visibility-s",
        type=int,
        default=_env("VISIBILITY_S"),
        metavar="S",
        help="visibility asked for at receive",
    )
    leases.add_argument(
        "--extension-s",
        type=int,
        default=_env("EXTENSION_S"),
        metavar="S",
        help="visibility set by each renewal",
    )
    leases.add_argument(
        "--renew-margin-s",
        type=float,
        default=_env("RENEW_MARGIN_S"),
        metavar="S",
        help="renew this long before the deadline",
    )
    leases.add_argument(
        "--max-lease-s",
        type=float,
        default=_env("MAX_LEASE_S"),
        metavar="S",
        help="cancel a handler this long after its receive (at most 43200)",
    )
    leases.add_argument(
        "--adaptive",
        action="store_true",
        default=_env("ADAPTIVE") == "1",
        help="pick the extension from the p99 of handler durations",
    )
    flow = run.add_argument_group("flow and shutdown")
    flow.add_argument(
        "--max-in-flight",
        type=int,
        default=_env("MAX_IN_FLIGHT"),
        metavar="N",
        help="messages held at once per queue",
    )
    flow.add_argument(
        "--receive-concurrency",
        type=int,
        default=_env("RECEIVE_CONCURRENCY"),
        metavar="N",
        help="long polls under way at once per queue (for thousands of msgs/s)",
    )
    flow.add_argument(
        "--processes",
        type=int,
        default=_env("PROCESSES", "1"),
        metavar="N",
        help="run N worker processes under this one (default 1: this process is the worker)",
    )
    flow.add_argument(
        "--grace-s",
        type=float,
        default=_env("GRACE_S"),
        metavar="S",
        help="drain time after SIGTERM before unfinished messages are released",
    )
    ops = run.add_argument_group("operations")
    ops.add_argument(
        "--metrics-port",
        type=int,
        default=_env("METRICS_PORT"),
        metavar="PORT",
        help="serve Prometheus metrics on this port (default: off)",
    )
    ops.add_argument(
        "--metrics-addr",
        default=_env("METRICS_ADDR", "0.0.0.0"),
        metavar="ADDR",
        help="address for the metrics server (default: 0.0.0.0)",
    )
    ops.add_argument(
        "--log-format",
        choices=["console", "json"],
        default=_env("LOG_FORMAT", "json"),
        help="log lines (default: json)",
    )
    ops.add_argument(
        "--log-level",
        default=_env("LOG_LEVEL", "info"),
        choices=["debug", "info", "warning", "error"],
        help="(default: info)",
    )
    _add_serve_sqs_parser(commands)
    return parser


def _add_serve_sqs_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser(
        "serve-sqs",
        help="serve the in-memory engine over SQS's JSON protocol until SIGTERM/SIGINT",
        description="Serve the in-memory SQS engine over SQS's JSON protocol, for any SQS "
        "client (boto3, aiobotocore, the AWS SDKs) at --endpoint-url http://HOST:PORT. "
        "Requests are not authenticated: keep it on loopback unless the network is yours.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=9324, help="port to bind (default: 9324)")
    serve.add_argument(
        "--max-in-flight",
        type=int,
        default=120_000,
        metavar="N",
        help="in-flight messages allowed per queue (default: 120000, as SQS)",
    )
    serve.add_argument(
        "--queue",
        action="append",
        default=[],
        metavar="NAME",
        help="create this queue at start (a .fifo name makes a FIFO queue); repeatable",
    )
    serve.add_argument(
        "--log-format",
        choices=["console", "json"],
        default=_env("LOG_FORMAT", "json"),
        help="log lines (default: json)",
    )
    serve.add_argument(
        "--log-level",
        default=_env("LOG_LEVEL", "info"),
        choices=["debug", "info", "warning", "error"],
        help="(default: info)",
    )


def _check_env_choices(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    # argparse checks choices on the command line only, not on defaults from the environment.
    allowed = {
        "backend": ("memory", "sqs"),
        "log_format": ("console", "json"),
        "log_level": ("debug", "info", "warning", "error"),
    }
    for name, choices in allowed.items():
        value = getattr(args, name, None)
        if value is not None and value not in choices:
            parser.error(f"{_ENV}{name.upper()}={value!r}: choose from {', '.join(choices)}")


def _env_list(name: str) -> list[str]:
    value = _env(name)
    return [item for item in (value or "").split(",") if item]


def load_app(spec: str) -> Worker:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"APP={spec!r}: expected module:attribute, e.g. examples.hello:app")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise ConfigError(f"APP={spec!r}: cannot import {error.name!r}") from None
    app = getattr(module, attribute, None)
    if not isinstance(app, Worker):
        raise ConfigError(
            f"APP={spec!r}: {attribute!r} in {module_name} is not a lease-worker Worker"
        )
    return app


def _configure(app: Worker, args: argparse.Namespace) -> WorkerConfig:
    lease_changes = {
        name: getattr(args, name)
        for name in ("visibility_s", "extension_s", "renew_margin_s", "max_lease_s")
        if getattr(args, name) is not None
    }
    if args.adaptive:
        lease_changes["adaptive"] = True
    config = app.config
    lease: LeaseConfig = dataclasses.replace(config.lease, **_typed(lease_changes))
    shutdown: ShutdownConfig = config.shutdown
    if args.grace_s is not None:
        shutdown = dataclasses.replace(shutdown, grace_s=float(args.grace_s))
    changes: dict[str, Any] = {"lease": lease, "shutdown": shutdown}
    if args.max_in_flight is not None:
        changes["max_in_flight"] = int(args.max_in_flight)
    if args.receive_concurrency is not None:
        changes["receive_concurrency"] = int(args.receive_concurrency)
    return dataclasses.replace(config, **changes)


def _typed(changes: dict[str, Any]) -> dict[str, Any]:
    # Values from the environment arrive as strings; argparse converts only its own.
    ints = {"visibility_s", "extension_s"}
    try:
        return {
            k: (int(v) if k in ints else float(v) if k != "adaptive" else v)
            for k, v in changes.items()
        }
    except ValueError as error:
        raise ConfigError(f"lease setting: {error}") from None


def _queue_urls(items: Sequence[str]) -> dict[str, str]:
    urls: dict[str, str] = {}
    for item in items:
        name, sep, url = item.partition("=")
        if not sep or not name or not url:
            raise ConfigError(f"--queue-url {item!r}: expected NAME=URL")
        urls[name] = url
    return urls


async def _open_backend(args: argparse.Namespace) -> Backend:
    if args.backend == "memory":
        from backends.memory import MemoryBackend

        return MemoryBackend()
    from backends.sqs import SqsBackend, SqsSettings

    settings = SqsSettings(
        region=args.region, endpoint_url=args.endpoint_url, queue_urls=_queue_urls(args.queue_url)
    )
    return await SqsBackend.connect(settings)


async def _create_missing_queues(app: Worker, context: WorkerContext) -> None:
    """For the embedded engine, which starts empty: make every registered queue."""
    from backends.memory import MemoryBackend

    backend = context.backend
    assert isinstance(backend, MemoryBackend)
    for queue in app.registry.queues:
        try:
            await backend.queue_info(queue)
        except QueueNotFound:
            await backend.create_queue(queue, visibility_timeout_s=app.config.lease.visibility_s)


async def _serve(app: Worker, args: argparse.Namespace, metrics: Metrics) -> None:
    backend = await _open_backend(args)
    if args.backend == "memory":
        app.startup_hooks.append(lambda context: _create_missing_queues(app, context))
    supervisor = Supervisor(app, backend, metrics=metrics)
    fatal: FatalBackendError | None = None
    try:
        await supervisor.prepare()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_watch_signals, supervisor)
            try:
                await supervisor.run()
            except FatalBackendError as error:  # raised after a clean shutdown
                fatal = error
            tasks.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await backend.aclose()
    if fatal is not None:
        raise fatal


async def _watch_signals(supervisor: Supervisor) -> None:
    log = structlog.get_logger("lease_worker.cli")
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("signal.received", signal=signal.Signals(signum).name)
            supervisor.request_shutdown()


def _serve_metrics(metrics: Metrics, port: int, addr: str) -> None:
    if not 0 <= port <= 65_535:
        raise ConfigError(f"--metrics-port={port}: must be a port number from 0 to 65535")
    try:
        start_http_server(port, addr, registry=metrics.registry)
    except OSError as error:
        reason = f"cannot serve metrics on {addr}: {error}"
        raise ConfigError(f"--metrics-port={port}: {reason}") from None


def _serve_sqs_main(args: argparse.Namespace) -> int:
    try:
        configure_logging(fmt=args.log_format, level=args.log_level)
        if args.max_in_flight < 1:
            raise ConfigError(f"--max-in-flight={args.max_in_flight}: must be >= 1")
        if not 0 <= args.port <= 65_535:
            raise ConfigError(f"--port={args.port}: must be a port number from 0 to 65535")
        anyio.run(_run_sqs_endpoint, args)
    except (ConfigError, ValueError) as error:
        print(f"lease-worker: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(
            f"lease-worker: error: cannot serve on {args.host}:{args.port}: {error}",
            file=sys.stderr,
        )
        return 1
    return 0


async def _run_sqs_endpoint(args: argparse.Namespace) -> None:
    from backends.memory import MemoryEngine
    from backends.sqs_endpoint import serve_sqs
    from worker.clock import LoopClock

    engine = MemoryEngine(LoopClock(), max_in_flight=args.max_in_flight)
    for name in args.queue:
        try:
            engine.create_queue(name)
        except FatalBackendError as error:
            raise ConfigError(f"--queue {name!r}: {error}") from None
    log = structlog.get_logger("lease_worker.cli")
    serve = functools.partial(serve_sqs, engine, host=args.host, port=args.port)
    async with anyio.create_task_group() as tasks:
        # Listening before the server starts: a signal right after start-up is not lost.
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            url = await tasks.start(serve)
            log.info("sqs_endpoint.started", url=url, queues=len(args.queue))
            async for signum in signals:
                log.info("signal.received", signal=signal.Signals(signum).name)
                break
        tasks.cancel_scope.cancel()
    log.info("sqs_endpoint.stopped")


def _run_processes(argv: list[str], args: argparse.Namespace) -> int:
    if not 1 <= args.processes <= 256:
        raise ConfigError(f"--processes={args.processes}: must be from 1 to 256")
    load_app(args.app)  # a bad APP is one clear error here, not N crashing children
    port = int(args.metrics_port) if args.metrics_port is not None else None
    if port is not None and not 0 < port <= 65_535 - args.processes:
        raise ConfigError(
            f"--metrics-port={port}: ports {port}..{port + args.processes - 1} must be valid"
        )
    from worker.processes import run_processes

    return run_processes(argv, args.processes, port)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_env_choices(parser, args)
    if args.command == "serve-sqs":
        return _serve_sqs_main(args)
    try:
        configure_logging(fmt=args.log_format, level=args.log_level)
        if args.processes != 1:
            return _run_processes(list(argv if argv is not None else sys.argv[1:]), args)
        app = load_app(args.app)
        app.config = _configure(app, args)
        metrics = Metrics()
        if args.metrics_port is not None:
            _serve_metrics(metrics, int(args.metrics_port), args.metrics_addr)
        anyio.run(_serve, app, args, metrics)
    except (ConfigError, ValueError) as error:
        print(f"lease-worker: error: {error}", file=sys.stderr)
        return 2
    except FatalBackendError as error:
        print(f"lease-worker: error: {error}", file=sys.stderr)
        return 1
    return 0
