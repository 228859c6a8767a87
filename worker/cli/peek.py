"""`lease-worker peek QUEUE [-n N]`: read up to N messages without receiving them: no
visibility change, no receive count (SMQ's BatchPeekMessage). The queue service options are
`dlq`'s (`--backend sqs` by default). SQS cannot peek (its old peek left the API long ago):
there the command fails with one line and changes nothing; `lease-worker dlq inspect`
receives and releases instead. Bodies are printed only with `--bodies`; `--json` prints one
JSON document.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

import anyio

from backends import BACKENDS
from worker.cli.dlq import OPTIONS
from worker.cli.options import add_options
from worker.cli.run import open_backend
from worker.errors import ConfigError
from worker.ops import dead_letters
from worker.types import ReceivedMessage

__all__ = ["OPTIONS", "add_parser", "main"]


def add_parser(commands: Any) -> None:
    peek = commands.add_parser(
        "peek",
        help="read messages without receiving them (SMQ; not SQS, which cannot peek)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    peek.add_argument("queue", metavar="QUEUE")
    peek.add_argument("-n", type=int, default=10, metavar="N", help="messages (default: 10)")
    peek.add_argument("--bodies", action="store_true", help="print the bodies too")
    peek.add_argument("--json", action="store_true", help="one JSON document, for scripts")
    add_options(peek, OPTIONS)


def main(args: argparse.Namespace) -> int:
    """Raises ConfigError / BackendError for the caller to report in one line."""
    if BACKENDS[args.backend].embedded:
        raise ConfigError(
            f"peek: --backend {args.backend} is embedded in one worker process; run "
            "`lease-worker serve-smq` and use --backend smq --endpoint-url http://HOST:PORT"
        )
    messages = anyio.run(_peek, args)
    if args.json:
        print(json.dumps([_plain(m, args.bodies) for m in messages], indent=2, sort_keys=True))
    else:
        print("\n".join(_line(m, args.bodies) for m in messages) or "(no visible messages)")
    return 0


async def _peek(args: argparse.Namespace) -> Sequence[ReceivedMessage]:
    backend = await open_backend(args)
    try:
        if not backend.limits.supports_peek:
            raise ConfigError(
                f"peek: --backend {args.backend} cannot peek (SQS has no peek); "
                "`lease-worker dlq inspect` receives and releases instead"
            )
        return (await dead_letters.inspect(backend, args.queue, args.n)).messages
    finally:
        await backend.aclose()


def _plain(message: ReceivedMessage, bodies: bool) -> dict[str, Any]:
    plain: dict[str, Any] = {
        "message_id": message.message_id,
        "receive_count": message.receive_count,
        "sent_timestamp_ms": message.attributes.get("SentTimestamp"),
    }
    if bodies:
        plain["body"] = message.body
    return plain


def _line(message: ReceivedMessage, bodies: bool) -> str:
    line = f"{message.message_id}  received {message.receive_count}x"
    return f"{line}  {message.body}" if bodies else line
