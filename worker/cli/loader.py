"""Loading the user's application: `APP` as `module:attribute`, imported from the current
directory.

lease-worker's own import names are `worker` and `backends`, names a user's project may well
use beside its app (`worker.py`, `backends/`). Python holds one module per name, and ours are
imported first, so in this process `import worker` gives lease-worker and the user's file of
that name cannot be imported at all. Hence:

- an APP under such a name (`worker:app`, `backends.jobs:app`) is an error saying so;
- any other APP runs, after one warning line naming the hidden files (not repeated by the
  children of `--processes`, whose parent said it);
- an import in the app that fails on one of those names says why.

An app (or a module it imports) that does not parse is one line naming the file, the line
and Python's reason (`SyntaxError`, `IndentationError`), not a traceback through importlib.

A file or folder counts as the user's when it resolves to somewhere else than lease-worker's
own package: run from lease-worker's own checkout, `./worker/` is the package itself.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path

import structlog

from worker.app import Worker
from worker.cli.processes import INDEX_VARIABLE
from worker.errors import ConfigError

__all__ = ["OWN_PACKAGES", "Clash", "describe_hidden", "find_clashes", "load_app"]

#: lease-worker's top-level import names.
OWN_PACKAGES = ("worker", "backends")
#: Where they are: side by side, as pyproject installs them.
_OWN_ROOT = Path(__file__).resolve().parents[2]
#: Names to suggest for a clashing file, the first one the directory does not use.
_RENAMES = {"worker": ("app", "tasks", "app_worker"), "backends": ("app_backends", "adapters")}


@dataclass(frozen=True, slots=True)
class Clash:
    """A module or package of the user's with one of lease-worker's own import names."""

    name: str
    path: Path
    is_package: bool

    @property
    def shown(self) -> str:
        return f"./{self.path.name}/" if self.is_package else f"./{self.path.name}"

    @property
    def rename_to(self) -> str:
        taken = {entry.name for entry in self.path.parent.iterdir()}
        names = _RENAMES[self.name]
        new = next((n for n in names if n not in taken and f"{n}.py" not in taken), names[-1])
        return f"{new}/" if self.is_package else f"{new}.py"

    def explain(self) -> str:
        return (
            f"{self.shown} has the same name as lease-worker's own package {self.name!r} and "
            f"cannot be imported under that name; rename it, e.g. to {self.rename_to}"
        )


def describe_hidden(clashes: Sequence[Clash]) -> str:
    """One sentence on what lease-worker's packages hide in this directory, and the fix."""
    one = len(clashes) == 1
    files = " and ".join(clash.shown for clash in clashes)
    imports = " and ".join(f"`import {clash.name}`" for clash in clashes)
    renames = ", ".join(f"{clash.shown} to {clash.rename_to}" for clash in clashes)
    return (
        f"lease-worker's own package{'' if one else 's'} hide{'s' if one else ''} {files}: "
        f"{imports} give{'s' if one else ''} lease-worker's, never "
        f"{'this' if one else 'these'}; rename {'it' if one else 'them'}, e.g. {renames}"
    )


def find_clashes(directory: Path) -> list[Clash]:
    """The modules and packages in `directory` that lease-worker's own packages hide."""
    clashes = []
    for name in OWN_PACKAGES:
        spec = PathFinder.find_spec(name, [str(directory)])
        clash = _clash(name, spec) if spec is not None else None
        if clash is not None:
            clashes.append(clash)
    return clashes


def _clash(name: str, spec: ModuleSpec) -> Clash | None:
    locations = list(spec.submodule_search_locations or ())
    if not locations:
        return Clash(name, Path(str(spec.origin)), is_package=False)
    path = Path(locations[0])
    if path.resolve() == (_OWN_ROOT / name).resolve():
        return None
    if spec.origin is None and not _holds_python(path):
        return None  # a plain folder (a Dockerfile's, say), not a namespace package in use
    return Clash(name, path, is_package=True)


def _holds_python(folder: Path) -> bool:
    return any(folder.glob("*.py")) or any(folder.glob("*/__init__.py"))


def load_app(spec: str) -> Worker:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"APP={spec!r}: expected module:attribute, e.g. examples.hello:app")
    directory = Path.cwd()
    clashes = {clash.name: clash for clash in find_clashes(directory)}
    top = module_name.partition(".")[0]
    if top in clashes:
        raise ConfigError(f"APP={spec!r}: {clashes[top].explain()}")
    if clashes and INDEX_VARIABLE not in os.environ:
        structlog.get_logger("lease_worker.cli").warning(
            "app.name_clash",
            files=[clash.shown for clash in clashes.values()],
            detail=describe_hidden(list(clashes.values())),
        )
    module = _import(spec, module_name, directory, clashes)
    app = getattr(module, attribute, None)
    if not isinstance(app, Worker):
        raise ConfigError(
            f"APP={spec!r}: {attribute!r} in {module_name} is not a lease-worker Worker"
        )
    return app


def _import(spec: str, module_name: str, directory: Path, clashes: dict[str, Clash]) -> object:
    # Ours first, before the directory goes on sys.path: the user's files never take the names.
    for name in OWN_PACKAGES:
        importlib.import_module(name)
    if sys.path[:1] != [str(directory)]:
        sys.path.insert(0, str(directory))
    try:
        return importlib.import_module(module_name)
    except SyntaxError as error:  # the place is all a traceback would add: one line says it
        where = f"{error.filename}, line {error.lineno}" if error.filename else "the app"
        raise ConfigError(
            f"APP={spec!r}: {type(error).__name__} in {where}: {error.msg}; fix it and run again"
        ) from None
    except ImportError as error:
        missing = error.name or ""
        clash = clashes.get(missing.partition(".")[0])
        if clash is None and not isinstance(error, ModuleNotFoundError):
            raise  # a name missing from a module: the app's own bug, its traceback helps
        reason = f": {clash.explain()}" if clash is not None else ""
        raise ConfigError(f"APP={spec!r}: cannot import {missing!r}{reason}") from None
