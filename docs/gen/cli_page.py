"""docs/reference/cli.md from the real argparse parsers (`worker.cli.main.build_parser`).

Which options an environment variable sets is asked of the parsers too: every option's
`LEASE_WORKER_<DEST>` is set to a marker and the parsers are built again; an option whose
default became the marker reads that variable. Nothing here lists options by hand, so a new
option (or command) appears on the page as soon as the parser has it.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from docs.gen.environment import clean_environment
from docs.gen.markdown import cell, prose, table
from worker.cli.main import build_parser
from worker.cli.options import ENV_PREFIX
from worker.config import WorkerConfig
from worker.runtime.queues import STARTUP_CALL_TIMEOUTS

__all__ = ["Command", "commands", "render"]

_MARKER = "docs-gen-marker"
_ROOT = Path(__file__).resolve().parents[2]

#: Variables the code reads itself, not through an option, and what each does. `render`
#: refuses to run unless these are exactly the `"LEASE_WORKER_*"` strings of worker/.
DIRECT_VARIABLES = {
    "LEASE_WORKER_CONSOLE_TOKEN": (
        "the console's bearer token: without it, the console's one action (a dead-letter "
        "redrive, `POST /api/dlq/redrive`) answers 401 and moves nothing"
    ),
    "LEASE_WORKER_PROCESS_INDEX": (
        "set by `--processes N` in child i's environment (0 to N-1); the children do not "
        "repeat the parent's start-up warnings"
    ),
    "LEASE_WORKER_JSON": (
        "`json` decodes JSON bodies with the standard library even when orjson (extra "
        "`[fast]`) is installed; read at import"
    ),
}

#: What the parsers cannot say: how `run` finds APP, its signals, `--processes` and the
#: exit statuses (worker/cli/loader.py, run.py, processes.py and main.py say the same).
NOTES = """\
## How `lease-worker run` behaves

**Settings** come from the command line, else from the `LEASE_WORKER_*` variables above,
else from the application's own `WorkerConfig` ([the settings](config.md)).

**APP** is `module:attribute`, imported from the current directory. lease-worker's own
import names are `worker` and `backends`: a `worker.py` (or `worker/`) or `backends.py` (or
`backends/`) of yours beside your app cannot be imported under that name while lease-worker
runs. `lease-worker run app:app` still runs your app, after one `app.name_clash` warning
naming the hidden files and a new name for each. An APP inside such a file
(`lease-worker run worker:app`, `backends.jobs:app`) is refused with one line and status 2:
rename the file, e.g. `worker.py` to `app.py`. Start workers with the `lease-worker` command
or `python -P -m worker`: plain `python -m worker` puts the current directory first on
`sys.path`, so Python would run your `worker.py` instead of lease-worker.

**Signals**: the first SIGTERM or SIGINT starts the shutdown (receiving stops, handlers drain
for `grace_s` with their leases renewed, the rest are released); a second one cuts the drain
short; later ones are ignored until the process has exited.

**`--processes N`** runs N worker processes under one parent that forwards SIGTERM and
SIGINT to each and restarts a child that dies unasked after a pause of its own (1 s,
doubling to 30 s while that child keeps dying within a minute of its start), without
holding up the others. Child i gets `LEASE_WORKER_PROCESS_INDEX=i` and, with
`--ops-port P`, its own ops listener on port P + i: health is per process, which an
aggregate endpoint would hide. Worth it when handlers or the SQS client use a whole core;
in Kubernetes, run one process per pod.

**Start-up** first checks that something listens at `--endpoint-url` (one TCP connect, not
made through a proxy). On a terminal (standard input and output both a TTY) a refused
connection, an unknown host or no answer ends the command at once with one line and status
1; anywhere else (a pod, where the service may be starting too) the connect is retried, one
`queue_service.retrying` warning per retry with its reason and pause, for as long as the
queue check below. Then it reads each queue's attributes. When the queue service throttles
or cannot be reached, it retries with a pause doubling from `receive_backoff_s` to
`receive_backoff_max_s`, for {startup_calls} call timeouts ({startup_s:g} s with the default
`call_timeout_s`), then ends with one line and status 1; a missing queue or denied access
ends it at once, status 1.

**Mistakes in the environment**: every `LEASE_WORKER_*` variable that no option reads (nor
the table above) is named in one `config.unknown_variables` warning at start, with the
closest known name (`LEASE_WORKER_MAX_INFLIGHT (did you mean LEASE_WORKER_MAX_IN_FLIGHT?)`).
A variable's value of the wrong type is a usage error naming the variable
(`LEASE_WORKER_MAX_IN_FLIGHT='abc': expected an integer`); the option on the command line,
if given, wins over the variable. Options are never abbreviated: `--visib 30` is an error,
not `--visibility-s 30`.

**Exit status**: 0 after a shutdown; 1 with one line when a queue is missing or access is
denied, when start-up could not reach the queue service, or when the worker crashed (after
releasing what it held); 2 with one line for invalid settings (an option, a variable, a
`ConfigError`, an ops port already taken; the AWS configuration: a profile that does not
exist, a malformed region or endpoint, half a key pair or none, a config file that does not
parse; an APP that does not parse).
"""


@dataclass(frozen=True, slots=True)
class Command:
    """One command line: `lease-worker dlq list` is ("dlq", "list")."""

    path: tuple[str, ...]
    parser: argparse.ArgumentParser
    help: str

    @property
    def name(self) -> str:
        return " ".join(("lease-worker", *self.path))


def _subcommands(
    parser: argparse.ArgumentParser,
) -> argparse._SubParsersAction[argparse.ArgumentParser] | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[Command]:
    """Every command under `parser` that takes options, depth first, in the parser's order."""
    sub = _subcommands(parser)
    if sub is None:
        return
    helps = {choice.dest: choice.help or "" for choice in sub._choices_actions}
    for name, child in sub.choices.items():
        yield Command((*path, name), child, helps.get(name, ""))
        yield from commands(child, (*path, name))


