"""lease-worker: an asyncio worker runtime for message queues whose leases extend themselves.

::

    from worker import Message, Worker

    app = Worker()

    @app.handler("orders")
    async def handle(message: Message) -> None:
        ...

Run it with `lease-worker run app:app`.

Every public name is here, in `__all__`; the subpackages are the layers behind them
(the contract: `types`, `errors`, `backend`, `config`, `clock`; what users write against:
`app`, `registry`, `middleware`, `message`; the pure `core`; the async `runtime`; the `cli`
and `testing` composition roots).
"""

import importlib as _importlib
import importlib.metadata as _metadata
import typing as _typing

if _typing.TYPE_CHECKING:
    from worker.app import HandlerGuard, Worker
    from worker.backend import Backend, DeadLetterAdmin, Limits, QueueAdmin
    from worker.clock import Clock, LoopClock, ManualClock
    from worker.config import (
        AdaptiveConcurrency,
        Backoff,
        ErrorPolicy,
        FlowControl,
        LeaseConfig,
        OnError,
        RateLimit,
        ShutdownConfig,
        TenantCap,
        WorkerConfig,
    )
    from worker.core.lease import Lease, LeaseState, LeaseView
    from worker.core.settlement import Outcome
    from worker.envelope.codecs import PayloadError
    from worker.envelope.large_payloads import S3Payloads
    from worker.envelope.payload_cleanup import PayloadCleanup
    from worker.errors import (
        AccessDenied,
        BackendError,
        BatchFailure,
        ConfigError,
        DecodeError,
        Discard,
        Duplicate,
        FatalBackendError,
        HandlerSignal,
        LeaseLostError,
        LeaseWorkerError,
        MessageRejected,
        OverLimit,
        QueueNotFound,
        RegistrationError,
        Retry,
        SendFailed,
        TransientBackendError,
        UnsupportedOperation,
        WorkerCrashed,
    )
    from worker.message import Message
    from worker.middleware import CallNext, Middleware
    from worker.registry import AppSpec, Decoder, DescribesApp, Handlers, Hook, WorkerContext
    from worker.runtime.metrics import Metrics, MetricsSnapshot
    from worker.runtime.supervisor import Supervisor, run, serve
    from worker.sending.outgoing import Outgoing
    from worker.sending.producer import Producer, Sender, SendResult
    from worker.sending.sync_producer import SyncProducer
    from worker.types import (
        BatchResult,
        Deletion,
        EntryFailure,
        MessageAttribute,
        MoveTask,
        OutgoingMessage,
        QueueInfo,
        QueueSpec,
        ReceivedMessage,
        RedrivePolicy,
        VisibilityChange,
    )

#: The module each public name comes from, imported when the name is first used (PEP 562),
#: not with the package: code that needs one small part of worker (`worker.errors`,
#: `worker.jsonlib`), as the backends do, does not load the runtime, the sending side and
#: all they import. `from worker import Worker` works as before.
_HOMES = {
    "worker.app": "HandlerGuard Worker",
    "worker.backend": "Backend DeadLetterAdmin Limits QueueAdmin",
    "worker.clock": "Clock LoopClock ManualClock",
    "worker.config": (
        "AdaptiveConcurrency Backoff ErrorPolicy FlowControl LeaseConfig OnError RateLimit "
        "ShutdownConfig TenantCap WorkerConfig"
    ),
    "worker.core.lease": "Lease LeaseState LeaseView",
    "worker.core.settlement": "Outcome",
    "worker.envelope.codecs": "PayloadError",
    "worker.envelope.large_payloads": "S3Payloads",
    "worker.envelope.payload_cleanup": "PayloadCleanup",
    "worker.errors": (
        "AccessDenied BackendError BatchFailure ConfigError DecodeError Discard Duplicate "
        "FatalBackendError HandlerSignal LeaseLostError LeaseWorkerError MessageRejected "
        "OverLimit QueueNotFound RegistrationError Retry SendFailed TransientBackendError "
        "UnsupportedOperation WorkerCrashed"
    ),
    "worker.message": "Message",
    "worker.middleware": "CallNext Middleware",
    "worker.registry": "AppSpec Decoder DescribesApp Handlers Hook WorkerContext",
    "worker.runtime.metrics": "Metrics MetricsSnapshot",
    "worker.runtime.supervisor": "Supervisor run serve",
    "worker.sending.outgoing": "Outgoing",
    "worker.sending.producer": "Producer Sender SendResult",
    "worker.sending.sync_producer": "SyncProducer",
    "worker.types": (
        "BatchResult Deletion EntryFailure MessageAttribute MoveTask OutgoingMessage QueueInfo "
        "QueueSpec ReceivedMessage RedrivePolicy VisibilityChange"
    ),
}
_HOME_OF = {name: home for home, names in _HOMES.items() for name in names.split()}


def __getattr__(name: str) -> object:
    home = _HOME_OF.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(home), name)
    globals()[name] = value  # found once, then a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


try:
    __version__ = _metadata.version("lease-worker")
except _metadata.PackageNotFoundError:  # run from a checkout that was never installed
    __version__ = "0+unknown"

__all__ = (
    "AccessDenied",
    "AdaptiveConcurrency",
    "AppSpec",
    "Backend",
    "BackendError",
    "Backoff",
    "BatchFailure",
    "BatchResult",
    "CallNext",
    "Clock",
    "ConfigError",
    "DeadLetterAdmin",
    "DecodeError",
    "Decoder",
    "Deletion",
    "DescribesApp",
    "Discard",
    "Duplicate",
    "EntryFailure",
    "ErrorPolicy",
    "FatalBackendError",
    "FlowControl",
    "HandlerGuard",
    "HandlerSignal",
    "Handlers",
    "Hook",
    "Lease",
    "LeaseConfig",
    "LeaseLostError",
    "LeaseState",
    "LeaseView",
    "LeaseWorkerError",
    "Limits",
    "LoopClock",
    "ManualClock",
    "Message",
    "MessageAttribute",
    "MessageRejected",
    "Metrics",
    "MetricsSnapshot",
    "Middleware",
    "MoveTask",
    "OnError",
    "Outcome",
    "Outgoing",
    "OutgoingMessage",
    "OverLimit",
    "PayloadCleanup",
    "PayloadError",
    "Producer",
    "QueueAdmin",
    "QueueInfo",
    "QueueNotFound",
    "QueueSpec",
    "RateLimit",
    "ReceivedMessage",
    "RedrivePolicy",
    "RegistrationError",
    "Retry",
    "S3Payloads",
    "SendFailed",
    "SendResult",
    "Sender",
    "ShutdownConfig",
    "Supervisor",
    "SyncProducer",
    "TenantCap",
    "TransientBackendError",
    "UnsupportedOperation",
    "VisibilityChange",
    "Worker",
    "WorkerConfig",
    "WorkerContext",
    "WorkerCrashed",
    "__version__",
    "run",
    "serve",
)
