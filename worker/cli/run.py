"""`lease-worker run APP`: load the application, apply the options, run until signalled.

Settings come from the command line, else from `LEASE_WORKER_*` environment variables, else
from the application's own `WorkerConfig`.

Signals and exit status:
- the first SIGTERM or SIGINT starts the shutdown (`Supervisor.request_shutdown`), the
  second cuts it short; once one has come, later ones are ignored until the process has
  exited, so that a signal during the final teardown never turns exit 0 into 143 (or a
  KeyboardInterrupt);
- exit 0 after a shutdown; 1 with one line on standard error when the worker crashed (a
  background task or the runtime raised: what it held was released first, and the
  traceback is in the `worker.crashed` log line), when a queue-service error is fatal, or
  when start-up kept failing for a transient reason (`STARTUP_CALL_TIMEOUTS`);
- a handler that swallowed every cancellation is left behind at the end of the shutdown:
  the process then ends with `os._exit`, since the event loop's own exit would wait for it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import importlib.util
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Any

import anyio
import structlog

from backends import BACKENDS, ConnectOptions, connect
from backends.factory import DEFAULT_SQS_CLIENT, SQS_CLIENTS
from worker.app import Worker
from worker.backend import Backend
from worker.cli.loader import load_app
from worker.cli.logging import report_failure
from worker.cli.options import LOG_OPTIONS, Option, add_options
from worker.cli.processes import run_processes
from worker.cli.reach import Retry, interactive, reach
from worker.config import (
    AdaptiveConcurrency,
    FlowControl,
    LeaseConfig,
    RateLimit,
    ShutdownConfig,
    TenantCap,
    WorkerConfig,
)
from worker.errors import ConfigError, TransientBackendError, WorkerCrashed
from worker.ops import HealthPolicy, OpsListener
from worker.ops.host_names import HostNames
from worker.ops.limits import DEFAULT_MAX_CONNECTIONS, OpsLimits, connection_cap
from worker.runtime.garbage import DEFAULT_FIRST_THRESHOLD, collect_less
from worker.runtime.malloc import return_large_blocks
from worker.runtime.queues import create_missing_queues
from worker.runtime.supervisor import Supervisor

__all__ = ["OPTIONS", "add_parser", "open_backend", "run"]

_DESCRIPTION = (
    "Run APP (module:attribute naming a lease-worker Worker) until SIGTERM or SIGINT; a second "
    "signal cuts the drain short. Each option can also be set in the environment as "
    "LEASE_WORKER_<OPTION>, e.g. LEASE_WORKER_BACKEND=sqs or LEASE_WORKER_MAX_IN_FLIGHT=50. "
    "Lease and flow options default to the app's WorkerConfig."
)


def backend_option(default: str) -> Option:
    """`--backend`, defaulting to `default` (run: the embedded engine; dlq, peek: sqs)."""
    kinds = "; ".join(f"{kind.name}: {kind.description}" for kind in BACKENDS.values())
    return Option(
        "--backend", f"{kinds} (default: {default})", default=default, choices=tuple(BACKENDS)
    )


OPTIONS: dict[str, tuple[Option, ...]] = {
    "queue service": (
        backend_option("memory"),
        Option("--region", "AWS region (default: the AWS chain, e.g. AWS_REGION)"),
        Option(
            "--endpoint-url",
            "another SQS endpoint (moto, LocalStack, a VPC endpoint)",
            metavar="URL",
        ),
        Option(
            "--queue-url",
            "use URL for the handler of queue NAME; repeatable (env: comma-separated)",
            metavar="NAME=URL",
            action="append",
        ),
        Option(
            "--sqs-client",
            "how the SQS backend makes its hot calls (receive, delete, extend, send): "
            "botocore (plain aiobotocore) or lean (the same calls written, signed, sent and "
            "read directly, with botocore's credentials and retry rules) "
            f"(default: {DEFAULT_SQS_CLIENT})",
            choices=SQS_CLIENTS,
        ),
    ),
    "leases": (
        Option("--visibility-s", "visibility asked for at receive", int, "S"),
        Option("--extension-s", "visibility set by each renewal", int, "S"),
        Option("--renew-margin-s", "renew this long before the deadline", float, "S"),
        Option(
            "--max-lease-s",
            "cancel a handler this long after its receive (at most 43200)",
            float,
            "S",
        ),
        Option(
            "--adaptive",
            "pick the extension from the p99 of handler durations",
            action="store_true",
        ),
    ),
    "flow and shutdown": (
        Option("--max-in-flight", "messages held at once per queue", int, "N"),
        Option(
            "--receive-concurrency",
            "long polls under way at once per queue (for thousands of msgs/s)",
            int,
            "N",
        ),
        # Flow control (FlowControl, worker-wide): each option over the app's WorkerConfig.flow.
        Option(
            "--rate-limit",
            "start at most PER_S messages a second per queue; held back before the receive, "
            "never received to wait (per process, or shared with --rate-limit-shared)",
            float,
            "PER_S",
        ),
        Option(
            "--rate-limit-shared",
            "share the rate limit through Redis (redis://host:6379/0) with every process "
            "and pod that names it, one script call per 10 messages",
            metavar="URL",
        ),
        Option(
            "--rate-limit-outage",
            "while the shared limit's Redis cannot be reached: closed (receive nothing "
            "until it answers) or open (each process goes on at the full rate alone) "
            "(default: closed)",
            choices=("closed", "open"),
        ),
        Option(
            "--tenant-cap",
            "run at most N messages of one MessageGroupId at once per queue (standard "
            "queues); more wait in the worker, their leases renewed",
            int,
            "N",
        ),
        Option(
            "--tenant-hold",
            "with --tenant-cap: while N messages wait for their tenant's turn, the queue's "
            "receives pause (default: 1000)",
            int,
            "N",
        ),
        Option(
            "--max-bytes-in-flight",
            "receive no more while the messages held per queue take N bytes of memory "
            "(bodies, attributes, decoded payloads)",
            int,
            "N",
        ),
        Option(
            "--adaptive-concurrency",
            "find how many handlers run at once from their latency and errors, up to "
            "--max-in-flight",
            action="store_true",
        ),
        Option(
            "--processes",
            "run N worker processes under this one (default 1: this process is the worker)",
            int,
            "N",
            default="1",
        ),
        Option(
            "--grace-s",
            "drain time after SIGTERM before unfinished messages are released",
            float,
            "S",
        ),
    ),
    "operations": (
        Option(
            "--ops-port",
            "serve /metrics, /healthz and /readyz on this port (default: off; with "
            "--processes N, child i listens on PORT+i)",
            int,
            "PORT",
        ),
        Option(
            "--ops-addr",
            "address of the ops listener (default: 127.0.0.1; 0.0.0.0 in a pod)",
            metavar="ADDR",
            default="127.0.0.1",
        ),
        Option(
            "--ops-max-connections",
            "connections the ops listener serves at once; more wait in the kernel's backlog "
            f"(default: {DEFAULT_MAX_CONNECTIONS}, and never more than a quarter of the "
            "open-file limit, RLIMIT_NOFILE)",
            int,
            "N",
        ),
        Option(
            "--max-loop-lag-s",
            "/healthz fails while the event loop lags more than this (default: 5)",
            float,
            "S",
            default="5",
        ),
        Option(
            "--no-console",
            "serve only /metrics, /healthz and /readyz on the ops listener (no console)",
            action="store_true",
        ),
        Option(
            "--console-bodies",
            "show message bodies (cut to 2,000 characters) on the ops listener's console",
            action="store_true",
        ),
        Option(
            "--console-hosts",
            "host names and addresses the console answers to, comma-separated; any other "
            "Host gets 421 (default: localhost, 127.0.0.1, [::1], and --ops-addr unless "
            "0.0.0.0 or ::)",
            metavar="NAMES",
        ),
        Option(
            "--queue-sample-s",
            "read queue depths this often, with the ops listener on (default: 30)",
            float,
            "S",
            default="30",
        ),
        Option(
            "--loop",
            "the event loop: asyncio or uvloop (pip install 'lease-worker[fast]'); "
            "--processes children use it too (default: asyncio)",
            default="asyncio",
            choices=("asyncio", "uvloop"),
        ),
        Option(
            "--gc-threshold",
            "allocations between young garbage collections, after freezing what start-up "
            "made (0: leave Python's collector as it is; see worker.runtime.garbage) "
            f"(default: {DEFAULT_FIRST_THRESHOLD})",
            int,
            "N",
            default=str(DEFAULT_FIRST_THRESHOLD),
        ),
        *LOG_OPTIONS,
    ),
}


def add_parser(commands: Any) -> None:
    run_parser = commands.add_parser(
        "run", help="run a worker application until SIGTERM/SIGINT", description=_DESCRIPTION
    )
    run_parser.add_argument("app", metavar="APP", help="the worker, e.g. examples.hello:app")
    for title, options in OPTIONS.items():
        add_options(run_parser.add_argument_group(title), options)


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Run the worker (or `--processes` of them); raises ConfigError / FatalBackendError."""
    if args.gc_threshold < 0:
        raise ConfigError(f"--gc-threshold={args.gc_threshold}: must be >= 0")
    if args.processes != 1:
        return _run_processes(list(argv), args)
    app = load_app(args.app)
    app.config = _configure(app, args)
    _check_ops_options(args)
    try:
        anyio.run(_serve, app, args, backend_options=_loop_options(args.loop))
    except (WorkerCrashed, TransientBackendError) as error:
        report_failure(error)
        return 1
    return 0


