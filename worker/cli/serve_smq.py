"""`lease-worker serve-smq`: the in-memory engine's SMQ dialect over Alibaba Cloud SMQ's
(formerly MNS) REST/XML protocol until signalled (docs/how-to/smq.md says what it models).

Requests must be signed with the AccessKey in `ALIBABA_CLOUD_ACCESS_KEY_ID` /
`ALIBABA_CLOUD_ACCESS_KEY_SECRET` (the variables `--backend smq` signs with), or `test` /
`test` when they are unset. SIGTERM or SIGINT ends it with status 0; invalid settings exit 2
with one line; a port that cannot be bound exits 1.
"""

from __future__ import annotations

import argparse
import functools
import os
from typing import Any

from backends.memory import MemoryEngine
from backends.memory.dialects import SMQ_DIALECT
from backends.serve.smq import serve_smq
from backends.serve.smq.endpoint import DEFAULT_CREDENTIALS
from worker.cli.options import LOG_OPTIONS, Option, add_options
from worker.cli.serving import create_queues, run_server, serve_until_signalled
from worker.clock import LoopClock
from worker.errors import ConfigError

__all__ = ["OPTIONS", "add_parser", "main"]

OPTIONS: tuple[Option, ...] = (*LOG_OPTIONS,)


def add_parser(commands: Any) -> None:
    serve = commands.add_parser(
        "serve-smq",
        help="serve the in-memory engine as Alibaba Cloud SMQ (REST/XML) until SIGTERM/SIGINT",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=9325, help="port to bind (default: 9325)")
    serve.add_argument(
        "--queue",
        action="append",
        default=[],
        metavar="NAME",
        help="create this queue at start; repeatable",
    )
    add_options(serve, OPTIONS)


def main(args: argparse.Namespace) -> int:
    return run_server(args, _serve)


def _credentials() -> dict[str, str]:
    key_id = os.environ.get("ALIBABA_CLOUD_ACCESS_KEY_ID", "")
    secret = os.environ.get("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "")
    if bool(key_id) != bool(secret):
        raise ConfigError("set both ALIBABA_CLOUD_ACCESS_KEY_ID and _SECRET, or neither")
    return {key_id: secret} if key_id else dict(DEFAULT_CREDENTIALS)


async def _serve(args: argparse.Namespace) -> None:
    credentials = _credentials()
    engine = MemoryEngine(LoopClock(), dialect=SMQ_DIALECT)
    create_queues(engine, args.queue)
    serve = functools.partial(
        serve_smq, engine, host=args.host, port=args.port, credentials=credentials
    )
    await serve_until_signalled(serve, events="smq_endpoint", queues=len(engine.list_queues()))
