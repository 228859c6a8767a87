"""Command-line options declared as data, each also read from `LEASE_WORKER_<NAME>`.

argparse converts a string default with the option's `type`, so a value from the
environment is checked exactly like one from the command line; choices are not checked on
defaults by argparse, so `check_env_choices` does that.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ENV_PREFIX", "LOG_OPTIONS", "Option", "add_options", "check_env_choices", "env"]

ENV_PREFIX = "LEASE_WORKER_"


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
    #: "store_true" for a switch (env value "1" turns it on), "append" for a list (env: a,b).
    action: str | None = None

    @property
    def env_name(self) -> str:
        return self.flag.lstrip("-").replace("-", "_").upper()

    def add_to(self, group: Any) -> None:
        kwargs: dict[str, Any] = {"help": self.help}
        from_env = env(self.env_name, self.default)
        if self.action == "store_true":
            kwargs.update(action="store_true", default=from_env == "1")
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
        "--log-format", "log lines (default: json)", default="json", choices=("console", "json")
    ),
    Option(
        "--log-level",
        "(default: info)",
        default="info",
        choices=("debug", "info", "warning", "error"),
    ),
)


def check_env_choices(
    parser: argparse.ArgumentParser, args: argparse.Namespace, options: Sequence[Option]
) -> None:
    for option in options:
        value = getattr(args, option.env_name.lower(), None)
        if option.choices is not None and value is not None and value not in option.choices:
            parser.error(
                f"{ENV_PREFIX}{option.env_name}={value!r}: choose from {', '.join(option.choices)}"
            )
