"""docs/reference/logs.md from the code's structlog calls, found by an AST scan.

Every call `<something named *log*>.<level>(EVENT, field=..., ...)` in `worker/` and
`backends/` is an event: its name is the first argument, its fields the keyword arguments.
An event name built by an f-string is expanded: `f"{events}.started"` with every string
constant passed anywhere in the code as a keyword argument of that name (`events=`),
`f"settle.{action.value}_failed"` with the values of the Enum class `Action`. A call
whose event name is neither (a variable) is reported as unresolved, and the test fails on it,
so the scan cannot silently miss an event. tests/docs/test_reference_pages.py also runs a
worker and checks that every event it logs is on the page.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from docs.gen.markdown import table
from worker.cli import logging as caps

__all__ = ["LEVELS", "NEVER_LOGGED", "ROOT", "Event", "Scan", "render", "scan"]

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("worker", "backends")
LEVELS = ("debug", "info", "warning", "error", "exception", "critical")
#: Names the f-string expansion makes that no code path logs, each with the reason.
NEVER_LOGGED = {
    "settle.forget_failed": "Action.FORGET is settled in place by Settler.settle: no call",
    "settle.forget_call_failed": "Action.FORGET is settled in place by Settler.settle: no call",
}
#: Fields every line of a handler's task carries (bound with structlog's contextvars).
CONTEXT = ("queue", "message_id")


@dataclass
class Event:
    name: str
    levels: set[str] = field(default_factory=set)
    fields: set[str] = field(default_factory=set)
    modules: set[str] = field(default_factory=set)


@dataclass
class Scan:
    events: dict[str, Event] = field(default_factory=dict)
    #: `path:line` of calls whose event name the scan could not read.
    unresolved: list[str] = field(default_factory=list)


def _is_log_call(node: ast.Call) -> bool:
    func = node.func
    if not isinstance(func, ast.Attribute) or func.attr not in LEVELS or not node.args:
        return False
    return "log" in ast.unparse(func.value).lower()


def _keyword_constants(trees: Iterable[ast.AST]) -> dict[str, set[str]]:
    """Every string constant passed as a keyword argument, by keyword."""
    found: dict[str, set[str]] = defaultdict(set)
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg is not None:
                value = node.value
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    found[node.arg].add(value.value)
    return found


def _enum_values(trees: Iterable[ast.AST]) -> dict[str, set[str]]:
    """Every Enum class's string values, by the class name in snake case (`Action` ->
    `action.value`): `f"settle.{action.value}_failed"` is read with the values of `Action`."""
    found: dict[str, set[str]] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            if not any("Enum" in ast.unparse(base) for base in node.bases):
                continue
            values = {
                item.value.value
                for item in node.body
                if isinstance(item, ast.Assign)
                and isinstance(item.value, ast.Constant)
                and isinstance(item.value.value, str)
            }
            snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in node.name)
            found[snake.lstrip("_") + ".value"] = values
    return found


def _names(node: ast.expr, constants: dict[str, set[str]]) -> list[str] | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if not isinstance(node, ast.JoinedStr):
        return None
    names = [""]
    for part in node.values:
        if isinstance(part, ast.Constant):
            names = [name + str(part.value) for name in names]
        elif isinstance(part, ast.FormattedValue):
            choices = sorted(constants.get(ast.unparse(part.value), ()))
            if not choices:
                return None
            names = [name + choice for name in names for choice in choices]
        else:
            return None
    return names


def _modules() -> Iterator[tuple[str, ast.AST]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            yield module.removesuffix(".__init__"), ast.parse(path.read_text(), str(path))


def scan() -> Scan:
    trees = list(_modules())
    constants = _keyword_constants(tree for _, tree in trees)
    constants.update(_enum_values(tree for _, tree in trees))
    result = Scan()
    for module, tree in trees:
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and _is_log_call(node)):
                continue
            names = _names(node.args[0], constants)
            if names is None:
                result.unresolved.append(f"{module}:{node.lineno}")
                continue
            assert isinstance(node.func, ast.Attribute)
            for name in names:
                event = result.events.setdefault(name, Event(name))
                event.levels.add(node.func.attr)
                event.modules.add(module)
                event.fields.update(k.arg or "**" for k in node.keywords)
    return result


def _fields(event: Event) -> str:
    named = sorted(f for f in event.fields if f != "**")
    shown = ", ".join(f"`{f}`" for f in named)
    if "**" in event.fields:
        shown += (", " if shown else "") + "and more (`**fields`)"
    return shown


def render() -> str:
    result = scan()
    if result.unresolved:
        raise ValueError(f"log calls whose event name is not a constant: {result.unresolved}")
    order = {level: rank for rank, level in enumerate(LEVELS)}
    rows = [
        [
            f"`{event.name}`",
            ", ".join(sorted(event.levels, key=order.__getitem__)),
            _fields(event),
            ", ".join(f"`{m}`" for m in sorted(event.modules)),
        ]
        for event in sorted(result.events.values(), key=lambda e: e.name)
        if event.name not in NEVER_LOGGED
    ]
    lines = [
        "# Log events",
        "",
        "<!-- Generated by `python -m docs.gen` by scanning the code's structlog calls; "
        "do not edit. -->",
        "",
        "Every event lease-worker logs, with the fields the line carries. Lines go to",
        "standard error, one JSON object each (`--log-format json`, and `auto` when standard",
        "error is not a terminal) or one console line each. Each line also carries `event`,",
        "`level` and `timestamp`; inside a handler's task, the context "
        + " and ".join(f"`{c}`" for c in CONTEXT),
        "(bound with structlog's contextvars, so your handler's own lines get them too).",
        "The standard library's records (botocore, aiohttp, your own `logging` loggers) go",
        "through the same renderer and carry the same context; botocore's loggers never log",
        "below INFO, since their DEBUG lines hold whole requests.",
        "",
        "Bodies and credentials are never logged, and a traceback never shows local",
        "variables, in either format. What an exception adds to a line is capped: its",
        f"message (and an `error` or `reason` field) at {caps.MESSAGE_CAP:,} characters, a",
        f"whole traceback at {caps.TRACEBACK_CAP:,}, {caps.FRAMES_CAP} frames per exception,",
        f"{caps.EXCEPTIONS_CAP} exceptions per traceback (causes and contexts), and an event's",
        f"text at {caps.EVENT_CAP:,}.",
        "",
        "Nor do a message's values reach the log through an exception's text (`int(body['x'])`",
        "quotes the value): inside a handler's task, every text field of a line (an",
        "exception, a reason, a standard library record's message) has the string values of",
        "the message's body (4 characters or more) and its long numbers (6 digits or more)",
        "replaced by `<redacted>`, in every format.",
        "",
        *table(["event", "level", "fields", "logged by"], rows),
        "",
        f"{len(rows)} events.",
        "",
    ]
    return "\n".join(lines).rstrip() + "\n"
