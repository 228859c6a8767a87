"""Operations: the HTTP listener for Prometheus and Kubernetes' probes, and its health rules."""

from worker.ops.health import HealthPolicy, Verdict, liveness, readiness
from worker.ops.limits import OpsLimits
from worker.ops.listener import OpsListener

__all__ = ["HealthPolicy", "OpsLimits", "OpsListener", "Verdict", "liveness", "readiness"]
