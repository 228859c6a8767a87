"""Command-line options declared as data, each also read from `LEASE_WORKER_<NAME>`.

argparse converts a string default with the option's `type`, so a value from the
environment is checked exactly like one from the command line. argparse checks neither
choices nor switches on defaults, so `check_env_values` does: a choice must be one of its
choices, a switch (`--adaptive`) one of 1/0, true/false, yes/no, on/off.

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
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ENV_PREFIX", "LOG_OPTIONS", "Option", "add_options", "check_env_values", "env"]

ENV_PREFIX = "LEASE_WORKER_"
_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off", "")


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
            kwargs.update(type=self.type, default=from_env, metavar=self.metavar)
            if self.choices is not None:
                kwargs["choices"] = list(self.choices)
        group.add_argument(self.flag, **kwargs)


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
        if option.choices is not None and value is not None and value not in option.choices:
            parser.error(f"{name}={value!r}: choose from {', '.join(option.choices)}")
