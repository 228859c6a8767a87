"""Running one page's Python blocks, in order, in one namespace (like a doctest session).

- A block runs in the page's temporary working directory, which is also first on
  `sys.path`, so that a later block imports what an earlier one saved.
- A block whose first line is `# name.py` is a file the reader saves: it is written there
  under that name, and run.
- Top-level `await` is allowed: such a block runs on the page's event loop, a looptime loop
  (virtual time: an hour's sleep takes no real time).
- A block of `--8<-- "examples/..."` lines includes a file of examples/ (pymdownx.snippets);
  examples/ has its own tests, so the block is checked to include a file that exists, and,
  when that file opens with `# name.py`, the file is saved for the page's later blocks.
- After the last block, the page's `test_*` functions that take no arguments are run, async
  ones on a looptime loop; the others are counted as defined only.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
import sys
import time
import traceback
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import looptime

from tests.docs.blocks import ROOT, Block

__all__ = ["PythonPage"]

_SAVED = re.compile(r"^#\s*(?P<name>[\w./-]+\.py)\s*$")
_SNIPPET = re.compile(r'^-{2}8<-{2}\s+"(?P<path>[^"]+)"\s*$')
_SECTION = re.compile(r"^\s*#\s*-{2}8<-{2}\s*\[(?P<edge>start|end):(?P<name>[\w-]+)\]\s*$")


@dataclass
class PythonPage:
    workdir: Path
    namespace: dict[str, Any] = field(default_factory=lambda: {"__name__": "__docs__"})
    saved: set[str] = field(default_factory=set)
    included: int = 0
    tests_run: list[str] = field(default_factory=list)
    tests_defined: list[str] = field(default_factory=list)
    slowest: tuple[float, str] = (0.0, "")
    _loop: asyncio.AbstractEventLoop | None = None

    def run(self, block: Block) -> str | None:
        """Run one block; a problem as text, or None."""
        lines = [line for line in block.text.splitlines() if line.strip()]
        if lines and all(_SNIPPET.match(line) for line in lines):
            return self._include(lines)
        if lines and (saved := _SAVED.match(lines[0])):
            self._save(saved["name"], block.text)
        started = time.monotonic()
        try:
            self._execute(block)
        except BaseException:
            return traceback.format_exc(limit=-3)
        took = time.monotonic() - started
        # Recorded, never judged: a pass/fail on wall time would fail on a loaded machine
        # (the suite's per-test timeout bounds a hang).
        self.slowest = max(self.slowest, (took, block.where))
        return None

    def _execute(self, block: Block) -> None:
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        code = compile(block.text, block.where, "exec", flags=flags, dont_inherit=True)
        if code.co_flags & inspect.CO_COROUTINE:
            self._event_loop().run_until_complete(eval(code, self.namespace))
        else:
            exec(code, self.namespace)

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = looptime.new_event_loop()
        return self._loop

    def _save(self, name: str, text: str) -> None:
        (self.workdir / name).parent.mkdir(parents=True, exist_ok=True)
        (self.workdir / name).write_text(text)
        self.saved.add(name)

    def _include(self, lines: list[str]) -> str | None:
        for line in lines:
            match = _SNIPPET.match(line)
            assert match is not None
            path, _, section = match["path"].partition(":")
            if not path.startswith("examples/") or not (ROOT / path).is_file():
                return f"{path}: includes must be files of examples/ (which has its own tests)"
            text = _section((ROOT / path).read_text(), section)
            if text is None:
                return f"{path}: no section {section!r}"
            first = text.lstrip().splitlines()[:1]
            if first and (saved := _SAVED.match(first[0])):
                self._save(saved["name"], text)
            self.included += 1
        return None

    def run_tests(self) -> list[str]:
        """Run the page's argument-free `test_*` functions; their failures."""
        problems = []
        for name, function in list(self.namespace.items()):
            if not (name.startswith("test_") and callable(function)):
                continue
            if inspect.signature(function).parameters:
                self.tests_defined.append(name)
                continue
            try:
                _call(function)
            except BaseException:
                problems.append(f"{name}: {traceback.format_exc(limit=-3)}")
            self.tests_run.append(name)
        return problems

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
        for name in self.saved:
            sys.modules.pop(name.removesuffix(".py").replace("/", "."), None)


def _call(function: Callable[[], Any]) -> None:
    if not inspect.iscoroutinefunction(function):
        function()
        return
    marks = {mark.name for mark in getattr(function, "pytestmark", [])}
    loop = looptime.new_event_loop() if "looptime" in marks else asyncio.new_event_loop()
    try:
        coroutine: Coroutine[Any, Any, Any] = function()
        loop.run_until_complete(coroutine)
    finally:
        loop.close()


def _section(text: str, name: str) -> str | None:
    """The lines between `# --8<-- [start:name]` and `# --8<-- [end:name]`, or all."""
    if not name:
        return "\n".join(line for line in text.splitlines() if not _SECTION.match(line))
    inside, found, kept = False, False, []
    for line in text.splitlines():
        edge = _SECTION.match(line)
        if edge and edge["name"] == name:
            inside, found = edge["edge"] == "start", True
        elif inside and not edge:
            kept.append(line)
    return "\n".join(kept) if found else None