def _options(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:
        if action.option_strings and not isinstance(action, argparse._HelpAction):
            yield action


def _env_names(parser: argparse.ArgumentParser) -> set[tuple[str, str]]:
    """(command, option) pairs whose option reads `LEASE_WORKER_<DEST>`: set each variable
    (a switch's to 1, any other to a marker), build the parsers again, and see which
    defaults moved."""
    clean: dict[tuple[str, str], object] = {}
    probes: dict[str, str] = {}
    for command in commands(parser):
        for action in _options(command.parser):
            clean[command.name, action.option_strings[-1]] = action.default
            probes[f"{ENV_PREFIX}{action.dest.upper()}"] = "1" if action.nargs == 0 else _MARKER
    with clean_environment(probes):
        probed = build_parser()
    return {
        (command.name, action.option_strings[-1])
        for command in commands(probed)
        for action in _options(command.parser)
        if action.default != clean[command.name, action.option_strings[-1]]
    }


def _default(action: argparse.Action) -> str:
    default = action.default
    if default in (None, False, "", [], argparse.SUPPRESS):
        return ""
    return f"`{default}`"


def _value(action: argparse.Action) -> str:
    if action.nargs == 0:
        return "switch"
    if action.choices is not None:
        return " \\| ".join(f"`{choice}`" for choice in action.choices)
    metavar = action.metavar or action.dest.upper()
    repeat = " (repeatable)" if isinstance(action, argparse._AppendAction) else ""
    return f"`{metavar}`{repeat}"


def _option_rows(command: Command, env: set[tuple[str, str]]) -> list[list[str]]:
    rows = []
    for action in _options(command.parser):
        flag = action.option_strings[-1]
        if isinstance(action, argparse._VersionAction):
            continue
        variable = f"`{ENV_PREFIX}{action.dest.upper()}`" if (command.name, flag) in env else ""
        flags = ", ".join(f"`{option}`" for option in action.option_strings)
        rows.append([flags, _value(action), variable, _default(action), cell(action.help or "")])
    return rows


def _positionals(command: Command) -> list[list[str]]:
    return [
        [f"`{action.metavar or action.dest}`", cell(action.help or "")]
        for action in command.parser._actions
        if not action.option_strings and not isinstance(action, argparse._SubParsersAction)
    ]


def _description(parser: argparse.ArgumentParser) -> str:
    """The description as the parser prints it: a raw one (a module docstring with its list)
    keeps its lines, any other is one paragraph."""
    text = (parser.description or "").strip()
    if parser.formatter_class is argparse.RawDescriptionHelpFormatter:
        return prose(text)
    return cell(text)


def _section(command: Command, env: set[tuple[str, str]]) -> list[str]:
    level = "#" * (len(command.path) + 1)
    lines = [f"{level} `{command.name}`", "", cell(command.help) + ".", ""]
    lines += ["```text", command.parser.format_usage().strip(), "```", ""]
    if description := _description(command.parser):
        lines += [description, ""]
    if positionals := _positionals(command):
        lines += [*table(["argument", "meaning"], positionals), ""]
    if rows := _option_rows(command, env):
        lines += [*table(["option", "value", "environment", "default", "meaning"], rows), ""]
    return lines


def read_directly() -> set[str]:
    """Every `"LEASE_WORKER_*"` string literal of worker/: variables read without an option."""
    found: set[str] = set()
    for path in (_ROOT / "worker").rglob("*.py"):
        found.update(re.findall(r"[\"'](LEASE_WORKER_[A-Z][A-Z0-9_]*)[\"']", path.read_text()))
    return found


def _direct_variables() -> list[str]:
    read = read_directly()
    if read != set(DIRECT_VARIABLES):
        missing, gone = sorted(read - set(DIRECT_VARIABLES)), sorted(set(DIRECT_VARIABLES) - read)
        raise ValueError(f"docs/gen/cli_page.py: describe {missing}, drop {gone}")
    rows = [[f"`{name}`", cell(text)] for name, text in sorted(DIRECT_VARIABLES.items())]
    return [
        "## Variables read without an option",
        "",
        *table(["variable", "meaning"], rows),
        "",
    ]


def render() -> str:
    with clean_environment():  # argparse reads COLUMNS when it formats, not when built
        return _render()


def _render() -> str:
    parser = build_parser()
    env = _env_names(parser)
    lines = [
        "# Command line",
        "",
        "<!-- Generated by `python -m docs.gen` from the argparse parsers; do not edit. -->",
        "",
        "Every command and option of `lease-worker`, read from its parsers. An option with an",
        "environment variable reads it when the option is not on the command line; a switch",
        "takes `1`/`0`, `true`/`false`, `yes`/`no` or `on`/`off`, a repeatable option a",
        "comma-separated list. `lease-worker --version` prints the version. Exit status: 0",
        "after a shutdown, 1 with one line for a missing queue, denied access, a start-up",
        "that could not reach the queue service or a crashed worker, 2 with one line for",
        "invalid settings.",
        "",
        "```text",
        parser.format_usage().strip(),
        "```",
        "",
    ]
    for command in commands(parser):
        lines += _section(command, env)
    lines += _direct_variables()
    startup_s = STARTUP_CALL_TIMEOUTS * WorkerConfig().call_timeout_s
    lines += [NOTES.format(startup_calls=STARTUP_CALL_TIMEOUTS, startup_s=startup_s)]
    return "\n".join(lines).rstrip() + "\n"