def _loop_options(loop: str) -> dict[str, Any]:
    """anyio's asyncio backend options for `--loop`; ConfigError if uvloop is missing."""
    if loop != "uvloop":
        return {}
    if importlib.util.find_spec("uvloop") is None:
        raise ConfigError(
            "--loop uvloop: uvloop is not installed (pip install 'lease-worker[fast]')"
        )
    return {"use_uvloop": True}


def _configure(app: Worker, args: argparse.Namespace) -> WorkerConfig:
    lease_changes = {
        name: getattr(args, name)
        for name in ("visibility_s", "extension_s", "renew_margin_s", "max_lease_s")
        if getattr(args, name) is not None
    }
    if args.adaptive:
        lease_changes["adaptive"] = True
    config = app.config
    # Every value is typed already: argparse converts an environment value (a string
    # default) with the option's type too, and refuses a bad one with a usage error.
    lease: LeaseConfig = dataclasses.replace(config.lease, **lease_changes)
    shutdown: ShutdownConfig = config.shutdown
    if args.grace_s is not None:
        shutdown = dataclasses.replace(shutdown, grace_s=args.grace_s)
    changes: dict[str, Any] = {"lease": lease, "shutdown": shutdown}
    if args.max_in_flight is not None:
        changes["max_in_flight"] = args.max_in_flight
    if args.receive_concurrency is not None:
        changes["receive_concurrency"] = args.receive_concurrency
    changes["flow"] = _flow(config.flow, args)
    return dataclasses.replace(config, **changes)


