"""Operations: the HTTP listener for Prometheus and Kubernetes' probes, and its health rules."""

from worker.ops.health import HealthPolicy, Verdict, liveness, readiness
from worker.ops.listener import OpsListener

__all__ = ["HealthPolicy", "OpsListener", "Verdict", "liveness", "readiness"]
