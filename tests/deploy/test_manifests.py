"""The Kubernetes kit (deploy/k8s): rendered, validated, and held together.

Both the base and the example overlay are rendered (tests/deploy/render.py, checked against
`kubectl kustomize` where kubectl exists) and every resource is validated against its
schema: Kubernetes 1.33's for built-in kinds, the vendored CRD schemas for KEDA and
prometheus-operator. Then the settings that must agree across files are compared.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.kit import (
    DIRECTORIES,
    EXAMPLE,
    ROOT,
    config_data,
    one,
    pod_spec,
    rendered,
    worker_container,
)
from tests.deploy.render import Resource, render
from tests.deploy.validation import CUSTOM_SCHEMAS, schema_errors
from worker.cli.options import ENV_PREFIX
from worker.cli.run import OPTIONS

RULES = ROOT / "deploy" / "prometheus" / "alerts.yaml"

KINDS = {
    "ConfigMap",
    "Deployment",
    "NetworkPolicy",
    "PodDisruptionBudget",
    "PodMonitor",
    "ScaledObject",
    "ServiceAccount",
    "TriggerAuthentication",
}


def _key(resource: Resource) -> tuple[str, str, str]:
    metadata = resource["metadata"]
    return resource["kind"], metadata.get("namespace", ""), metadata["name"]


def _all_resources() -> list[tuple[str, str, Resource]]:
    return [
        (name, resource["kind"], resource)
        for name, directory in DIRECTORIES.items()
        for resource in rendered(directory)
    ]


@pytest.mark.parametrize("name", sorted(DIRECTORIES))
def test_the_kit_holds_one_of_each_kind(name: str) -> None:
    kinds = [resource["kind"] for resource in rendered(DIRECTORIES[name])]
    expected = KINDS | ({"Namespace"} if name != "base" else set())
    assert sorted(kinds) == sorted(expected)


@pytest.mark.parametrize("name", sorted(DIRECTORIES))
def test_rendering_matches_kubectl_kustomize(name: str) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: the overlay is rendered by tests/deploy only")
    directory = DIRECTORIES[name]
    output = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60
    )
    assert output.returncode == 0, output.stderr
    theirs = {_key(doc): doc for doc in yaml.safe_load_all(output.stdout) if doc}
    ours = {_key(doc): doc for doc in rendered(directory)}
    assert sorted(ours) == sorted(theirs)
    for key, resource in ours.items():
        assert resource == theirs[key], key


@pytest.mark.parametrize(
    ("name", "kind", "resource"),
    _all_resources(),
    ids=[f"{name}-{kind}" for name, kind, _ in _all_resources()],
)
def test_every_resource_matches_its_schema(name: str, kind: str, resource: Resource) -> None:
    assert schema_errors(resource) == []


def test_every_vendored_schema_is_used() -> None:
    used = {(r["apiVersion"], r["kind"]) for _, _, r in _all_resources()}
    assert set(CUSTOM_SCHEMAS) <= used


@pytest.mark.parametrize(
    ("kind", "path", "value", "expected"),
    [
        # Unknown fields: an API server would drop them from a custom resource, silently.
        ("ScaledObject", ("spec",), {"pollingInteval": 15}, "pollingInteval"),
        ("PodMonitor", ("spec", "podMetricsEndpoints", 0), {"prot": "ops"}, "prot"),
        # KEDA's trigger metadata holds strings only; 10 unquoted is refused.
        ("ScaledObject", ("spec", "triggers", 0, "metadata"), {"queueLength": 10}, "string"),
        ("TriggerAuthentication", ("spec", "podIdentity"), {"provider": "aws-kiam"}, "aws-kiam"),
        ("Deployment", ("spec", "template", "spec"), {"terminationGracePeriod": 9}, "termination"),
        ("PodDisruptionBudget", ("spec",), {"maxUnavailable": [1]}, "maxUnavailable"),
    ],
)
def test_a_schema_break_is_reported(
    kind: str, path: tuple[str | int, ...], value: dict[str, Any], expected: str
) -> None:
    resource = one(rendered(EXAMPLE), kind)
    target: Any = resource
    for step in path:
        target = target[step]
    target.update(value)
    errors = schema_errors(resource)
    assert len(errors) == 1, errors
    assert expected in errors[0]


def test_the_renderer_refuses_what_it_does_not_implement(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": [], "namePrefix": "x-"})
    )
    with pytest.raises(ValueError, match="namePrefix"):
        render(tmp_path)


@pytest.mark.parametrize("name", sorted(DIRECTORIES))
def test_keda_scales_the_workers_queue_by_max_in_flight(name: str) -> None:
    resources = rendered(DIRECTORIES[name])
    data = config_data(resources)
    scaled = one(resources, "ScaledObject")["spec"]
    (trigger,) = scaled["triggers"]
    metadata = trigger["metadata"]
    assert trigger["type"] == "aws-sqs-queue"
    urls = [item.partition("=")[2] for item in data["LEASE_WORKER_QUEUE_URL"].split(",")]
    assert metadata["queueURL"] in urls
    assert metadata["awsRegion"] == data["AWS_REGION"]
    assert metadata["queueLength"] == data["LEASE_WORKER_MAX_IN_FLIGHT"]
    assert (
        trigger["authenticationRef"]["name"]
        == one(resources, "TriggerAuthentication")["metadata"]["name"]
    )
    target = scaled["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "lease-worker")
    # KEDA's HPA owns the replica count: a replicas field would reset it on every apply.
    assert "replicas" not in one(resources, "Deployment")["spec"]
    assert 1 <= scaled["minReplicaCount"] <= scaled["maxReplicaCount"]


@pytest.mark.parametrize("name", sorted(DIRECTORIES))
def test_probes_and_the_pod_monitor_use_the_ops_port(name: str) -> None:
    resources = rendered(DIRECTORIES[name])
    data = config_data(resources)
    container = worker_container(resources)
    (port,) = container["ports"]
    assert (port["name"], str(port["containerPort"])) == ("ops", data["LEASE_WORKER_OPS_PORT"])
    # Loopback by default: the kubelet and Prometheus reach the pod from outside.
    assert data["LEASE_WORKER_OPS_ADDR"] == "0.0.0.0"
    probes = {
        probe: (container[probe]["httpGet"]["path"], container[probe]["httpGet"]["port"])
        for probe in ("startupProbe", "livenessProbe", "readinessProbe")
    }
    assert probes == {
        "startupProbe": ("/healthz", "ops"),
        "livenessProbe": ("/healthz", "ops"),
        "readinessProbe": ("/readyz", "ops"),
    }
    (endpoint,) = one(resources, "PodMonitor")["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("ops", "/metrics")


@pytest.mark.parametrize("name", sorted(DIRECTORIES))
def test_selectors_and_names_point_at_the_worker(name: str) -> None:
    resources = rendered(DIRECTORIES[name])
    deployment = one(resources, "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    for kind in ("PodDisruptionBudget", "PodMonitor"):
        selector = one(resources, kind)["spec"]["selector"]["matchLabels"]
        assert selector.items() <= labels.items(), kind
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    spec = pod_spec(resources)
    assert spec["serviceAccountName"] == one(resources, "ServiceAccount")["metadata"]["name"]
    (source,) = worker_container(resources)["envFrom"]
    assert source["configMapRef"]["name"] == one(resources, "ConfigMap")["metadata"]["name"]
    annotations = one(resources, "ServiceAccount")["metadata"]["annotations"]
    assert annotations["eks.amazonaws.com/role-arn"].startswith("arn:aws:iam::")


@pytest.mark.parametrize("name", sorted(DIRECTORIES))
def test_the_alert_rules_name_what_the_kit_deploys(name: str) -> None:
    """The rules find the kit's objects by name (kube-state-metrics and KEDA label their
    series with them): the Deployment and ScaledObject `lease-worker`, KEDA's HPA
    `keda-hpa-<ScaledObject>`, pods `<Deployment>-...`, the container `worker`, and the
    PodMonitor's job `<namespace>/<PodMonitor>`."""
    text = RULES.read_text()
    resources = rendered(DIRECTORIES[name])
    deployment = one(resources, "Deployment")["metadata"]["name"]
    scaled_object = one(resources, "ScaledObject")
    assert scaled_object["spec"]["scaleTargetRef"]["name"] == deployment
    assert f'deployment="{deployment}"' in text
    assert f'scaledObject="{scaled_object["metadata"]["name"]}"' in text
    assert f'horizontalpodautoscaler="keda-hpa-{scaled_object["metadata"]["name"]}"' in text
    assert f'pod=~"{deployment}-.+"' in text
    assert f'container="{worker_container(resources)["name"]}"' in text
    assert 'job=~"(.+/)?' + one(resources, "PodMonitor")["metadata"]["name"] + '"' in text


