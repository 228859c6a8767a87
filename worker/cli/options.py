"""Command-line options declared as data, each also read from `LEASE_WORKER_<NAME>`.

A typed value from the environment is converted here, not by argparse (whose error would
name the option, `argument --max-in-flight: invalid int value`, though nobody typed it):
one that does not convert becomes a `BadEnvValue` default, which `check_env_values` turns
into a usage error naming the variable, unless the option was given on the command line,
which wins. argparse checks neither choices nor switches on defaults, so `check_env_values`
does: a choice must be one of its choices, a switch (`--adaptive`) one of 1/0, true/false,
yes/no, on/off.

A `LEASE_WORKER_*` variable that no option reads (and that is none of `OTHER_VARIABLES`) is
a misspelling more often than not: `unknown_variables` finds them, `describe_unknown` names
each in one sentence with the closest known name, for one warning at start.

Every parser is a `Parser`: argparse's, without abbreviations (`--visib 30` would set
`--visibility-s`, and a typo could pick another option as options are added).

Why by hand, and not click or pydantic-settings (weighed when this module was ~80 lines):
- click (`auto_envvar_prefix`) would remove the environment lookup and the checks above,
  but adds a dependency and changes what users type: its automatic names carry the command
  (`LEASE_WORKER_RUN_MAX_IN_FLIGHT`, so every option would need its name spelt out anyway),
  list options split on spaces instead of commas, and its error lines differ.
- pydantic-settings would parse types, Literals and booleans, but pulls in pydantic (a
  compiled dependency that users' own pins collide with), prints multi-line validation
  errors where we promise one line, and invites a second home for cross-field rules.
- Neither removes the real work: cross-field rules live in the frozen `worker.config`
  values (`ConfigError`), and the CLI only maps options onto them. Kept by hand.
"""

from __future__ import annotations

import argparse
import difflib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ENV_PREFIX",
    "LOG_OPTIONS",
    "OTHER_VARIABLES",
    "BadEnvValue",
    "Option",
    "Parser",
    "add_options",
    "check_env_values",
    "describe_unknown",
    "env",
    "unknown_variables",
]

ENV_PREFIX = "LEASE_WORKER_"
#: The variables read without an option, after the prefix: the console's token
#: (worker.cli.run), the JSON library's switch (worker.jsonlib), a `--processes` child's index.
OTHER_VARIABLES = ("CONSOLE_TOKEN", "JSON", "PROCESS_INDEX")
_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off", "")
_EXPECTED = {int: "an integer", float: "a number"}


class Parser(argparse.ArgumentParser):
    """argparse's parser with `allow_abbrev=False`; its subparsers are of this class too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


@dataclass(frozen=True, slots=True)
class BadEnvValue:
    """An option's default when its variable holds a value of the wrong type."""

    raw: str
    expected: str


def env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(ENV_PREFIX + name, default)


@dataclass(frozen=True, slots=True)
class Option:
    flag: str
    help: str
    type: Any = None
    metavar: str | None = None
    default: str | None = None
    choices: tuple[str, ...] | None = None
    #: "store_true" for a switch (env: 1/0, true/false, ...), "append" for a list (env: a,b).
    action: str | None = None

    @property
    def env_name(self) -> str:
        return self.flag.lstrip("-").replace("-", "_").upper()

    def add_to(self, group: Any) -> None:
        kwargs: dict[str, Any] = {"help": self.help}
        from_env = env(self.env_name, self.default)
        if self.action == "store_true":
            on = (from_env or "").strip().lower() in _ON
            kwargs.update(action="store_true", default=on)
        elif self.action == "append":
            items = [item for item in (from_env or "").split(",") if item]
            kwargs.update(action="append", default=items, metavar=self.metavar)
        else:
            default = self._typed(from_env) if self.env_name in _set_variables() else from_env
            kwargs.update(type=self.type, default=default, metavar=self.metavar)
            if self.choices is not None:
                kwargs["choices"] = list(self.choices)
        group.add_argument(self.flag, **kwargs)

    def _typed(self, raw: str | None) -> object:
        """The environment's value converted as argparse would, or a `BadEnvValue`."""
        if self.type is None or raw is None:
            return raw
        try:
            return self.type(raw)
        except (TypeError, ValueError):
            expected = _EXPECTED.get(self.type, f"a {getattr(self.type, '__name__', '')} value")
            return BadEnvValue(raw, expected)


def _set_variables() -> set[str]:
    """The `LEASE_WORKER_*` variables set, without the prefix."""
    return {name[len(ENV_PREFIX) :] for name in os.environ if name.startswith(ENV_PREFIX)}


def add_options(group: Any, options: Sequence[Option]) -> None:
    for option in options:
        option.add_to(group)


LOG_OPTIONS = (
    Option(
        "--log-format",
        "log lines (default: auto: console on a terminal, else JSON)",
        default="auto",
        choices=("auto", "console", "json"),
    ),
    Option(
        "--log-level",
        "(default: info)",
        default="info",
        choices=("debug", "info", "warning", "error"),
    ),
)


def check_env_values(
    parser: argparse.ArgumentParser, args: argparse.Namespace, options: Sequence[Option]
) -> None:
    """A usage error for an environment value argparse let through unchecked."""
    for option in options:
        name = ENV_PREFIX + option.env_name
        if option.action == "store_true":
            raw = os.environ.get(name)
            if raw is not None and raw.strip().lower() not in _ON + _OFF:
                parser.error(f"{name}={raw!r}: use 1/0, true/false, yes/no or on/off")
            continue
        value = getattr(args, option.env_name.lower(), None)
        if isinstance(value, BadEnvValue):
            parser.error(f"{name}={value.raw!r}: expected {value.expected} (sets {option.flag})")
        if option.choices is not None and value is not None and value not in option.choices:
            parser.error(f"{name}={value!r}: choose from {', '.join(option.choices)}")


def unknown_variables(options: Iterable[Option]) -> list[str]:
    """The `LEASE_WORKER_*` variables set that no option in `options` reads, sorted."""
    known = {option.env_name for option in options} | set(OTHER_VARIABLES)
    return sorted(ENV_PREFIX + name for name in _set_variables() - known)


def describe_unknown(names: Sequence[str], options: Iterable[Option]) -> str:
    """One sentence naming each of `names`, with the closest known variable where one is
    close (compared without the shared prefix, which would make every name look close)."""
    known = sorted({option.env_name for option in options} | set(OTHER_VARIABLES))
    shown = []
    for name in names:
        close = difflib.get_close_matches(name[len(ENV_PREFIX) :], known, n=1, cutoff=0.6)
        shown.append(f"{name} (did you mean {ENV_PREFIX}{close[0]}?)" if close else name)
    return (
        f"{', '.join(shown)}: lease-worker reads no such variable, so "
        f"{'it is' if len(names) == 1 else 'they are'} ignored; each option --x-y is "
        f"{ENV_PREFIX}X_Y (see lease-worker COMMAND --help)"
    )
