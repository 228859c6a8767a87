"""The `lease-worker` command: a composition root, with `worker.testing` the only place that
imports both the runtime and the backends."""

from worker.cli.main import main

__all__ = ["main"]
