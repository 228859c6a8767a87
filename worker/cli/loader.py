"""Loading the user's application: `APP` as `module:attribute`, imported from the current
directory."""

from __future__ import annotations

import importlib
import os
import sys

from worker.app import Worker
from worker.errors import ConfigError

__all__ = ["load_app"]


def load_app(spec: str) -> Worker:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"APP={spec!r}: expected module:attribute, e.g. examples.hello:app")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise ConfigError(f"APP={spec!r}: cannot import {error.name!r}") from None
    app = getattr(module, attribute, None)
    if not isinstance(app, Worker):
        raise ConfigError(
            f"APP={spec!r}: {attribute!r} in {module_name} is not a lease-worker Worker"
        )
    return app
