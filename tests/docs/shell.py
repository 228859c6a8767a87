"""Checks of the shell blocks' commands, one logical line at a time.

- `lease-worker ...` is parsed by the real argparse parser (an unknown option or a bad value
  fails), with the block's `export`s and inline `NAME=value` settings as its environment;
  `lease-worker run APP` also loads APP when the page saved its module (or it is one of
  examples/).
- `pip install ...` installs lease-worker with extras pyproject.toml declares, or a package
  of `OTHER_PACKAGES`.
- `python -m MODULE` names a module that exists (or one the page installs first).
- `aws ... --endpoint-url` against a local server gives a region and credentials (or
  `--no-sign-request`): the AWS CLI refuses to run without them.
- Any other program must be in `PROGRAMS`, with the reason it is not run.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import io
import os
import re
import shlex
import sys
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.docs.blocks import ROOT
from worker.cli.loader import load_app
from worker.cli.main import build_parser
from worker.cli.options import ENV_PREFIX

__all__ = [
    "PROGRAMS",
    "Shell",
    "environment_problems",
    "forget_modules_under",
    "logical_lines",
]

#: Programs whose lines are accepted as written, and why they are not checked further.
PROGRAMS: Mapping[str, str] = {
    "cd": "moves to a directory the reader made",
    "mkdir": "makes the reader's own directory",
    "source": "activates the virtual environment the block made",
    "unset": "clears variables an earlier block set",
    "git": "clones or tags the repository: needs its URL or the maintainer's remote",
    "kubectl": "needs a cluster; deploy/ is validated without one by tests/deploy",
    "docker": "needs a Docker daemon; tests/deploy/test_dockerfile.py checks the Dockerfile",
    "curl": "talks to a running worker's ops listener; tests/ops serve the same paths",
    "redis-server": "a Debian package the tests start themselves (tests/idempotency)",
    "./scripts/demo": "runs the demo worker until Ctrl-C; its app is examples/hello.py",
    "./scripts/test": "the whole check: this test is part of it",
    "./scripts/docs": "builds this site: tests/docs/test_site.py does the same",
    "bench/run": "the benchmarks; tests/bench runs their smoke size",
    "envsubst": "fills the reader's account id into a policy of deploy/iam/ (tests/deploy)",
    "promtool": "checks the alert rules; tests/ops/test_alert_rules.py runs it",
}
#: Packages other than lease-worker a page may install, and why.
OTHER_PACKAGES: Mapping[str, str] = {
    "build": "the release checklist builds the sdist and the wheel",
    "twine": "the release checklist uploads them",
}
#: `python -m` modules a page installs before it runs them.
INSTALLED_BY_PAGE = frozenset(OTHER_PACKAGES)
_REQUIREMENT = re.compile(r"^(?P<name>[^\[\]]+?)(?:\[(?P<extras>[^\]]*)\])?$")
_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def logical_lines(text: str) -> Iterator[str]:
    """The block's commands: continuation lines joined, comments and heredoc bodies dropped."""
    lines = iter(text.splitlines())
    for line in lines:
        while line.rstrip().endswith("\\"):
            line = line.rstrip()[:-1].rstrip() + " " + next(lines, "").strip()
        if line.strip() and not line.lstrip().startswith("#"):
            if heredoc := re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line):
                for body in lines:
                    if body.strip() == heredoc.group(1):
                        break
            yield line.strip()


