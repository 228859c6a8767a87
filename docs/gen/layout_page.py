"""docs/reference/layout.md, made at build time (docs/gen/hooks.py): the code's packages
and modules, each with the first sentence of its own docstring, and the layer contracts
pyproject.toml holds for import-linter.

A module without a docstring is listed with nothing beside it; a package without one takes
its line from `PACKAGES_WITHOUT_DOCSTRING` (and the generator refuses a package that has
neither).
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

import worker
from docs.gen.markdown import cell, table

__all__ = ["render"]

#: The repository holding the `worker` package imported (a test copy of docs/ lives elsewhere).
ROOT = Path(worker.__file__).resolve().parents[1]
TOPS = ("worker", "backends")
#: Lines for the packages whose `__init__.py` has no docstring.
PACKAGES_WITHOUT_DOCSTRING = {
    "worker.core": "The pure core: takes `now`, does no I/O (leases, the lease schedule, "
    "settlement, histograms, start-up checks).",
    "worker.runtime": "The async shell: the supervisor, receivers, dispatcher, handler "
    "tasks, the lease keeper (the only task that extends) and the settler.",
}


def _first_sentence(path: Path) -> str:
    docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
    paragraph = " ".join(docstring.split("\n\n")[0].split())
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[: end + 1]


def _packages() -> Iterator[Path]:
    for top in TOPS:
        for init in sorted((ROOT / top).rglob("__init__.py")):
            if "static" not in init.parts:
                yield init.parent


def _dotted(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _package_section(package: Path) -> list[str]:
    name = _dotted(package)
    line = _first_sentence(package / "__init__.py") or PACKAGES_WITHOUT_DOCSTRING.get(name)
    if not line:
        raise ValueError(f"{name}: give it a docstring or a line in PACKAGES_WITHOUT_DOCSTRING")
    rows = [
        [f"`{module.stem}`", cell(_first_sentence(module))]
        for module in sorted(package.glob("*.py"))
        if module.name != "__init__.py"
    ]
    lines = [f"### `{name}`", "", cell(line), ""]
    if rows:
        lines += [*table(["module", "what it is"], rows), ""]
    return lines


def _contracts() -> list[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = pyproject["tool"]["importlinter"]["contracts"]
    return [f"- {contract['name']} (`{contract['id']}`)" for contract in contracts]


def render() -> str:
    lines = [
        "# Code layout",
        "",
        "<!-- Generated at build time (docs/gen/hooks.py) from the packages' docstrings "
        "and pyproject.toml. -->",
        "",
        "One folder per layer, one module per noun. `examples/`, `bench/`, `deploy/`,",
        "`docs/`, `scripts/` and `tests/` sit beside the two packages; `tests/` mirrors the",
        "tree, plus `tests/contract/`, one suite run against the engine, moto's server and",
        "the embedded endpoint. Only `worker.cli` and `worker.testing` import both the runtime",
        "and the backends; the backends import only the contract; nothing imports",
        "`worker.integrations`, which uses only the public contract.",
        "",
        "## The import contracts",
        "",
        "Lower layers never import higher ones. import-linter checks these contracts of",
        "`pyproject.toml` on every run of `./scripts/test` (`lint-imports`):",
        "",
        *_contracts(),
        "",
        "## Packages and modules",
        "",
    ]
    for package in _packages():
        lines += _package_section(package)
    return "\n".join(lines).rstrip() + "\n"