def test_the_example_overlay_is_its_own_namespace_under_restricted_admission() -> None:
    resources = rendered(EXAMPLE)
    namespace = one(resources, "Namespace")
    name = namespace["metadata"]["name"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    others = [r for r in resources if r["kind"] != "Namespace"]
    assert {r["metadata"]["namespace"] for r in others} == {name}
    container = worker_container(resources)
    # By digest: a tag can be moved to another build under a running Deployment.
    assert re.fullmatch(
        r"123456789012\.dkr\.ecr\.eu-west-1\.amazonaws\.com/orders-worker@sha256:[0-9a-f]{64}",
        container["image"],
    ), container["image"]
    assert container["imagePullPolicy"] == "Always"


@pytest.mark.parametrize("name", sorted(DIRECTORIES))
def test_every_setting_in_the_configmap_is_one_the_worker_reads(name: str) -> None:
    """A misspelt LEASE_WORKER_ name would be ignored without a word: it is refused here."""
    options = {ENV_PREFIX + option.env_name for group in OPTIONS.values() for option in group}
    data = config_data(rendered(DIRECTORIES[name]))
    assert set(data) - options == {"AWS_REGION"}
    # One process per pod: its probes and its drain speak for one event loop.
    assert "LEASE_WORKER_PROCESSES" not in data
    assert data["LEASE_WORKER_LOG_FORMAT"] == "json"
