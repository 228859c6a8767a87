"""The `lease-worker` command (also `python -m worker`).

`lease-worker run APP` runs a worker (`worker.cli.run`); `lease-worker serve-sqs`
serves the in-memory engine over SQS's protocols (`worker.cli.serve`), `serve-smq` over
SMQ's (`worker.cli.serve_smq`); `lease-worker dlq` lists, inspects and redrives dead-letter
queues (`worker.cli.dlq`); `lease-worker peek` reads without receiving (`worker.cli.peek`);
`lease-worker --version` prints `lease-worker <version>`.

Invalid settings end the process with status 2 and one line saying which setting and why
(missing AWS credentials count as settings); a fatal queue-service error (missing queue,
access denied), a start-up that could not reach the queue service, or a crash of the worker
(after it released what it held) with status 1 and one line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

import worker
from worker.cli import dlq as dlq_command
from worker.cli import peek as peek_command
from worker.cli import run as run_command
from worker.cli import serve as serve_command
from worker.cli import serve_smq as serve_smq_command
from worker.cli.loader import load_app
from worker.cli.logging import configure_logging, resolve_format
from worker.cli.options import check_env_values
from worker.errors import BackendError, ConfigError

__all__ = ["build_parser", "load_app", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lease-worker",
        description="Run queue handlers whose leases extend themselves.",
    )
    parser.add_argument("--version", action="version", version=f"lease-worker {worker.__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run_command.add_parser(commands)
    serve_command.add_parser(commands)
    dlq_command.add_parser(commands)
    serve_smq_command.add_parser(commands)
    peek_command.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "serve-sqs":
        check_env_values(parser, args, serve_command.OPTIONS)
        return serve_command.main(args)
    if args.command == "serve-smq":
        check_env_values(parser, args, serve_smq_command.OPTIONS)
        return serve_smq_command.main(args)
    if args.command == "peek":
        check_env_values(parser, args, peek_command.OPTIONS)
        configure_logging(fmt="console", level="warning")
        return _reporting(lambda: peek_command.main(args))
    if args.command == "dlq":
        check_env_values(parser, args, dlq_command.OPTIONS)
        configure_logging(fmt="console", level="warning")
        return _reporting(lambda: dlq_command.main(args))
    options = [option for group in run_command.OPTIONS.values() for option in group]
    check_env_values(parser, args, options)
    configure_logging(fmt=resolve_format(args.log_format), level=args.log_level)
    return _reporting(lambda: run_command.run(args, argv if argv is not None else sys.argv[1:]))


def _reporting(command: Callable[[], int]) -> int:
    """Run `command`; a settings error is status 2 with one line, a fatal queue-service
    error status 1 with one line."""
    try:
        return command()
    except (ConfigError, ValueError) as error:
        print(f"lease-worker: error: {error}", file=sys.stderr)
        return 2
    except BackendError as error:  # fatal, or transient and given up on
        if error.code == "NoCredentialsError":  # nothing was sent: a setting is missing
            print(f"lease-worker: error: {_NO_CREDENTIALS}", file=sys.stderr)
            return 2
        print(f"lease-worker: error: {error}", file=sys.stderr)
        return 1


_NO_CREDENTIALS = (
    "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, choose a "
    "profile with AWS_PROFILE, or run where a role provides them"
)
