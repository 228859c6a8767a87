"""The Kubernetes kit as the tests see it: rendered resources, looked up by kind.

Rendering is cached per directory (the resources are deep-copied out, so a test that
mutates one changes nobody else's); the shutdown bound is computed here from a ConfigMap.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

from tests.deploy.render import Resource, render
from worker.config import WorkerConfig

__all__ = [
    "BASE",
    "DEBUG_CONSOLE",
    "DIRECTORIES",
    "EXAMPLE",
    "MARGIN_S",
    "ROOT",
    "config_data",
    "one",
    "pod_spec",
    "rendered",
    "shutdown_bound_s",
    "worker_container",
]

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "deploy" / "k8s" / "base"
EXAMPLE = ROOT / "deploy" / "k8s" / "overlays" / "example"
DEBUG_CONSOLE = ROOT / "deploy" / "k8s" / "overlays" / "debug-console"
DIRECTORIES = {"base": BASE, "example": EXAMPLE, "debug-console": DEBUG_CONSOLE}

#: Beyond the worker's own bound, terminationGracePeriodSeconds keeps this much for the
#: interpreter's exit and the last log lines (deploy/README.md, "Drain").
MARGIN_S = 5.0


@cache
def _rendered(directory: Path) -> list[Resource]:
    return render(directory)


def rendered(directory: Path) -> list[Resource]:
    return copy.deepcopy(_rendered(directory))


def one(resources: list[Resource], kind: str) -> Resource:
    (found,) = [resource for resource in resources if resource["kind"] == kind]
    return found


def pod_spec(resources: list[Resource]) -> dict[str, Any]:
    spec: dict[str, Any] = one(resources, "Deployment")["spec"]["template"]["spec"]
    return spec


def worker_container(resources: list[Resource]) -> dict[str, Any]:
    (container,) = [c for c in pod_spec(resources)["containers"] if c["name"] == "worker"]
    return dict(container)


def config_data(resources: list[Resource]) -> dict[str, str]:
    return dict(one(resources, "ConfigMap")["data"])


def shutdown_bound_s(data: dict[str, str]) -> float:
    """Longest a worker configured by `data` takes from SIGTERM to exit, seconds.

    The drain (grace_s), the final releases (flush_timeout_s), then closing the SQS client
    (bounded by call_timeout_s in worker/cli/run.py). A setting the ConfigMap leaves out
    has its default from worker/config.py.
    """
    defaults = WorkerConfig()
    grace = data.get("LEASE_WORKER_GRACE_S", defaults.shutdown.grace_s)
    flush = data.get("LEASE_WORKER_FLUSH_TIMEOUT_S", defaults.shutdown.flush_timeout_s)
    close = data.get("LEASE_WORKER_CALL_TIMEOUT_S", defaults.call_timeout_s)
    return float(grace) + float(flush) + float(close)
