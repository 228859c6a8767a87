"""The operations listener: one HTTP port for Prometheus and Kubernetes.

- `GET /metrics`: the runtime's registry, `<prefix>_ready` and `<prefix>_healthy` (1 or 0,
  the probes' verdicts, for alert rules), then the process-wide registry (the application's
  own metrics, and prometheus-client's process, platform and GC collectors), in
  Prometheus' text format.
- `GET /healthz`, `GET /readyz`: 200 or 503 with a JSON body naming each check
  (`worker.ops.health`).
- `GET /`, `GET /api/status`: the live console (`worker.ops.console`), read-only; message
  bodies only with `console_bodies=True` (`--console-bodies`). The console and its API
  answer only requests whose `Host` is one of the listener's names (`console_hosts`,
  `--console-hosts`; by default the loopback names and the address it binds:
  `worker.ops.host_names`), else 421; `/metrics` and the probes answer any `Host`.
- `GET /api/dlq`, `POST /api/dlq/redrive`: this worker's dead-letter queues, and their
  redrive, which needs `console_token` (`worker.ops.console_actions`).
- Any other path: 404; another method: 405.

What one client may take is bounded (`worker.ops.limits.OpsLimits`; `worker.ops.connections`):
at most `max_connections` connections at once (`--ops-max-connections`; the rest wait in the
kernel's backlog), idle, head, body and request timeouts, a body of at most 64 KiB and JSON
at most 32 levels deep; client faults are logged once per kind, at info, without traceback.

It serves from the worker's own event loop: an answer at all means the loop runs. It binds
before the worker starts (probes get answers during start-up; a port already taken is one
clear `ConfigError`) and closes after the worker's last flush, so a scrape during a drain
works. Loopback by default: exposing it is a decision (`--ops-addr 0.0.0.0` in a pod).
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator, Sequence
from types import TracebackType

import anyio
import structlog
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from anyio.abc import TaskGroup
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from worker.errors import ConfigError
from worker.ops.connections import Connections, FaultLog, client_fault, limits_middleware
from worker.ops.console import add_console_routes
from worker.ops.console_actions import add_dead_letter_routes
from worker.ops.health import HealthPolicy, Verdict, liveness, readiness
from worker.ops.history import History, read_counts
from worker.ops.host_names import HostNames
from worker.ops.limits import OpsLimits, connection_cap
from worker.ops.status import status
from worker.runtime.supervisor import Supervisor

__all__ = ["OpsListener"]

#: Seconds an open request may keep the listener's close waiting.
_CLOSE_TIMEOUT_S = 1.0
#: Connections the kernel holds for the listener, past its cap, before it drops SYNs.
_BACKLOG = 128


class OpsListener:
    """`async with OpsListener(supervisor, port=9100):` serves while the block runs."""

    def __init__(
        self,
        supervisor: Supervisor,
        *,
        port: int,
        host: str = "127.0.0.1",
        policy: HealthPolicy | None = None,
        registries: Sequence[CollectorRegistry] | None = None,
        console: bool = True,
        console_bodies: bool = False,
        console_token: str | None = None,
        history: History | None = None,
        limits: OpsLimits | None = None,
        console_hosts: Sequence[str] | None = None,
    ) -> None:
        if not 0 <= port <= 65_535:
            raise ConfigError(f"ops port {port}: must be a port number from 0 to 65535")
        self._limits = limits or OpsLimits()
        self._connections = Connections(
            self._limits,
            cap=connection_cap(self._limits),
            faults=FaultLog(self._limits.log_every_s),
        )
        self._supervisor = supervisor
        self._host = host
        self._port = port
        self._policy = policy or HealthPolicy()
        if registries is None:
            registries = (supervisor.metrics.registry, REGISTRY)
        probes = CollectorRegistry(auto_describe=True)
        probes.register(_Probes(supervisor, self._policy))
        self._registries = (probes, *registries)
        names = (
            HostNames.default_for(host) if console_hosts is None else HostNames.of(console_hosts)
        )
        middlewares = [limits_middleware(self._connections), _named_hosts_only(names)]
        app = web.Application(middlewares=middlewares, client_max_size=self._limits.max_body_bytes)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._history = (history or History()) if console else None
        self._started_at = supervisor.clock.now() + supervisor.clock.wall_offset_s()
        if self._history is not None:
            history_now = self._history
            add_console_routes(
                app,
                lambda: status(
                    supervisor, history_now, started_at=self._started_at, bodies=console_bodies
                ),
            )
            add_dead_letter_routes(app, supervisor, token=console_token or None, names=names)
        self._log = structlog.get_logger("lease_worker.ops")
        self._tasks: TaskGroup | None = None
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=_CLOSE_TIMEOUT_S)
        self._sockets: list[socket.socket] = []
        self.port: int | None = None

    @property
    def max_connections(self) -> int:
        """The connections served at once (`OpsLimits.max_connections`, or its default)."""
        return self._connections.cap

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    async def __aenter__(self) -> OpsListener:
        await self._runner.setup()
        try:
            self._sockets = await _listen(self._host, self._port)
        except OSError as error:
            await self._runner.cleanup()
            where = f"{self._host}:{self._port}"
            reason = error.strerror or str(error)
            raise ConfigError(f"ops listener: cannot listen on {where}: {reason}") from None
        self.port = int(self._sockets[0].getsockname()[1])
        server = self._runner.server
        assert server is not None
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        self._tasks.start_soon(self._connections.serve, server, self._sockets)
        if self._history is not None:
            self._tasks.start_soon(self._sample_history, self._history)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            if self._tasks is not None:
                self._tasks.cancel_scope.cancel()
                await self._tasks.__aexit__(None, None, None)
        finally:
            for sock in self._sockets:
                sock.close()
            with anyio.CancelScope(shield=True):
                await self._runner.cleanup()
                self._connections.abort_all()

    async def _sample_history(self, history: History) -> None:
        """Sample the console's history; a failure is logged once and the sampling goes on:
        the console is never a reason for the worker to stop."""
        supervisor = self._supervisor
        failing = False
        while True:
            wall = supervisor.clock.now() + supervisor.clock.wall_offset_s()
            try:
                history.add(wall, read_counts(supervisor.metrics, supervisor.app.registry.queues))
                failing = False
            except Exception as error:
                if not failing:
                    self._log.error("console.history_failed", error=type(error).__name__)
                failing = True
            await anyio.sleep(history.interval_s)

    async def _metrics(self, request: web.Request) -> web.Response:
        body = b"".join(generate_latest(registry) for registry in self._registries)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, request: web.Request) -> web.Response:
        return _answer(liveness(self._supervisor, self._policy))

    async def _readyz(self, request: web.Request) -> web.Response:
        return _answer(readiness(self._supervisor))


class _Probes(Collector):
    def __init__(self, supervisor: Supervisor, policy: HealthPolicy) -> None:
        self._supervisor = supervisor
        self._policy = policy

    def collect(self) -> Iterator[Metric]:
        prefix = self._supervisor.metrics.prefix
        ready = readiness(self._supervisor).ok
        healthy = liveness(self._supervisor, self._policy).ok
        yield GaugeMetricFamily(f"{prefix}_ready", "1 while /readyz answers 200.", value=ready)
        yield GaugeMetricFamily(f"{prefix}_healthy", "1 while /healthz answers 200.", value=healthy)


#: Paths any Host may reach: Prometheus and the probes (which name the pod's address).
_ANY_HOST = frozenset({"/metrics", "/healthz", "/readyz"})


def _named_hosts_only(names: HostNames) -> Middleware:
    """The console answers only to its configured names (`worker.ops.host_names`): any
    other Host is a page of another site whose name was made to resolve to this listener
    (DNS rebinding), whatever address it binds."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        # The Host header itself: aiohttp's `request.host` stands in the listener's own
        # address for a missing one (an HTTP/1.0 or 0.9 request).
        if request.path not in _ANY_HOST and not names.allows(request.headers.get("Host")):
            client_fault(request, "unknown_host")
            return web.Response(status=421, text="this listener answers only to its own names")
        return await handler(request)

    return middleware


def _answer(verdict: Verdict) -> web.Response:
    return web.Response(
        status=200 if verdict.ok else 503,
        text=json.dumps(verdict.as_json()),
        content_type="application/json",
    )


async def _listen(host: str, port: int) -> list[socket.socket]:
    """Listening sockets for every address of `host` (as `loop.create_server` makes them),
    all on one port (the first one's, when `port` is 0)."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(sockets) > 1:
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock.bind(address)
            sock.listen(_BACKLOG)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets
