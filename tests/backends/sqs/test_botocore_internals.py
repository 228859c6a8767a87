"""botocore's and aiobotocore's private names are used in one module only (issue 40), and
the releases the SQS client suites run on are the ends of pyproject.toml's bound.

`backends.sqs.botocore_internals` says why each one it uses is there; everything else in
`backends` and `worker` goes through public interfaces. The private names are read from
botocore's and aiobotocore's own source (a function, method or class whose name starts
with one underscore, an attribute they set on `self`, a module-level name, a module), so
a use of one is caught whatever object it is reached through.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[3]
ALLOWED = ROOT / "backends" / "sqs" / "botocore_internals.py"
#: Names that Python itself gives objects (a namedtuple's `_replace`), not botocore's.
_PYTHONS_OWN = frozenset({"_replace", "_asdict", "_fields", "_make"})


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _package_files(package: str) -> Iterator[Path]:
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations
    for location in spec.submodule_search_locations:
        yield from Path(location).rglob("*.py")


def _defined(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield node.name
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            yield node.attr
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            yield node.id


@cache
def their_private_names() -> frozenset[str]:
    names: set[str] = set()
    for package in ("botocore", "aiobotocore"):
        for path in _package_files(package):
            if _private(path.stem):
                names.add(path.stem)
            names.update(_defined(ast.parse(path.read_bytes())))
    return frozenset(name for name in names if _private(name)) - _PYTHONS_OWN


def _from_them(module: str) -> bool:
    return module.split(".")[0] in ("botocore", "aiobotocore")


def _named_in_getattr(node: ast.Call) -> str | None:
    """ "name" of `getattr(obj, "name", ...)` (or `hasattr`, `setattr`), written out."""
    named = isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr", "setattr")
    if named and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
        return str(node.args[1].value)
    return None


def uses(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, what) for each private name of botocore or aiobotocore `tree` reaches."""
    private = their_private_names()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in private:
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                yield node.lineno, ast.unparse(node)
        elif isinstance(node, ast.Call) and _named_in_getattr(node) in private:
            yield node.lineno, ast.unparse(node)
        elif isinstance(node, ast.ImportFrom) and node.module and _from_them(node.module):
            for alias in node.names:
                if any(_private(part) for part in [*node.module.split("."), alias.name]):
                    yield node.lineno, f"from {node.module} import {alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _from_them(alias.name) and any(map(_private, alias.name.split("."))):
                    yield node.lineno, f"import {alias.name}"


def test_the_private_names_it_finds_are_botocores() -> None:
    names = their_private_names()
    assert {"_get_session", "_user_agent_creator", "_request_signer", "_calculate_ttl"} <= names
    assert {"_normalize_url_path", "_constants", "DEFAULT_KEEPALIVE_TIMEOUT"} & names == {
        "_normalize_url_path",
        "_constants",
    }


def test_the_checker_sees_each_way_of_reaching_one() -> None:
    source = (
        "from aiobotocore._constants import DEFAULT_KEEPALIVE_TIMEOUT\n"
        "import aiobotocore._constants\n"
        "x = client._request_signer._credentials\n"
        "self._request_signer = 1\n"
        "parts._replace(path='/')\n"
        "getattr(client, '_user_agent_creator', None)\n"
    )
    assert sorted(line for line, _ in uses(ast.parse(source))) == [1, 2, 3, 3, 6]


def _imports_them(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and _from_them(node.module):
            return True
        if isinstance(node, ast.Import) and any(_from_them(a.name) for a in node.names):
            return True
    return False


def test_no_private_name_of_botocore_outside_the_one_module() -> None:
    """In every module of `backends` and `worker` that imports botocore or aiobotocore (the
    others have names of their own that botocore happens to use too: `_queue`, `_limits`)."""
    found: list[str] = []
    checked = 0
    for folder in ("backends", "worker"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_bytes())
            if path == ALLOWED or not _imports_them(tree):
                continue
            checked += 1
            found.extend(f"{path.relative_to(ROOT)}:{line}: {what}" for line, what in uses(tree))
    assert found == []
    assert checked >= 8  # backends.sqs's modules, the factory, the DynamoDB store


def test_the_one_module_uses_them() -> None:
    assert list(uses(ast.parse(ALLOWED.read_bytes())))


def _pins() -> dict[str, str]:
    text = (ROOT / "scripts" / "oldest-aiobotocore.txt").read_text()
    pairs = (line.split("==") for line in text.splitlines() if line and line[0] != "#")
    return {name.strip(): version.strip() for name, version in pairs}


def _bound() -> SpecifierSet:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = [Requirement(dependency) for dependency in project["dependencies"]]
    return next(req.specifier for req in found if req.name == "aiobotocore")


def test_the_oldest_pass_runs_the_floor_of_the_bound() -> None:
    """scripts/test's second pass runs the lowest aiobotocore pyproject.toml allows, with
    the lowest botocore that one accepts; and each pass runs one the bound allows."""
    pins, bound = _pins(), _bound()
    floors = [spec.version for spec in bound if spec.operator == ">="]
    assert floors == [pins["aiobotocore"]]
    assert pins["aiobotocore"] in bound
    installed = importlib.metadata.version("aiobotocore")
    assert installed in bound
    if installed == pins["aiobotocore"]:
        needs = [Requirement(r) for r in importlib.metadata.requires("aiobotocore") or []]
        botocore = next(req.specifier for req in needs if req.name == "botocore")
        assert [s.version for s in botocore if s.operator == ">="] == [pins["botocore"]]
        assert importlib.metadata.version("botocore") == pins["botocore"]