def _flow(flow: FlowControl, args: argparse.Namespace) -> FlowControl:
    """The app's flow control with the flow options over it; ConfigError naming the option."""
    rate = flow.rate
    rate_changes = {
        name: value
        for name, value in (
            ("per_s", args.rate_limit),
            ("shared", args.rate_limit_shared),
            ("on_outage", args.rate_limit_outage),
        )
        if value is not None
    }
    with _named_options():
        if rate_changes:
            if rate is None and "per_s" not in rate_changes:
                flag = "--rate-limit-shared" if args.rate_limit_shared else "--rate-limit-outage"
                raise ConfigError(f"{flag} needs --rate-limit PER_S (no rate limit to change)")
            rate = (
                RateLimit(**rate_changes)
                if rate is None
                else dataclasses.replace(rate, **rate_changes)
            )
        tenants = flow.tenants
        if args.tenant_cap is not None:
            if tenants is None:
                tenants = TenantCap(per_tenant=args.tenant_cap)
            else:
                tenants = dataclasses.replace(tenants, per_tenant=args.tenant_cap)
        if args.tenant_hold is not None:
            if tenants is None:
                raise ConfigError("--tenant-hold needs --tenant-cap N (no tenant cap to change)")
            tenants = dataclasses.replace(tenants, hold=args.tenant_hold)
        max_bytes = flow.max_bytes
        if args.max_bytes_in_flight is not None:
            max_bytes = args.max_bytes_in_flight
        adaptive = flow.adaptive
        if args.adaptive_concurrency and adaptive is None:
            adaptive = AdaptiveConcurrency()
        return FlowControl(rate=rate, tenants=tenants, max_bytes=max_bytes, adaptive=adaptive)


