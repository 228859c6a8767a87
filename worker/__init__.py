"""lease-worker: an asyncio worker runtime for message queues whose leases extend themselves.

::

    from worker import Message, Worker

    app = Worker()

    @app.handler("orders")
    async def handle(message: Message) -> None:
        ...

Run it with `lease-worker run myapp:app`.
"""

from worker.app import Worker, WorkerContext
from worker.backend import Backend, Limits, QueueAdmin
from worker.clock import Clock, LoopClock, ManualClock
from worker.config import Backoff, ErrorPolicy, LeaseConfig, OnError, ShutdownConfig, WorkerConfig
from worker.errors import (
    AccessDenied,
    BackendError,
    ConfigError,
    DecodeError,
    Discard,
    FatalBackendError,
    HandlerSignal,
    LeaseWorkerError,
    OverLimit,
    QueueNotFound,
    RegistrationError,
    Retry,
    TransientBackendError,
)
from worker.lease import Lease, LeaseLostError
from worker.message import Message
from worker.metrics import Metrics
from worker.middleware import CallNext, Middleware
from worker.outcome import Outcome
from worker.supervisor import Supervisor
from worker.types import MessageAttribute, OutgoingMessage, QueueInfo, RedrivePolicy

__all__ = [
    "AccessDenied",
    "Backend",
    "BackendError",
    "Backoff",
    "CallNext",
    "Clock",
    "ConfigError",
    "DecodeError",
    "Discard",
    "ErrorPolicy",
    "FatalBackendError",
    "HandlerSignal",
    "Lease",
    "LeaseConfig",
    "LeaseLostError",
    "LeaseWorkerError",
    "Limits",
    "LoopClock",
    "ManualClock",
    "Message",
    "MessageAttribute",
    "Metrics",
    "Middleware",
    "OnError",
    "Outcome",
    "OutgoingMessage",
    "OverLimit",
    "QueueAdmin",
    "QueueInfo",
    "QueueNotFound",
    "RedrivePolicy",
    "RegistrationError",
    "Retry",
    "ShutdownConfig",
    "Supervisor",
    "TransientBackendError",
    "Worker",
    "WorkerConfig",
    "WorkerContext",
]
