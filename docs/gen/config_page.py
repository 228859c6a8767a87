"""docs/reference/config.md from the settings classes themselves.

Fields, types and defaults come from the dataclasses and their signatures, each field's text
from its `#:` comment in the source, and the ranges from the classes' own checks: each field
is set to a few values out of any sane range and the `ConfigError` it raises is quoted (the
rule's words, without the value tried). The limits a backend adds are found the same way,
by asking `check_config` about a value one over each of the backend's limits.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import re
import textwrap
from collections.abc import Iterator
from typing import Any

from backends.smq.settings import SmqSettings
from backends.sqs.settings import SqsSettings
from docs.gen.cli_page import commands
from docs.gen.environment import clean_environment
from docs.gen.markdown import cell, table
from worker.backend import Limits
from worker.cli.main import build_parser
from worker.config import Backoff, ErrorPolicy, LeaseConfig, ShutdownConfig, WorkerConfig
from worker.core.preflight import check_config
from worker.errors import ConfigError
from worker.rules import SMQ_LIMITS, SQS_LIMITS

__all__ = ["CLASSES", "render"]

#: The settings classes, as the page lists them, with where each is used.
CLASSES: tuple[tuple[type[Any], str], ...] = (
    (WorkerConfig, "`Worker(WorkerConfig(...))`: one worker process"),
    (LeaseConfig, "`WorkerConfig(lease=...)`: how leases are held and extended"),
    (ShutdownConfig, "`WorkerConfig(shutdown=...)`: the shutdown's phases"),
    (ErrorPolicy, "`@app.handler(queue, on_error=...)`: what becomes of a failed message"),
    (Backoff, "`ErrorPolicy(backoff=...)`: the delays of the `default` and `backoff` policies"),
    (SqsSettings, "`backends.sqs`: how the worker reaches SQS"),
    (SmqSettings, "`backends.smq`: how the worker reaches SMQ"),
)
#: Values for the fields that have no default (SmqSettings' endpoint and keys).
_REQUIRED_EXAMPLES: dict[str, object] = {
    "endpoint": "http://127.0.0.1:9325",
    "access_key_id": "test",
    "access_key_secret": "test",
}
_BACKENDS = (("SQS", SQS_LIMITS), ("SMQ", SMQ_LIMITS))
#: Values out of any sane range, tried on every numeric field to read its rule.
_PROBES: tuple[object, ...] = (-1, 0, 0.5, 10**9, math.nan, "x")


def field_docs(cls: type[Any]) -> dict[str, str]:
    """Each field's `#:` comment lines (the Sphinx convention the code follows); a field
    right under another with no comment of its own shares that one (`adaptive_max_s`)."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    docs: dict[str, str] = {}
    previous: ast.AnnAssign | None = None
    for node in ast.parse(source).body[0].body:  # type: ignore[attr-defined]
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            comment: list[str] = []
            row = node.lineno - 2
            while row >= 0 and lines[row].strip().startswith("#:"):
                comment.insert(0, lines[row].strip()[2:].strip())
                row -= 1
            shared = previous is not None and previous.end_lineno == node.lineno - 1
            if not comment and shared and isinstance(previous.target, ast.Name):  # type: ignore[union-attr]
                docs[node.target.id] = docs[previous.target.id]  # type: ignore[union-attr]
            else:
                docs[node.target.id] = " ".join(comment)
            previous = node
        else:
            previous = None
    return docs


def _rules(cls: type[Any], name: str) -> list[str]:
    """The rules `cls` states when `name` is set to each probe value."""
    found: list[str] = []
    for value in _PROBES:
        try:
            _made(cls, **{name: value})
        except ConfigError as error:
            match = re.match(rf"^(?:\w+\.)?{name}(?:\[.*?\])?=.*?: (.*)$", str(error))
            rule = match.group(1) if match else None
            if rule and rule not in found:
                found.append(re.sub(r" \([\d.]+ s\)", "", rule))
        except (TypeError, ValueError, AttributeError):
            continue
    return list(dict.fromkeys(found))


def _backend_limits(name: str) -> list[str]:
    """`check_config`'s bound on the `WorkerConfig` or `LeaseConfig` field `name`, per backend."""
    found = []
    for backend, limits in _BACKENDS:
        for limit in sorted({v for v in dataclasses.asdict(limits).values() if type(v) is int}):
            config = _config_with(name, limit + 1)
            if config is None:
                continue
            try:
                check_config(config, limits)
            except ConfigError as error:
                if str(error).startswith(f"{name}="):
                    found.append(f"{backend}: at most {limit}")
                    break
    return found


