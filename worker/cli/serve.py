"""`lease-worker serve-sqs`: the in-memory engine over SQS's JSON and query protocols until
signalled (docs/reference/sqs-compatibility.md says what differs from SQS).

SIGTERM or SIGINT ends it with status 0; invalid settings exit 2 with one line; a port that
cannot be bound, or a --persist PATH that cannot be written or is served by another process,
exits 1 with one line.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import structlog
from anyio.abc import TaskGroup

from backends.memory import MemoryEngine
from backends.memory.changes import Changes
from backends.memory.handles import HandleRules
from backends.serve.sqs import serve_sqs
from backends.serve.sqs.persist import Persistence
from worker.cli.options import LOG_OPTIONS, Option, add_options
from worker.cli.serving import CannotStart, create_queues, run_server, serve_until_signalled
from worker.clock import LoopClock
from worker.errors import ConfigError

__all__ = ["OPTIONS", "add_parser", "main"]

_DESCRIPTION = (
    "Serve the in-memory SQS engine over SQS's JSON and query protocols, for any SQS client "
    "(boto3, aiobotocore, the AWS SDKs, old and new) at --endpoint-url http://HOST:PORT. "
    "Requests are not authenticated: keep it on loopback unless the network is yours."
)


OPTIONS: tuple[Option, ...] = (*LOG_OPTIONS,)


def add_parser(commands: Any) -> None:
    serve = commands.add_parser(
        "serve-sqs",
        help="serve the in-memory engine as SQS (JSON and query protocols) until SIGTERM/SIGINT",
        description=_DESCRIPTION,
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
        "--receipt-handles",
        choices=[rules.value for rules in HandleRules],
        default=HandleRules.SQS.value,
        help=(
            "how a delete with a stale or used receipt handle is answered: 'sqs' as SQS "
            "documents it (success on standard queues, refused on FIFO queues once expired), "
            "'strict' refuses it on both, to show what SQS would hide (default: sqs)"
        ),
    )
    serve.add_argument(
        "--persist",
        type=Path,
        default=None,
        metavar="PATH",
        help=(
            "keep the queues and messages in PATH and PATH.journal: every change is journaled "
            "and synced to disk (one fdatasync for the requests answered together) before "
            "its answer goes out, so a crash or SIGKILL loses nothing acknowledged; the "
            "journal is folded into PATH every --persist-every seconds and at stop "
            "(default: memory only)"
        ),
    )
    serve.add_argument(
        "--persist-every",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how often --persist folds its journal into PATH (default: 5)",
    )
    serve.add_argument(
        "--queue",
        action="append",
        default=[],
        metavar="NAME",
        help="create this queue at start (a .fifo name makes a FIFO queue); repeatable",
    )
    add_options(serve, OPTIONS)


def main(args: argparse.Namespace) -> int:
    return run_server(args, _serve, check=_check)


def _check(args: argparse.Namespace) -> None:
    if args.max_in_flight < 1:
        raise ConfigError(f"--max-in-flight={args.max_in_flight}: must be >= 1")
    if args.persist_every <= 0:
        raise ConfigError(f"--persist-every={args.persist_every}: must be > 0")


@contextlib.contextmanager
def _persisting(path: Path) -> Iterator[None]:
    """An `OSError` of `--persist` as `CannotStart`, saying which file (not the port)."""
    try:
        yield
    except OSError as error:
        reason = error.strerror or str(error)
        if error.filename is not None:
            reason = f"{reason}: {error.filename}"
        raise CannotStart(f"--persist {path}: {reason}") from None


async def _serve(args: argparse.Namespace) -> None:
    engine = MemoryEngine(
        LoopClock(),
        max_in_flight=args.max_in_flight,
        handle_rules=HandleRules(args.receipt_handles),
        changes=None if args.persist is None else Changes(),
    )
    store = None
    if args.persist is not None:
        store = Persistence(engine, args.persist, interval_s=args.persist_every)
        with _persisting(args.persist):
            opened = store.open()
        if opened:
            restored = len(engine.list_queues())
            structlog.get_logger("lease_worker.cli").info("sqs_endpoint.restored", queues=restored)
    create_queues(engine, args.queue)
    if store is not None:
        with _persisting(args.persist):
            store.compact_now()  # the --queue ones are on disk before anything is served
    durable = None if store is None else store.durable
    serve = functools.partial(serve_sqs, engine, host=args.host, port=args.port, durable=durable)

    def persist(tasks: TaskGroup) -> None:
        if store is not None:
            tasks.start_soon(store.run)

    # Every queue served, restored ones included (it logged the --queue ones alone: 0 after
    # a restore without --queue).
    queues = len(engine.list_queues())
    await serve_until_signalled(serve, events="sqs_endpoint", queues=queues, beside=persist)