def _extras() -> set[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return set(pyproject["project"]["optional-dependencies"])


@dataclass
class Shell:
    """One page's shell blocks, in order: `export`s carry over to later blocks."""

    workdir: Path
    saved: set[str] = field(default_factory=set)
    env: dict[str, str] = field(default_factory=dict)
    #: Lines accepted by program (for the report).
    programs: dict[str, int] = field(default_factory=dict)
    #: The current line's own `NAME=value` settings.
    _inline: dict[str, str] = field(default_factory=dict)

    def check(self, text: str) -> list[str]:
        """Problems with the block's lines; empty when every line passes."""
        return [problem for line in logical_lines(text) for problem in self._line(line)]

    def _line(self, line: str) -> list[str]:
        tokens = shlex.split(line, comments=True)
        env: dict[str, str] = {}
        while tokens and _ASSIGNMENT.match(tokens[0]):
            name, _, value = tokens.pop(0).partition("=")
            env[name] = value
        if not tokens:
            self.env.update(env)
            return []
        self._inline = env
        program = tokens[0].rsplit("/bin/", 1)[-1]
        self.programs[program] = self.programs.get(program, 0) + 1
        if program == "export":
            for item in tokens[1:]:
                name, _, value = item.partition("=")
                self.env[name] = value
            return []
        checks = {
            "lease-worker": self._lease_worker,
            "pip": self._pip,
            "pip3": self._pip,
            "python": self._python,
            "python3": self._python,
            "aws": self._aws,
        }
        if program in checks:
            return [f"{line!r}: {p}" for p in checks[program](tokens[1:], {**self.env, **env})]
        if program not in PROGRAMS:
            return [f"{line!r}: {program!r} is not in tests/docs/shell.py's PROGRAMS"]
        if program.startswith(("./", "bench/")) and not (ROOT / program).is_file():
            return [f"{line!r}: {program} does not exist"]
        return []

    def _lease_worker(self, args: list[str], env: dict[str, str]) -> list[str]:
        errors = io.StringIO()
        with (
            _environment(env),
            contextlib.redirect_stderr(errors),
            contextlib.redirect_stdout(io.StringIO()),
        ):
            try:
                parsed = build_parser().parse_args(args)
            except SystemExit as exit:
                return [] if exit.code == 0 else [errors.getvalue().strip()]
        problems = environment_problems(args, env, inline=self._inline)
        if parsed.command == "run":
            problems += self._load(parsed.app)
        return problems

    def _load(self, spec: str) -> list[str]:
        module = spec.partition(":")[0]
        top = module.partition(".")[0]
        if f"{top}.py" in self.saved or (self.workdir / top).is_dir():
            where = self.workdir
        elif top == "examples":
            where = ROOT
        else:
            return []  # the reader's own module, which the page does not show
        with _imports_from(where):
            try:
                load_app(spec)
            except Exception as error:
                return [f"APP {spec!r} does not load: {type(error).__name__}: {error}"]
        return []

    def _pip(self, args: list[str], env: dict[str, str]) -> list[str]:
        if not args or args[0] != "install":
            return [f"pip {' '.join(args)}: only `pip install` is checked"]
        problems = []
        for requirement in (a for a in args[1:] if not a.startswith("-")):
            match = _REQUIREMENT.match(requirement)
            assert match is not None
            name, extras = match["name"], match["extras"]
            ours = name in (".", "lease-worker", "lease_worker") or "lease_worker-" in name
            if not ours:
                if name not in OTHER_PACKAGES:
                    problems.append(f"{name!r} is not lease-worker nor in OTHER_PACKAGES")
                continue
            unknown = {e.strip() for e in (extras or "").split(",") if e.strip()} - _extras()
            if unknown:
                problems.append(f"extras {sorted(unknown)} are not in pyproject.toml")
        return problems

    def _python(self, args: list[str], env: dict[str, str]) -> list[str]:
        if len(args) < 2 or args[0] != "-m":
            return []  # a script of the page's, or -c
        module = args[1]
        if module == "pip":
            return self._pip(args[2:], env)
        if module in INSTALLED_BY_PAGE:
            return []
        with _imports_from(ROOT):
            found = importlib.util.find_spec(module) is not None
        return [] if found else [f"python -m {module}: no such module"]

    def _aws(self, args: list[str], env: dict[str, str]) -> list[str]:
        local = any(a.startswith("--endpoint-url") for a in args) or "AWS_ENDPOINT_URL" in env
        if not local:
            return []
        problems = []
        region = "--region" in args or {"AWS_REGION", "AWS_DEFAULT_REGION"} & set(env)
        if not region:
            problems.append("a local endpoint still needs --region (or AWS_REGION)")
        keys = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= set(env)
        if not keys and "--no-sign-request" not in args and "--profile" not in args:
            problems.append("the AWS CLI needs credentials, dummy ones will do")
        return problems


def environment_problems(
    args: list[str], env: Mapping[str, str], *, inline: Mapping[str, str]
) -> list[str]:
    """A `LEASE_WORKER_*` setting of the line itself that no option of the command reads,
    or any setting whose value is not among the option's choices (argparse checks neither
    on a default from the environment). An `export`ed one may be meant for another
    command of the page."""
    with _environment({}):
        parser = build_parser()
    words = [a for a in args if not a.startswith("-")]
    command = parser
    for word in words:
        sub = next((a for a in command._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None or word not in sub.choices:
            break
        command = sub.choices[word]
    actions = {action.dest.upper(): action for action in command._actions}
    problems = []
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX) or name in _read_directly():
            continue
        action = actions.get(name.removeprefix(ENV_PREFIX))
        if action is None and name in inline:
            problems.append(f"{name}: no option of this command reads it")
        elif action is not None and action.choices and value not in action.choices:
            problems.append(f"{name}={value}: choose from {', '.join(map(str, action.choices))}")
    return problems


@functools.cache
def _read_directly() -> frozenset[str]:
    """`LEASE_WORKER_*` variables the code reads itself, not through an option."""
    names = set()
    for path in (ROOT / "worker").rglob("*.py"):
        names.update(re.findall(r"[\"'](LEASE_WORKER_[A-Z][A-Z0-9_]*)[\"']", path.read_text()))
    return frozenset(names)


@contextlib.contextmanager
def _environment(extra: Mapping[str, str]) -> Iterator[None]:
    """No `LEASE_WORKER_*` of the test run's own, and the block's settings."""
    saved = dict(os.environ)
    for name in [n for n in os.environ if n.startswith("LEASE_WORKER_")]:
        del os.environ[name]
    os.environ.update(extra)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _imports_from(directory: Path) -> Iterator[None]:
    """Import from `directory` as `lease-worker run` there would; then forget the modules
    of a page's own directory (another page may save a different `app.py`)."""
    path, cwd = list(sys.path), Path.cwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(cwd)
        sys.path[:] = path
        if directory != ROOT:
            forget_modules_under(directory)


def forget_modules_under(directory: Path) -> None:
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", "") or "").startswith(str(directory)):
            del sys.modules[name]