def _config_with(name: str, value: int) -> WorkerConfig | None:
    try:
        changes: dict[str, Any] = {name: value}
        if name in {f.name for f in dataclasses.fields(WorkerConfig)}:
            return WorkerConfig(**changes)
        if name in {f.name for f in dataclasses.fields(LeaseConfig)}:
            changes["adaptive"] = name.startswith("adaptive_")
            return WorkerConfig(lease=LeaseConfig(**changes))
    except (ConfigError, TypeError):
        return None
    return None


def _default(cls: type[Any], name: str) -> str:
    parameter = inspect.signature(cls).parameters.get(name)
    if parameter is not None and parameter.default is inspect.Parameter.empty:
        return "required"
    made = getattr(_made(cls), name)
    shown = _shown(made)
    if parameter is not None and parameter.default is None and made is not None:
        return f"worked out (`{shown}` by default)"
    return f"`{shown}`"


def _made(cls: type[Any], **changes: object) -> Any:
    """`cls(**changes)` with its required fields filled in."""
    required = {
        name: _REQUIRED_EXAMPLES[name]
        for name, parameter in inspect.signature(cls).parameters.items()
        if parameter.default is inspect.Parameter.empty and name not in changes
    }
    return cls(**required, **changes)


def _shown(value: object) -> str:
    if dataclasses.is_dataclass(value):
        return f"{type(value).__name__}()"
    if hasattr(value, "value") and type(value).__module__.startswith("worker"):
        return repr(value.value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value)) if abs(value) >= 1 else str(value)
    if type(value).__name__ == "mappingproxy":
        return "{}"
    return repr(value)


def _cli_flags() -> dict[str, str]:
    """`run`'s options whose destination is a settings field of the same name."""
    with clean_environment():
        parser = build_parser()
    run = next(c for c in commands(parser) if c.path == ("run",))
    return {
        action.dest: action.option_strings[-1]
        for action in run.parser._actions
        if action.option_strings
    }


def _rows(cls: type[Any], flags: dict[str, str]) -> Iterator[list[str]]:
    docs = field_docs(cls)
    for item in dataclasses.fields(cls):
        rules = _rules(cls, item.name)
        if cls in (WorkerConfig, LeaseConfig) and item.type in ("int", "float"):
            rules += _backend_limits(item.name)
        overridden = cls in (WorkerConfig, LeaseConfig, ShutdownConfig)
        flag = flags.get(item.name, "") if overridden else ""
        yield [
            f"`{item.name}`",
            f"`{item.type}`",
            _default(cls, item.name),
            cell("; ".join(rules)),
            f"`{flag}`" if flag else "",
            cell(docs.get(item.name, "")),
        ]


def _limits_table() -> list[str]:
    docs = field_docs(Limits)
    rows = [
        [
            f"`{item.name}`",
            *(f"`{getattr(limits, item.name)}`" for _, limits in _BACKENDS),
            cell(docs.get(item.name, "")),
        ]
        for item in dataclasses.fields(Limits)
    ]
    return table(["limit", *(name for name, _ in _BACKENDS), "meaning"], rows)


def render() -> str:
    flags = _cli_flags()
    lines = [
        "# Configuration",
        "",
        "<!-- Generated by `python -m docs.gen` from the settings classes; do not edit. -->",
        "",
        "Every setting is a field of a frozen dataclass, checked when the object is made: a",
        "value out of range raises `ConfigError` naming the field and the rule below. The",
        "CLI column names the `lease-worker run` option (and so its `LEASE_WORKER_*`",
        "variable, see [the command line](cli.md)) that overrides the field.",
        "",
    ]
    for cls, where in CLASSES:
        lines += [f"## `{cls.__name__}`", "", where + ".", ""]
        if cls.__doc__:
            lines += [cell(inspect.cleandoc(cls.__doc__)), ""]
        header = ["field", "type", "default", "rule", "CLI", "meaning"]
        lines += [*table(header, list(_rows(cls, flags))), ""]
    lines += [
        "## What each backend allows",
        "",
        "Checked when the worker starts on a backend (`worker.core.preflight.check_config`):",
        "a setting over its backend's limit is a `ConfigError` before any call is made.",
        "",
        *_limits_table(),
        "",
    ]
    return "\n".join(lines).rstrip() + "\n"
