"""`lease-worker dlq ACTION`: the dead-letter tools (`worker.ops.dead_letters`) on a queue
service. The queue service options are `run`'s (`--backend`, `--region`,
`--endpoint-url`), with `--backend sqs` by default: the embedded engine lives inside one
worker process, so against it, run `lease-worker serve-sqs` and point `--endpoint-url` at it.

- `list [--prefix P]`: dead-letter queues, their source queues, counts and oldest age;
- `inspect QUEUE [-n N] [--bodies]`: read messages without handling them (see below);
- `redrive QUEUE [--to QUEUE] [--rate N]`: start a message move task;
- `tasks QUEUE`, `cancel TASK_HANDLE`: follow or stop move tasks;
- `purge QUEUE`: delete every message, after the queue's name is typed back
  (or given with `--confirm QUEUE`).

`inspect` on SQS cannot peek: it receives (a short visibility), prints, and releases at
once, and says so; each message's receive count goes up by one. Bodies are printed only
with `--bodies`. `--json` prints one JSON document for scripts.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import anyio

from backends import BACKENDS
from worker.backend import Backend
from worker.cli.options import Option, add_options
from worker.cli.run import OPTIONS as RUN_OPTIONS
from worker.cli.run import backend_option, open_backend
from worker.errors import ConfigError
from worker.ops import dead_letters
from worker.types import MoveTask, ReceivedMessage

__all__ = ["OPTIONS", "add_parser", "main"]

Action = Callable[[Backend, argparse.Namespace], Coroutine[Any, Any, Any]]


def _queue_service_options() -> tuple[Option, ...]:
    _, *rest = RUN_OPTIONS["queue service"]
    return (backend_option("sqs"), *rest)


OPTIONS = _queue_service_options()


def add_parser(commands: Any) -> None:
    dlq = commands.add_parser(
        "dlq",
        help="list, inspect and redrive dead-letter queues",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = dlq.add_subparsers(dest="dlq_action", required=True, metavar="ACTION")
    listing = _action(actions, "list", "dead-letter queues and their source queues")
    listing.add_argument("--prefix", default="", help="only queues whose name starts so")
    peek = _action(actions, "inspect", "read messages without handling them")
    peek.add_argument("queue", metavar="QUEUE")
    peek.add_argument("-n", type=int, default=10, metavar="N", help="messages (default: 10)")
    peek.add_argument("--bodies", action="store_true", help="print the bodies too")
    move = _action(actions, "redrive", "move messages back with a message move task")
    move.add_argument("queue", metavar="QUEUE", help="the dead-letter queue")
    move.add_argument("--to", metavar="QUEUE", help="another destination (default: the source)")
    move.add_argument("--rate", type=int, metavar="N", help="messages a second (1-500)")
    tasks = _action(actions, "tasks", "the message move tasks of a dead-letter queue")
    tasks.add_argument("queue", metavar="QUEUE")
    cancel = _action(actions, "cancel", "cancel a running message move task")
    cancel.add_argument("handle", metavar="TASK_HANDLE")
    purge = _action(actions, "purge", "delete every message of a queue (asks first)")
    purge.add_argument("queue", metavar="QUEUE")
    purge.add_argument("--confirm", metavar="QUEUE", help="the queue's name, not to be asked")


def _action(actions: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = actions.add_parser(name, help=help_text)
    add_options(parser.add_argument_group("queue service"), OPTIONS)
    parser.add_argument("--json", action="store_true", help="print JSON")
    return parser


def main(args: argparse.Namespace) -> int:
    """Run one action; raises ConfigError / BackendError for the caller to report."""
    if BACKENDS[args.backend].embedded:
        raise ConfigError(
            f"dlq: --backend {args.backend} is embedded in one worker process; run "
            "`lease-worker serve-sqs` and use --backend sqs --endpoint-url http://HOST:PORT"
        )
    if args.dlq_action == "purge" and args.confirm is None:
        args.confirm = _ask(f"Delete every message of {args.queue!r}? Type its name: ")
    result = anyio.run(_with_backend, _ACTIONS[args.dlq_action], args)
    _print(args, result)
    return 0


def _ask(prompt: str) -> str:
    if not sys.stdin.isatty():
        return ""
    return input(prompt).strip()


async def _with_backend(action: Action, args: argparse.Namespace) -> Any:
    backend = await open_backend(args)
    try:
        return await action(backend, args)
    finally:
        await backend.aclose()


async def _list(backend: Backend, args: argparse.Namespace) -> Any:
    return await dead_letters.dead_letter_queues(backend, args.prefix)


async def _inspect(backend: Backend, args: argparse.Namespace) -> Any:
    return await dead_letters.inspect(backend, args.queue, args.n)


async def _redrive(backend: Backend, args: argparse.Namespace) -> Any:
    return await dead_letters.redrive(
        backend, args.queue, destination=args.to, max_per_second=args.rate
    )


async def _tasks(backend: Backend, args: argparse.Namespace) -> Any:
    return await dead_letters.move_tasks(backend, args.queue)


async def _cancel(backend: Backend, args: argparse.Namespace) -> Any:
    return await dead_letters.cancel_move(backend, args.handle)


async def _purge(backend: Backend, args: argparse.Namespace) -> Any:
    await dead_letters.purge(backend, args.queue, confirm=args.confirm)
    return args.queue


_ACTIONS: dict[str, Action] = {
    "list": _list,
    "inspect": _inspect,
    "redrive": _redrive,
    "tasks": _tasks,
    "cancel": _cancel,
    "purge": _purge,
}


def _print(args: argparse.Namespace, result: Any) -> None:
    bodies = getattr(args, "bodies", False)
    if args.json:
        print(json.dumps(_plain(result, bodies), indent=2, sort_keys=True))
    else:
        print("\n".join(_lines(args, result, bodies)))


def _plain(value: Any, bodies: bool) -> Any:
    """JSON-ready values: dataclasses as objects; a body only with --bodies."""
    if isinstance(value, ReceivedMessage):
        plain = {
            "message_id": value.message_id,
            "receive_count": value.receive_count,
            "attributes": dict(value.attributes),
            "body_length": len(value.body),
        }
        return {**plain, "body": value.body} if bodies else plain
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name), bodies) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [_plain(item, bodies) for item in value]
    return value


def _lines(args: argparse.Namespace, result: Any, bodies: bool) -> list[str]:
    action = args.dlq_action
    if action == "list":
        return [
            f"{q.name}: {q.visible} visible, {q.in_flight} in flight, {q.delayed} delayed"
            + (f", oldest {q.oldest_message_age_s:.0f} s" if q.oldest_message_age_s else "")
            + f"; sources: {', '.join(q.sources)}"
            for q in result
        ] or ["no dead-letter queue found"]
    if action == "inspect":
        return _inspection(result, bodies)
    if action == "redrive":
        follow = f"lease-worker dlq tasks {shlex.quote(args.queue)}"
        return [f"move task started: {result}", f"follow it with: {follow}"]
    if action == "tasks":
        return [_task(task) for task in result] or ["no move task"]
    if action == "cancel":
        return [f"cancelled after moving {result} messages"]
    return [f"purged {result}"]


def _inspection(inspection: dead_letters.Inspection, bodies: bool) -> list[str]:
    lines = []
    if inspection.changed:
        lines.append(
            "SQS cannot peek: these messages were received and released at once; each "
            "one's receive count went up by one."
        )
    for message in inspection.messages:
        sent = message.attributes.get("SentTimestamp", "?")
        lines.append(
            f"{message.message_id}  receives={message.receive_count}  sent_ms={sent}  "
            f"body={len(message.body)} characters"
        )
        if bodies:
            lines.append(f"  {message.body}")
    return lines or ["no message"]


def _task(task: MoveTask) -> str:
    to = task.destination or "its source"
    total = "?" if task.to_move is None else str(task.to_move)
    line = f"{task.status}: {task.source} -> {to}, moved {task.moved} of {total}"
    if task.handle:
        line += f" (handle {task.handle})"
    return line + (f": {task.failure_reason}" if task.failure_reason else "")
