"""The kit in a cluster nobody trusts (issue 29): the console off except in the debugging
overlay, a NetworkPolicy that lets only the scraper's pods reach the ops port, and a
settings change that rolls the pods (the ConfigMap's name is a hash of its content).

What `kubectl kustomize` prints is checked where kubectl is installed, else what
tests/deploy/render.py renders (test_manifests.py holds the two equal).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.kit import (
    BASE,
    DEBUG_CONSOLE,
    DIRECTORIES,
    EXAMPLE,
    ROOT,
    config_data,
    one,
    worker_container,
)
from tests.deploy.render import Resource, configmap_hash, render
from tests.deploy.validation import schema_errors


def kustomized(directory: Path) -> list[Resource]:
    """`kubectl kustomize directory` where kubectl exists; tests/deploy's renderer else."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return render(directory)
    output = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60
    )
    assert output.returncode == 0, output.stderr
    return [doc for doc in yaml.safe_load_all(output.stdout) if doc]


@pytest.mark.parametrize("name", ["base", "example"])
def test_the_console_is_off_and_a_network_policy_guards_the_ops_port(name: str) -> None:
    resources = kustomized(DIRECTORIES[name])
    data = config_data(resources)
    # 0.0.0.0: reachable inside the cluster; the console stays off but for debugging.
    assert data["LEASE_WORKER_OPS_ADDR"] == "0.0.0.0"
    assert data["LEASE_WORKER_NO_CONSOLE"] == "true"
    assert "LEASE_WORKER_CONSOLE_BODIES" not in data
    assert "LEASE_WORKER_CONSOLE_TOKEN" not in data
    policy = one(resources, "NetworkPolicy")["spec"]
    labels = one(resources, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["policyTypes"] == ["Ingress"]
    # One way in: from Prometheus Operator's Prometheus pods, in whatever namespace, to
    # the ops port by number (the VPC CNI drops a named port the source does not declare).
    (port,) = worker_container(resources)["ports"]
    assert port["name"] == "ops"
    assert policy["ingress"] == [
        {
            "from": [
                {
                    "namespaceSelector": {},
                    "podSelector": {
                        "matchLabels": {
                            "app.kubernetes.io/name": "prometheus",
                            "app.kubernetes.io/managed-by": "prometheus-operator",
                        }
                    },
                }
            ],
            "ports": [{"port": port["containerPort"], "protocol": "TCP"}],
        }
    ]


def readme_override() -> Resource:
    """The NetworkPolicy patch deploy/README.md shows for another collector."""
    text = (ROOT / "deploy" / "README.md").read_text()
    block = text.split("<!-- networkpolicy-override -->\n```yaml\n", 1)[1].split("```", 1)[0]
    patch: Resource = yaml.safe_load(block)
    return patch


def test_the_readmes_override_for_another_collector_renders_and_validates(
    tmp_path: Path,
) -> None:
    patch = readme_override()
    (tmp_path / "networkpolicy.yaml").write_text(yaml.safe_dump(patch))
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [str(EXAMPLE)],
        "patches": [{"path": "networkpolicy.yaml"}],
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    policy = one(render(tmp_path), "NetworkPolicy")
    assert schema_errors(policy) == []
    assert policy["metadata"]["namespace"] == "orders"
    assert policy["spec"]["ingress"] == patch["spec"]["ingress"]  # replaced whole
    (port,) = worker_container(render(EXAMPLE))["ports"]
    assert policy["spec"]["ingress"][0]["ports"] == [
        {"port": port["containerPort"], "protocol": "TCP"}
    ]


def test_the_debugging_overlay_is_the_example_with_the_console_on() -> None:
    example, debug = kustomized(EXAMPLE), kustomized(DEBUG_CONSOLE)
    assert config_data(debug) == {
        **config_data(example),
        "LEASE_WORKER_NO_CONSOLE": "false",
        # What a browser names through a port-forward; nothing else (no DNS rebinding).
        "LEASE_WORKER_CONSOLE_HOSTS": "localhost,127.0.0.1,[::1]",
    }
    # Bodies and the redrive API stay off; the NetworkPolicy stays; nothing else changes
    # but the ConfigMap's name, which the pods follow (so applying it rolls them).
    for resource in (*example, *debug):
        if resource["kind"] == "ConfigMap":
            resource.pop("data")
            resource["metadata"].pop("name")
        if resource["kind"] == "Deployment":
            worker_container([resource])  # one worker container
            for container in resource["spec"]["template"]["spec"]["containers"]:
                container["envFrom"][0]["configMapRef"].pop("name")
    assert sorted(map(str, example)) == sorted(map(str, debug))


def test_a_settings_change_renames_the_configmap_and_so_rolls_the_pods(tmp_path: Path) -> None:
    copy = tmp_path / "base"
    shutil.copytree(BASE, copy)
    env = copy / "worker.env"
    env.write_text(env.read_text().replace("LEASE_WORKER_GRACE_S=30", "LEASE_WORKER_GRACE_S=31"))
    before, after = kustomized(BASE), kustomized(copy)
    names = [one(r, "ConfigMap")["metadata"]["name"] for r in (before, after)]
    assert names[0] != names[1]
    for resources, name in zip((before, after), names, strict=True):
        assert name.startswith("lease-worker-")
        (source,) = worker_container(resources)["envFrom"]
        assert source["configMapRef"]["name"] == name
    templates = [one(r, "Deployment")["spec"]["template"] for r in (before, after)]
    assert templates[0] != templates[1]  # a new pod template: the Deployment rolls


@pytest.mark.parametrize("name", sorted(DIRECTORIES))
def test_gitops_pruning_keeps_the_configmaps_a_rollback_needs(name: str) -> None:
    """Older ReplicaSets name older ConfigMaps; `rollout undo` needs them (issue 42, 7)."""
    configmap = one(kustomized(DIRECTORIES[name]), "ConfigMap")
    assert configmap["metadata"]["annotations"] == {
        "argocd.argoproj.io/sync-options": "Prune=false",
        "argocd.argoproj.io/compare-options": "IgnoreExtraneous",
        "kustomize.toolkit.fluxcd.io/prune": "disabled",
    }
    assert one(kustomized(DIRECTORIES[name]), "Deployment")["spec"]["revisionHistoryLimit"] == 5


def test_the_configmap_hash_is_kustomizes() -> None:
    # `kubectl kustomize` (kustomize v5.5.0) names a generator of A=1 `x-89g4tffbfk`.
    assert configmap_hash({"metadata": {"name": "x"}, "data": {"A": "1"}}) == "89g4tffbfk"
    assert configmap_hash({"metadata": {"name": "y"}, "data": {"A": "1"}}) == "89g4tffbfk"
    assert configmap_hash({"metadata": {"name": "x"}, "data": {"A": "2"}}) != "89g4tffbfk"
