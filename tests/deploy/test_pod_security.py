"""The worker's pod meets the restricted Pod Security Standard and the kit's house rules,
and each rule is shown to fail when its field is taken away."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.deploy.kit import DIRECTORIES, EXAMPLE, pod_spec, rendered
from tests.deploy.pod_security import house_findings, restricted_findings

Spec = dict[str, Any]


@pytest.mark.parametrize("name", sorted(DIRECTORIES))
def test_the_pod_meets_the_restricted_standard_and_the_house_rules(name: str) -> None:
    spec = pod_spec(rendered(DIRECTORIES[name]))
    assert restricted_findings(spec) == []
    assert house_findings(spec) == []


def _pod(spec: Spec) -> Spec:
    context: Spec = spec["securityContext"]
    return context


def _container(spec: Spec) -> Spec:
    context: Spec = spec["containers"][0]["securityContext"]
    return context


W = "containers[worker]"

#: (what is done to the pod spec, the findings it must give: restricted, house).
BREAKS: dict[str, tuple[Callable[[Spec], Any], list[str], list[str]]] = {
    "no allowPrivilegeEscalation": (
        lambda s: _container(s).pop("allowPrivilegeEscalation"),
        [f"{W}.securityContext.allowPrivilegeEscalation must be false"],
        [],
    ),
    "capabilities not dropped": (
        lambda s: _container(s).pop("capabilities"),
        [f"{W}.securityContext.capabilities.drop must include ALL"],
        [],
    ),
    "a capability added": (
        lambda s: _container(s)["capabilities"].update(add=["NET_ADMIN"]),
        [f"{W}.securityContext.capabilities.add: NET_ADMIN is not allowed"],
        [],
    ),
    "privileged": (
        lambda s: _container(s).update(privileged=True),
        [f"{W}.securityContext.privileged must be unset or false"],
        [],
    ),
    "runAsNonRoot nowhere": (
        lambda s: (_pod(s).pop("runAsNonRoot"), _container(s).pop("runAsNonRoot")),
        ["runAsNonRoot must be true for the pod or for every container"],
        [
            "securityContext.runAsNonRoot must be true",
            f"{W}.securityContext.runAsNonRoot must be true",
        ],
    ),
    "root user": (
        lambda s: _container(s).update(runAsUser=0),
        [f"{W}.securityContext.runAsUser must not be 0"],
        [f"{W}.securityContext.runAsUser must be a non-zero number"],
    ),
    "seccomp nowhere": (
        lambda s: (_pod(s).pop("seccompProfile"), _container(s).pop("seccompProfile")),
        [f"{W}: seccompProfile.type must be RuntimeDefault or Localhost"],
        [
            "securityContext.seccompProfile.type must be RuntimeDefault",
            f"{W}.securityContext.seccompProfile.type must be RuntimeDefault",
        ],
    ),
    "seccomp unconfined": (
        lambda s: _container(s).update(seccompProfile={"type": "Unconfined"}),
        [
            f"{W}: seccompProfile.type must be RuntimeDefault or Localhost",
            f"{W}.securityContext.seccompProfile.type must not be Unconfined",
        ],
        [f"{W}.securityContext.seccompProfile.type must be RuntimeDefault"],
    ),
    "host network": (
        lambda s: s.update(hostNetwork=True),
        ["hostNetwork must be unset or false"],
        [],
    ),
    "hostPath volume": (
        lambda s: s["volumes"].append({"name": "host", "hostPath": {"path": "/"}}),
        ["volumes[host]: type ['hostPath'] is not allowed"],
        [],
    ),
    "host port": (
        lambda s: s["containers"][0]["ports"][0].update(hostPort=9100),
        [f"{W}.ports[ops]: hostPort must be unset or 0"],
        [],
    ),
    "writable root filesystem": (
        lambda s: _container(s).pop("readOnlyRootFilesystem"),
        [],
        [f"{W}.securityContext.readOnlyRootFilesystem must be true"],
    ),
    "no group": (
        lambda s: _pod(s).pop("runAsGroup"),
        [],
        ["securityContext.runAsGroup must be a non-zero number"],
    ),
    "API token mounted": (
        lambda s: s.pop("automountServiceAccountToken"),
        [],
        ["automountServiceAccountToken must be false"],
    ),
    "no memory limit": (
        lambda s: s["containers"][0]["resources"]["limits"].pop("memory"),
        [],
        [f"{W}.resources.limits.memory must be set"],
    ),
    "no cpu request": (
        lambda s: s["containers"][0]["resources"]["requests"].pop("cpu"),
        [],
        [f"{W}.resources.requests.cpu must be set"],
    ),
}


@pytest.mark.parametrize("case", sorted(BREAKS))
def test_a_missing_or_loosened_field_is_a_finding(case: str) -> None:
    breaks, restricted, house = BREAKS[case]
    spec = pod_spec(rendered(EXAMPLE))
    breaks(spec)
    assert (restricted_findings(spec), house_findings(spec)) == (restricted, house)


def test_a_container_level_setting_may_stand_in_for_the_pods() -> None:
    """The standard accepts runAsNonRoot and seccomp on every container instead."""
    spec = pod_spec(rendered(EXAMPLE))
    _pod(spec).pop("runAsNonRoot")
    _pod(spec).pop("seccompProfile")
    assert restricted_findings(spec) == []
