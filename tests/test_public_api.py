"""The public API is exactly `__all__`, of `worker` and of each public module of `backends`.

As anyio's `tests/test_all_attributes.py` does: every name in `__all__` exists and is
documented, and nothing public is reachable from the package without being in `__all__`.
A new public name that is not added to `__all__` (or a name in `__all__` that is gone) fails
here.
"""

from __future__ import annotations

import importlib
import inspect
import types
import typing
from collections.abc import Iterator

import pytest

import worker

#: Modules whose `__all__` is their public API, besides `worker` itself.
PUBLIC_MODULES = (
    "worker",
    "worker.testing",
    "worker.idempotency",
    "backends",
    "backends.memory",
    "backends.sqs",
    "backends.serve.sqs",
)


def _public_names(module: types.ModuleType) -> set[str]:
    """A package's every public name (its `__init__` is its API: what it imports is public
    unless underscored); a plain module's classes and functions defined in it."""
    is_package = hasattr(module, "__path__")
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)  # subpackages and imported modules
        and name != "annotations"  # `from __future__ import annotations`
        and (is_package or getattr(value, "__module__", None) == module.__name__)
    }


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_all_is_a_sorted_tuple_of_existing_names(module_name: str) -> None:
    module = importlib.import_module(module_name)
    exported = module.__all__
    assert isinstance(exported, tuple), f"{module_name}.__all__ must be a tuple"
    assert list(exported) == sorted(exported), f"{module_name}.__all__ is not sorted"
    missing = [name for name in exported if not hasattr(module, name)]
    assert missing == []


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_nothing_public_is_left_out_of_all(module_name: str) -> None:
    module = importlib.import_module(module_name)
    left_out = _public_names(module) - set(module.__all__)
    assert left_out == set(), f"public in {module_name} but not in __all__: {sorted(left_out)}"


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_exported_class_and_function_is_documented(module_name: str) -> None:
    module = importlib.import_module(module_name)
    undocumented = [
        name
        for name in module.__all__
        if (inspect.isclass(obj := getattr(module, name)) or inspect.isfunction(obj))
        and not inspect.getdoc(obj)
    ]
    assert undocumented == []


def test_exported_names_are_defined_in_the_package() -> None:
    """Nothing is re-exported from a third-party library under our name."""
    foreign = [
        name
        for name in worker.__all__
        if (inspect.isclass(obj := getattr(worker, name)) or inspect.isfunction(obj))
        and not obj.__module__.startswith("worker.")
    ]
    assert foreign == []


def _our_types(hint: object) -> Iterator[type]:
    if isinstance(hint, type) and hint.__module__.split(".")[0] in {"worker", "backends"}:
        yield hint
    for argument in typing.get_args(hint):
        yield from _our_types(argument)


def test_public_signatures_need_only_public_types() -> None:
    """Every type of ours that a public signature names is exported itself."""
    exported = {getattr(worker, name) for name in worker.__all__}
    unexported: set[str] = set()
    for name in worker.__all__:
        obj = getattr(worker, name)
        members = [obj] if inspect.isfunction(obj) else []
        if inspect.isclass(obj):
            members = [
                member
                for attribute, member in vars(obj).items()
                if inspect.isfunction(member)
                and (not attribute.startswith("_") or attribute == "__init__")
            ]
        for member in members:
            for hint in typing.get_type_hints(member).values():
                unexported.update(
                    f"{t.__module__}.{t.__qualname__}"
                    for t in _our_types(hint)
                    if t not in exported
                )
    assert unexported == set()


def test_version_is_a_string() -> None:
    assert isinstance(worker.__version__, str) and worker.__version__


@pytest.mark.parametrize("module_name", ["worker", "backends.sqs"])
def test_each_name_a_package_imports_on_first_use_is_exported(module_name: str) -> None:
    """`worker` and `backends.sqs` import their names on first use (PEP 562): the table of
    where each comes from is exactly `__all__` (`__version__` is worker's own)."""
    module = importlib.import_module(module_name)
    homes: dict[str, str] = module._HOME_OF
    assert set(homes) == set(module.__all__) - {"__version__"}
