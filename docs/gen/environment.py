"""The generators run with no `LEASE_WORKER_*` variable set: the CLI reads them into its
parsers' defaults when the parsers are built, so a page made in a configured shell would
otherwise show that shell's settings. And with `COLUMNS=80`: argparse wraps its usage
lines to the terminal's width."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from worker.cli.options import ENV_PREFIX

__all__ = ["clean_environment"]


@contextmanager
def clean_environment(extra: Mapping[str, str] | None = None) -> Iterator[None]:
    """No `LEASE_WORKER_*` variable inside the block, except those of `extra`."""
    saved = {name: value for name, value in os.environ.items() if name.startswith(ENV_PREFIX)}
    for name in saved:
        del os.environ[name]
    columns = os.environ.get("COLUMNS")
    os.environ.update({"COLUMNS": "80", **(extra or {})})
    try:
        yield
    finally:
        for name in [n for n in os.environ if n.startswith(ENV_PREFIX)]:
            del os.environ[name]
        os.environ.update(saved)
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
