"""The `lease-worker` command (also `python -m worker`).

`lease-worker run APP` runs a worker (`worker.cli.run`); `lease-worker serve-sqs`
serves the in-memory engine over SQS's protocols (`worker.cli.serve`), `serve-smq` over
SMQ's (`worker.cli.serve_smq`); `lease-worker dlq` lists, inspects and redrives dead-letter
queues (`worker.cli.dlq`); `lease-worker peek` reads without receiving (`worker.cli.peek`);
`lease-worker --version` prints `lease-worker <version>`.

Invalid settings end the process with status 2 and one line saying which setting and why
(missing AWS credentials count as settings); a fatal queue-service error (missing queue,
access denied), a start-up that could not reach the queue service, or a crash of the worker
(after it released what it held) with status 1 and one line. Every `LEASE_WORKER_*` variable
that no option reads is named in one warning at start (`config.unknown_variables`), by the
parent of `--processes` children only.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

import structlog

import worker
from worker.cli import dlq as dlq_command
from worker.cli import peek as peek_command
from worker.cli import run as run_command
from worker.cli import serve as serve_command
from worker.cli import serve_smq as serve_smq_command
from worker.cli.loader import load_app
from worker.cli.logging import configure_logging, report_failure, resolve_format
from worker.cli.options import (
    Option,
    Parser,
    check_env_values,
    describe_unknown,
    unknown_variables,
)
from worker.cli.processes import INDEX_VARIABLE
from worker.errors import BackendError, ConfigError

__all__ = ["build_parser", "load_app", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
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


#: Each command's options, by the name argparse gives the command.
_OPTIONS: dict[str, tuple[Option, ...]] = {
    "run": tuple(option for group in run_command.OPTIONS.values() for option in group),
    "serve-sqs": serve_command.OPTIONS,
    "serve-smq": serve_smq_command.OPTIONS,
    "dlq": dlq_command.OPTIONS,
    "peek": peek_command.OPTIONS,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_env_values(parser, args, _OPTIONS[args.command])
    if args.command in ("dlq", "peek"):
        configure_logging(fmt="console", level="warning")
    else:
        configure_logging(fmt=resolve_format(args.log_format), level=args.log_level)
    _warn_unknown_variables()
    if args.command == "serve-sqs":
        return serve_command.main(args)
    if args.command == "serve-smq":
        return serve_smq_command.main(args)
    if args.command == "peek":
        return _reporting(lambda: peek_command.main(args))
    if args.command == "dlq":
        return _reporting(lambda: dlq_command.main(args))
    return _reporting(lambda: run_command.run(args, argv if argv is not None else sys.argv[1:]))


def _warn_unknown_variables() -> None:
    """One warning naming every `LEASE_WORKER_*` variable no command reads (a misspelling
    is otherwise silently ignored); not again in the children of `--processes`."""
    every_option = [option for options in _OPTIONS.values() for option in options]
    unknown = unknown_variables(every_option)
    if unknown and INDEX_VARIABLE not in os.environ:
        structlog.get_logger("lease_worker.cli").warning(
            "config.unknown_variables",
            variables=unknown,
            detail=describe_unknown(unknown, every_option),
        )


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
        report_failure(error)
        return 1


_NO_CREDENTIALS = (
    "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, choose a "
    "profile with AWS_PROFILE, or run where a role provides them"
)
