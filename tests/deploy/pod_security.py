"""The restricted Pod Security Standard, and this kit's stricter house rules, as checks.

`restricted_findings` follows the profile as published for Kubernetes 1.33
(https://kubernetes.io/docs/concepts/security/pod-security-standards/): every baseline
control, then the restricted ones. A container-level setting may stand in for a pod-level
one where the standard allows it (runAsNonRoot, seccompProfile). Only the pod spec is read:
the legacy AppArmor annotations on the pod's metadata are not (the kit sets none).

`house_findings` asks more of the worker than the standard does: a read-only root
filesystem, both IDs fixed and non-zero, seccomp stated at pod and container level, no
Kubernetes API token, requests and limits for CPU and memory.
Each finding is one line naming the field.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["house_findings", "restricted_findings"]

Spec = Mapping[str, Any]

_SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
_RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
_SECCOMP_ALLOWED = frozenset({"RuntimeDefault", "Localhost"})
_SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})


def _containers(spec: Spec) -> Iterator[tuple[str, Spec]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(field) or []:
            yield f"{field}[{container.get('name')}]", container


def restricted_findings(spec: Spec) -> list[str]:
    """How a pod spec breaks the restricted profile (baseline included); empty if it holds."""
    return [*_baseline_pod(spec), *_restricted_pod(spec)] + [
        finding
        for where, container in _containers(spec)
        for finding in _container_findings(where, spec, container)
    ]


def _baseline_pod(spec: Spec) -> Iterator[str]:
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            yield f"{field} must be unset or false"
    pod = spec.get("securityContext") or {}
    yield from _windows_selinux_apparmor("securityContext", pod)
    if _seccomp(pod) == "Unconfined":
        yield "securityContext.seccompProfile.type must not be Unconfined"
    for sysctl in pod.get("sysctls") or []:
        if sysctl.get("name") not in _SAFE_SYSCTLS:
            yield f"securityContext.sysctls: {sysctl.get('name')} is not a safe sysctl"
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= _RESTRICTED_VOLUMES:
            yield f"volumes[{volume.get('name')}]: type {sorted(kinds)} is not allowed"


def _restricted_pod(spec: Spec) -> Iterator[str]:
    pod = spec.get("securityContext") or {}
    if pod.get("runAsUser") == 0:
        yield "securityContext.runAsUser must not be 0"
    containers = [container for _, container in _containers(spec)]
    non_root = [(c.get("securityContext") or {}).get("runAsNonRoot") for c in containers]
    if pod.get("runAsNonRoot") is not True and not all(value is True for value in non_root):
        yield "runAsNonRoot must be true for the pod or for every container"
    if False in non_root:
        yield "runAsNonRoot must not be false in any container"
    pod_seccomp = _seccomp(pod)
    for where, container in _containers(spec):
        own = _seccomp(container.get("securityContext") or {})
        if (own or pod_seccomp) not in _SECCOMP_ALLOWED:
            yield f"{where}: seccompProfile.type must be RuntimeDefault or Localhost"


def _container_findings(where: str, spec: Spec, container: Spec) -> Iterator[str]:
    context = container.get("securityContext") or {}
    at = f"{where}.securityContext"
    if context.get("privileged"):
        yield f"{at}.privileged must be unset or false"
    if context.get("allowPrivilegeEscalation") is not False:
        yield f"{at}.allowPrivilegeEscalation must be false"
    if context.get("runAsUser") == 0:
        yield f"{at}.runAsUser must not be 0"
    if context.get("procMount", "Default") != "Default":
        yield f"{at}.procMount must be Default"
    if _seccomp(context) == "Unconfined":
        yield f"{at}.seccompProfile.type must not be Unconfined"
    yield from _windows_selinux_apparmor(at, context)
    capabilities = context.get("capabilities") or {}
    if "ALL" not in (capabilities.get("drop") or []):
        yield f"{at}.capabilities.drop must include ALL"
    for added in capabilities.get("add") or []:
        if added != "NET_BIND_SERVICE":
            yield f"{at}.capabilities.add: {added} is not allowed"
    for port in container.get("ports") or []:
        if port.get("hostPort"):
            yield f"{where}.ports[{port.get('name')}]: hostPort must be unset or 0"


def _windows_selinux_apparmor(at: str, context: Spec) -> Iterator[str]:
    if (context.get("windowsOptions") or {}).get("hostProcess"):
        yield f"{at}.windowsOptions.hostProcess must be unset or false"
    selinux = context.get("seLinuxOptions") or {}
    if selinux.get("type", "") not in _SELINUX_TYPES:
        yield f"{at}.seLinuxOptions.type {selinux.get('type')} is not allowed"
    for field in ("user", "role"):
        if selinux.get(field):
            yield f"{at}.seLinuxOptions.{field} must be unset"
    apparmor = (context.get("appArmorProfile") or {}).get("type")
    if apparmor not in (None, "RuntimeDefault", "Localhost"):
        yield f"{at}.appArmorProfile.type must be RuntimeDefault or Localhost"


def _seccomp(context: Spec) -> str | None:
    profile = context.get("seccompProfile") or {}
    kind = profile.get("type")
    return str(kind) if kind is not None else None


def house_findings(spec: Spec) -> list[str]:
    """What this kit asks beyond the standard; empty if all of it holds."""
    findings = []
    if spec.get("automountServiceAccountToken") is not False:
        findings.append("automountServiceAccountToken must be false")
    pod = spec.get("securityContext") or {}
    findings += _ids_and_seccomp("securityContext", pod)
    for where, container in _containers(spec):
        context = container.get("securityContext") or {}
        at = f"{where}.securityContext"
        findings += _ids_and_seccomp(at, context)
        if context.get("readOnlyRootFilesystem") is not True:
            findings.append(f"{at}.readOnlyRootFilesystem must be true")
        resources = container.get("resources") or {}
        for bound in ("requests", "limits"):
            for resource in ("cpu", "memory"):
                if resource not in (resources.get(bound) or {}):
                    findings.append(f"{where}.resources.{bound}.{resource} must be set")
    return findings


def _ids_and_seccomp(at: str, context: Spec) -> list[str]:
    findings = []
    if context.get("runAsNonRoot") is not True:
        findings.append(f"{at}.runAsNonRoot must be true")
    for field in ("runAsUser", "runAsGroup"):
        value = context.get(field)
        if not isinstance(value, int) or value <= 0:
            findings.append(f"{at}.{field} must be a non-zero number")
    if _seccomp(context) != "RuntimeDefault":
        findings.append(f"{at}.seccompProfile.type must be RuntimeDefault")
    return findings
