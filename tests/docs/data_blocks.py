"""Checks of the data blocks: json and toml parsed; yaml parsed, and a Kubernetes resource
(apiVersion and kind) validated against its schema as tests/deploy validates deploy/."""

from __future__ import annotations

import json
import tomllib
from typing import Any

import yaml

from tests.deploy.validation import schema_errors
from tests.docs.blocks import Block
from tests.docs.shell import environment_problems

__all__ = ["data_problems", "resource_problems"]


def data_problems(block: Block) -> list[str]:
    try:
        if block.kind == "json":
            json.loads(block.text)
        elif block.kind == "toml":
            tomllib.loads(block.text)
        elif block.kind == "yaml":
            resources = [
                document
                for document in yaml.safe_load_all(block.text)
                if isinstance(document, dict) and {"apiVersion", "kind"} <= set(document)
            ]
            return [p for resource in resources for p in resource_problems(resource)]
    except (ValueError, yaml.YAMLError) as error:
        return [f"does not parse: {error}"]
    return []


def resource_problems(resource: dict[str, Any]) -> list[str]:
    """Its schema's errors; for a ConfigMap, also its `LEASE_WORKER_*` settings, which
    `lease-worker run` must read and accept (a pod reads them from it)."""
    problems = [f"{resource['kind']}: {error}" for error in schema_errors(resource)]
    if resource["kind"] == "ConfigMap":
        data = {str(k): str(v) for k, v in (resource.get("data") or {}).items()}
        settings = {k: v for k, v in data.items() if k.startswith("LEASE_WORKER_")}
        problems += environment_problems(["run", "app:app"], settings, inline=settings)
    return problems
