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
- `namespace`: set on every namespaced resource;
- `configMapGenerator`: `name`, `envs` (KEY=VALUE files, `#` comments), `options.labels`
  and `options.annotations`, and `behavior: merge` over a generator of a kustomization
  below. The ConfigMap is named `NAME-<hash>` with kustomize's own hash of its content
  (`configmap_hash`), and the pod templates' references to NAME (`envFrom`, `volumes`)
  follow the new name.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

__all__ = ["Resource", "configmap_hash", "render"]

Resource = dict[str, Any]

_FIELDS = frozenset(
    {"apiVersion", "kind", "resources", "namespace", "images", "patches", "configMapGenerator"}
)
_GENERATOR_FIELDS = frozenset({"name", "envs", "options", "behavior"})
#: Marks a generated ConfigMap until the top-level render names it (kustomize adds the
#: hash suffix once every overlay's merge is done).
_GENERATED = "__generated__"
#: Lists a strategic merge patch merges by key in built-in types; only `containers` is done.
_MERGED_BY_KEY = frozenset(
    {"initContainers", "volumes", "env", "ports", "volumeMounts", "imagePullSecrets"}
)
_CLUSTER_SCOPED = frozenset({"Namespace", "ClusterRole", "ClusterRoleBinding"})


def render(directory: Path) -> list[Resource]:
    """The resources `kustomize build directory` would print (in file order)."""
    resources = _build(directory)
    for resource in resources:
        if resource.pop(_GENERATED, False):
            _name_by_content(resources, resource)
    return resources


def configmap_hash(resource: Resource) -> str:
    """kustomize's name suffix for a ConfigMap (api/hasher): the SHA-256 of Go's JSON of
    {data, kind, name}, keys sorted, HTML characters escaped; its first 10 hex digits with
    0, 1, 3, a, e replaced so that no suffix spells a word. The name hashed is always ""
    (kustomize looks up `metadata/name` as one field, which no ConfigMap has): two
    ConfigMaps with the same data get the same suffix."""
    encoded = json.dumps(
        {"data": resource.get("data", {}), "kind": "ConfigMap", "name": ""},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    for char, escape in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e")):
        encoded = encoded.replace(char, escape)  # Go's json.Marshal escapes HTML characters
    digest = hashlib.sha256(encoded.encode()).hexdigest()[:10]
    return digest.translate(str.maketrans("013ae", "ghkmt"))


def _build(directory: Path) -> list[Resource]:
    kustomization = _load_one(directory / "kustomization.yaml")
    unknown = set(kustomization) - _FIELDS
    if unknown:
        raise ValueError(f"{directory}: kustomization fields not rendered here: {sorted(unknown)}")
    resources: list[Resource] = []
    for entry in kustomization.get("resources", []):
        path = directory / entry
        resources += _build(path) if path.is_dir() else _load_all(path)
    for generator in kustomization.get("configMapGenerator", []):
        _generate(directory, resources, generator)
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


def _generate(directory: Path, resources: list[Resource], generator: Resource) -> None:
    unknown = set(generator) - _GENERATOR_FIELDS
    if unknown or set(generator.get("options", {})) - {"labels", "annotations"}:
        raise ValueError(f"{directory}: configMapGenerator fields not rendered here: {generator}")
    data: dict[str, str] = {}
    for env in generator.get("envs", []):
        data.update(_read_env(directory / env))
    behavior = generator.get("behavior", "create")
    if behavior == "merge":
        (base,) = [
            r for r in resources if r.get(_GENERATED) and r["metadata"]["name"] == generator["name"]
        ]
        base["data"] = {**base["data"], **data}
        for field in ("labels", "annotations"):
            given = generator.get("options", {}).get(field, {})
            if given:
                base["metadata"].setdefault(field, {}).update(given)
        return
    if behavior != "create":
        raise ValueError(f"{directory}: configMapGenerator behavior {behavior!r} not rendered here")
    metadata: dict[str, Any] = {"name": generator["name"]}
    for field in ("labels", "annotations"):
        given = generator.get("options", {}).get(field)
        if given:
            metadata[field] = dict(given)
    resources.append(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata,
            "data": data,
            _GENERATED: True,
        }
    )


def _read_env(path: Path) -> dict[str, str]:
    """kustomize's env file: KEY=VALUE lines, the value as written; `#` lines and blank
    lines skipped."""
    data: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"{path}: {line!r} is not KEY=VALUE")
        data[key.strip()] = value
    return data


def _name_by_content(resources: list[Resource], configmap: Resource) -> None:
    old = configmap["metadata"]["name"]
    new = f"{old}-{configmap_hash(configmap)}"
    configmap["metadata"]["name"] = new
    for resource in resources:
        template = resource.get("spec", {}).get("template", {}).get("spec", {})
        for container in template.get("containers", []):
            for source in container.get("envFrom", []):
                reference = source.get("configMapRef", {})
                if reference.get("name") == old:
                    reference["name"] = new
        for volume in template.get("volumes", []):
            if volume.get("configMap", {}).get("name") == old:
                volume["configMap"]["name"] = new


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
