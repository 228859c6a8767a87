"""What `serve-sqs` and `serve-smq` share: run a server over the engine until SIGTERM or
SIGINT, with their exit statuses (0 after a signal, 2 for invalid settings, 1 for a port
that cannot be bound or another start-up step that fails, `CannotStart`) and their start and
stop log events."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any

import anyio
import structlog
from anyio.abc import TaskGroup

from backends.memory import MemoryEngine
from worker.cli.logging import configure_logging, resolve_format
from worker.errors import ConfigError, FatalBackendError
from worker.types import QueueSpec

__all__ = ["CannotStart", "create_queues", "run_server", "serve_until_signalled"]


class CannotStart(Exception):
    """A start-up step other than binding the port failed (a `--persist` file that cannot be
    written, or is in use): exit 1 with this message."""


def run_server(
    args: argparse.Namespace,
    serve: Callable[[argparse.Namespace], Awaitable[None]],
    *,
    check: Callable[[argparse.Namespace], None] | None = None,
) -> int:
    """`anyio.run(serve, args)` after the settings are checked; the exit status."""
    try:
        configure_logging(fmt=resolve_format(args.log_format), level=args.log_level)
        if check is not None:
            check(args)
        if not 0 <= args.port <= 65_535:
            raise ConfigError(f"--port={args.port}: must be a port number from 0 to 65535")
        anyio.run(serve, args)
    except (ConfigError, ValueError) as error:
        print(f"lease-worker: error: {error}", file=sys.stderr)
        return 2
    except CannotStart as error:
        print(f"lease-worker: error: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        where = f"{args.host}:{args.port}"
        print(f"lease-worker: error: cannot serve on {where}: {error}", file=sys.stderr)
        return 1
    return 0


def create_queues(engine: MemoryEngine, names: Iterable[str]) -> None:
    """Create each `--queue` the engine does not have yet (a restored one is kept)."""
    for name in names:
        if name in engine.list_queues():
            continue
        try:
            engine.create_queue(QueueSpec(name))
        except FatalBackendError as error:
            raise ConfigError(f"--queue {name!r}: {error}") from None


async def serve_until_signalled(
    serve: Callable[..., Coroutine[Any, Any, Any]],
    *,
    events: str,
    queues: int,
    beside: Callable[[TaskGroup], None] | None = None,
) -> None:
    """Start `serve` (a `task_status` starter answering its URL), log `<events>.started`,
    and stop it at the first SIGTERM or SIGINT; `beside` starts tasks that run with it."""
    log = structlog.get_logger("lease_worker.cli")
    async with anyio.create_task_group() as tasks:
        if beside is not None:
            beside(tasks)
        # Listening before the server starts: a signal right after start-up is not lost.
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            url = await tasks.start(serve)
            log.info(f"{events}.started", url=url, queues=queues)
            async for signum in signals:
                log.info("signal.received", signal=signal.Signals(signum).name)
                break
        tasks.cancel_scope.cancel()
    log.info(f"{events}.stopped")