#: The settings of the flow control's values, as the flow options name them.
_FLOW_FLAGS = {
    "per_s": "--rate-limit",
    "shared": "--rate-limit-shared",
    "on_outage": "--rate-limit-outage",
    "per_tenant": "--tenant-cap",
    "hold": "--tenant-hold",
    "max_bytes": "--max-bytes-in-flight",
}


@contextlib.contextmanager
def _named_options() -> Iterator[None]:
    """A ConfigError of a flow value names the option that set it (`--tenant-cap=0: ...`)."""
    try:
        yield
    except ConfigError as error:
        text = str(error)
        for setting, flag in _FLOW_FLAGS.items():
            if text.startswith(f"{setting}="):
                raise ConfigError(flag + text[len(setting) :]) from None
        raise


def _queue_urls(items: Sequence[str]) -> dict[str, str]:
    urls: dict[str, str] = {}
    for item in items:
        name, sep, url = item.partition("=")
        if not sep or not name or not url:
            raise ConfigError(f"--queue-url {item!r}: expected NAME=URL")
        urls[name] = url
    return urls


async def open_backend(args: argparse.Namespace, *, retry: Retry | None = None) -> Backend:
    """The backend the options name, once something listens at `--endpoint-url`
    (`worker.cli.reach`: without `retry`, the first refused connect is the error)."""
    options = ConnectOptions(
        region=args.region,
        endpoint_url=args.endpoint_url,
        queue_urls=_queue_urls(args.queue_url),
        sqs_client=getattr(args, "sqs_client", None),  # dlq and peek share run's options
    )
    backend = await connect(args.backend, options)
    try:
        await reach(args.endpoint_url, retry=retry)
    except BaseException:
        await backend.aclose()
        raise
    return backend


async def _serve(app: Worker, args: argparse.Namespace) -> None:
    # A person at a terminal hears of a refused connection at once; a pod retries.
    retry = None if interactive() else Retry.for_config(app.config)
    backend = await open_backend(args, retry=retry)
    if BACKENDS[args.backend].embedded:
        app.startup_hooks.append(lambda context: create_missing_queues(app, context.backend))
    ops = args.ops_port is not None
    try:
        supervisor = Supervisor(
            app, backend, sample_queues_every_s=args.queue_sample_s if ops else None
        )
    except BaseException:
        await backend.aclose()
        raise
    if args.gc_threshold:
        # Here, once nothing can refuse to start: a usage error changes no process state.
        collect_less(args.gc_threshold)
    if _counts_bytes(app):
        # max_bytes bounds what is held; glibc's moving mmap threshold would keep freed
        # large bodies in the process's memory all the same (worker.runtime.malloc).
        return_large_blocks()
    signals = _StopSignals(supervisor)
    try:
        async with _ops_listener(supervisor, args):
            await supervisor.run()
    finally:
        with anyio.move_on_after(app.config.call_timeout_s, shield=True):
            await backend.aclose()
        signals.close()
        if supervisor.handlers_running:
            _exit_now(sys.exc_info()[1])


def _counts_bytes(app: Worker) -> bool:
    """Some queue counts the bytes it holds (`FlowControl.max_bytes`)."""
    flows = [app.config.flow, *(spec.flow for spec in app.registry if spec.flow is not None)]
    return any(flow.max_bytes is not None for flow in flows)


class _StopSignals:
    """SIGTERM and SIGINT for the whole run, as plain signal handlers (not the event
    loop's, which the loop's own exit resets to the default: a signal in the final
    teardown would then kill the process with 143)."""

    def __init__(self, supervisor: Supervisor) -> None:
        self._supervisor = supervisor
        self._loop = asyncio.get_running_loop()
        self._log = structlog.get_logger("lease_worker.cli")
        self._received = False
        self._closed = False
        self._previous = {
            signum: signal.signal(signum, self._handle)
            for signum in (signal.SIGTERM, signal.SIGINT)
        }

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self._received = True
        if not self._closed:  # the loop may be closing: nothing to tell it any more
            self._loop.call_soon_threadsafe(self._on_signal, signum)

    def _on_signal(self, signum: int) -> None:
        self._log.info("signal.received", signal=signal.Signals(signum).name)
        self._supervisor.request_shutdown()

    def close(self) -> None:
        """The run is over. After a stop signal the process is on its way out: keep
        ignoring them. Otherwise (a crash, an error) put the previous handlers back."""
        self._closed = True
        if not self._received:
            for signum, previous in self._previous.items():
                signal.signal(signum, previous)


def _exit_now(error: BaseException | None) -> None:
    """End the process at once: a handler task that will not end would hold the loop's exit."""
    structlog.get_logger("lease_worker.cli").warning("worker.exit_with_handlers_running")
    status = 0
    if error is not None:
        report_failure(error)
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _check_ops_options(args: argparse.Namespace) -> None:
    if args.ops_port is not None and not 0 <= args.ops_port <= 65_535:
        raise ConfigError(f"--ops-port={args.ops_port}: must be a port number from 0 to 65535")
    if not args.max_loop_lag_s > 0:
        raise ConfigError(f"--max-loop-lag-s={args.max_loop_lag_s}: must be above 0")
    if not 1 <= args.queue_sample_s <= 3600:
        raise ConfigError(f"--queue-sample-s={args.queue_sample_s}: must be from 1 to 3600")
    connection_cap(_ops_limits(args), setting="--ops-max-connections")
    hosts = _console_hosts(args)
    if hosts is not None:
        try:
            HostNames.of(hosts)
        except ConfigError as error:
            raise ConfigError(f"--console-hosts={args.console_hosts}: {error}") from None


def _ops_limits(args: argparse.Namespace) -> OpsLimits:
    cap = args.ops_max_connections
    if cap is not None and cap < 1:
        raise ConfigError(f"--ops-max-connections={cap}: must be a whole number >= 1")
    return OpsLimits(max_connections=cap)


def _ops_listener(
    supervisor: Supervisor, args: argparse.Namespace
) -> contextlib.AbstractAsyncContextManager[object]:
    if args.ops_port is None:
        return contextlib.nullcontext()
    policy = HealthPolicy(max_loop_lag_s=args.max_loop_lag_s)
    return OpsListener(
        supervisor,
        port=args.ops_port,
        host=args.ops_addr,
        policy=policy,
        console=not args.no_console,
        console_bodies=args.console_bodies,
        console_token=os.environ.get("LEASE_WORKER_CONSOLE_TOKEN") or None,
        limits=_ops_limits(args),
        console_hosts=_console_hosts(args),
    )


def _console_hosts(args: argparse.Namespace) -> list[str] | None:
    if args.console_hosts is None:
        return None
    return [name for name in args.console_hosts.split(",") if name.strip()]


def _run_processes(argv: list[str], args: argparse.Namespace) -> int:
    if not 1 <= args.processes <= 256:
        raise ConfigError(f"--processes={args.processes}: must be from 1 to 256")
    load_app(args.app)  # a bad APP is one clear error here, not N crashing children
    _loop_options(args.loop)  # and so is a missing uvloop; the children get --loop in argv
    _check_ops_options(args)
    port = args.ops_port
    if port is not None and not 0 < port <= 65_536 - args.processes:
        raise ConfigError(
            f"--ops-port={port}: ports {port}..{port + args.processes - 1} must be valid"
        )
    return run_processes(argv, args.processes, port)
