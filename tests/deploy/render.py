"""The kustomize subset deploy/k8s uses, rendered in Python: CI may have no kustomize.

What is implemented, and nothing else (a kustomization asking for more is refused, so the
renderer cannot quietly drift from kustomize; tests/deploy also compares its output with
`kubectl kustomize` where kubectl is installed):
- `resources`: files (one or more YAML documents) and directories (another kustomization);
- `patches`: `- path: FILE`, a strategic merge patch naming its target by kind and name.
  Maps merge, a null deletes, the pod template's `containers` merge by `name`, any other
  list is replaced whole (what kustomize does for a custom resource, and for a built-in
  list without a merge key such as `args`). A patch touching a built-in list that
  kustomize would merge by key (volumes, env, ports...) is refused;
- `images`: `name` with `newName`, `newTag` and/or `digest`, on the pod templates' containers;
- `namespace`: set on every namespaced resource.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

__all__ = ["Resource", "render"]

Resource = dict[str, Any]

_FIELDS = frozenset({"apiVersion", "kind", "resources", "namespace", "images", "patches"})
#: Lists a strategic merge patch merges by key in built-in types; only `containers` is done.
_MERGED_BY_KEY = frozenset(
    {"initContainers", "volumes", "env", "ports", "volumeMounts", "imagePullSecrets"}
)
_CLUSTER_SCOPED = frozenset({"Namespace", "ClusterRole", "ClusterRoleBinding"})


def render(directory: Path) -> list[Resource]:
    """The resources `kustomize build directory` would print (in file order)."""
    kustomization = _load_one(directory / "kustomization.yaml")
    unknown = set(kustomization) - _FIELDS
    if unknown:
        raise ValueError(f"{directory}: kustomization fields not rendered here: {sorted(unknown)}")
    resources: list[Resource] = []
    for entry in kustomization.get("resources", []):
        path = directory / entry
        resources += render(path) if path.is_dir() else _load_all(path)
    for patch in kustomization.get("patches", []):
        if set(patch) != {"path"}:
            raise ValueError(f"{directory}: only `- path: FILE` patches are rendered: {patch}")
        _apply_patch(resources, _load_one(directory / patch["path"]))
    for image in kustomization.get("images", []):
        _set_image(resources, image)
    namespace = kustomization.get("namespace")
    if namespace is not None:
        for resource in resources:
            if resource["kind"] not in _CLUSTER_SCOPED:
                resource["metadata"]["namespace"] = namespace
    return resources


def _load_all(path: Path) -> list[Resource]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def _load_one(path: Path) -> Resource:
    (document,) = _load_all(path)
    return document


def _apply_patch(resources: list[Resource], patch: Resource) -> None:
    name, kind = patch["metadata"]["name"], patch["kind"]
    targets = [
        index
        for index, resource in enumerate(resources)
        if resource["kind"] == kind and resource["metadata"]["name"] == name
    ]
    if len(targets) != 1:
        raise ValueError(f"patch for {kind}/{name} matches {len(targets)} resources")
    (index,) = targets
    resources[index] = _merge(resources[index], patch, key=None)


def _merge(base: Any, patch: Any, key: str | None) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for field, value in patch.items():
            if value is None:
                merged.pop(field, None)
            elif field in merged:
                merged[field] = _merge(merged[field], value, field)
            else:
                merged[field] = value
        return merged
    if key in _MERGED_BY_KEY:
        raise ValueError(f"a patch of `{key}` would merge by key: not rendered here")
    if key == "containers" and isinstance(base, list) and isinstance(patch, list):
        return _merge_by_name(base, patch)
    return patch


def _merge_by_name(base: list[Resource], patch: list[Resource]) -> list[Resource]:
    merged = list(base)
    names = [item["name"] for item in merged]
    for item in patch:
        if item["name"] in names:
            at = names.index(item["name"])
            merged[at] = _merge(merged[at], item, key=None)
        else:
            merged.append(item)
    return merged


def _set_image(resources: list[Resource], image: Mapping[str, str]) -> None:
    for resource in resources:
        template = resource.get("spec", {}).get("template", {}).get("spec", {})
        for container in template.get("containers", []):
            name, tag = _split_image(container["image"])
            if name != image["name"]:
                continue
            new_name = image.get("newName", name)
            if "digest" in image:
                container["image"] = f"{new_name}@{image['digest']}"
            else:
                new_tag = image.get("newTag", tag)
                container["image"] = new_name + (f":{new_tag}" if new_tag else "")


def _split_image(image: str) -> tuple[str, str | None]:
    """`registry:5000/name:tag` -> (`registry:5000/name`, `tag`); a digest is kept as is."""
    if "@" in image:
        return image.split("@", 1)[0], None
    head, _, last = image.rpartition("/")
    if ":" in last:
        last, tag = last.split(":", 1)
        return (f"{head}/{last}" if head else last), tag
    return image, None
