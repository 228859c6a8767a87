"""Schema validation of rendered manifests: Kubernetes' own, and the vendored CRD schemas.

Built-in kinds are checked by kubernetes-validate against one pinned Kubernetes version, in
its strict mode (an unknown field is an error). Custom resources (KEDA, prometheus-operator)
are checked with jsonschema against the `openAPIV3Schema` vendored in schemas/, made strict
the same way: an API server silently drops an unknown field of a custom resource (pruning),
so a misspelt `pollingInteval` would be applied as if absent. Here it is an error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]

__all__ = ["CUSTOM_SCHEMAS", "KUBERNETES_VERSION", "schema_errors"]

#: The Kubernetes version the manifests are validated against (EKS supports it; the example
#: namespace pins the same Pod Security Standard version).
KUBERNETES_VERSION = "1.33.0"

_SCHEMAS = Path(__file__).parent / "schemas"
#: (apiVersion, kind) -> vendored schema file (schemas/README.md: sources and versions).
CUSTOM_SCHEMAS: Mapping[tuple[str, str], str] = {
    ("keda.sh/v1alpha1", "ScaledObject"): "keda.sh_v1alpha1_scaledobject.json",
    ("keda.sh/v1alpha1", "TriggerAuthentication"): "keda.sh_v1alpha1_triggerauthentication.json",
    ("monitoring.coreos.com/v1", "PodMonitor"): "monitoring.coreos.com_v1_podmonitor.json",
}


def schema_errors(resource: Mapping[str, Any]) -> list[str]:
    """Every way `resource` breaks its schema; empty when it is valid."""
    schema_file = CUSTOM_SCHEMAS.get((resource["apiVersion"], resource["kind"]))
    if schema_file is not None:
        validator = _validator(schema_file)
        return [_describe(error) for error in validator.iter_errors(resource)]
    try:
        kubernetes_validate.validate(dict(resource), KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [_describe(error)]
    return []


def _describe(error: Any) -> str:
    path = ".".join(str(part) for part in error.absolute_path) or "(top)"
    return f"{path}: {error.message}"


@cache
def _validator(schema_file: str) -> Any:
    schema = _strict(json.loads((_SCHEMAS / schema_file).read_text()))
    return jsonschema.Draft7Validator(schema)


def _strict(schema: Any) -> Any:
    """The schema with `additionalProperties: false` wherever an object lists its fields
    and neither allows other keys nor preserves unknown fields."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    strict = {key: _strict(value) for key, value in schema.items()}
    if (
        "properties" in strict
        and "additionalProperties" not in strict
        and not strict.get("x-kubernetes-preserve-unknown-fields", False)
    ):
        strict["additionalProperties"] = False
    return strict
