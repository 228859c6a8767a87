"""The backend factory table: each backend's name, description and `connect` function.

Rules: a new backend is one entry in `BACKENDS`; nothing outside this module names a
backend; `connect` takes only `ConnectOptions` and answers an open `Backend`, or raises
`ConfigError` for options that backend cannot use.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from backends.memory import MemoryBackend
from backends.smq import SmqBackend, SmqSettings
from backends.sqs import SqsBackend, SqsSettings
from backends.sqs.settings import DEFAULT_SQS_CLIENT, SQS_CLIENTS
from worker.backend import Backend
from worker.errors import ConfigError

__all__ = (
    "BACKENDS",
    "DEFAULT_SQS_CLIENT",
    "SQS_CLIENTS",
    "BackendKind",
    "ConnectOptions",
    "connect",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectOptions:
    """Where a backend connects to, as the CLI's options give it (all optional)."""

    region: str | None = None
    endpoint_url: str | None = None
    #: Queue name -> URL, for queues not found by name.
    queue_urls: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    #: SQS only: `SqsSettings.client` ("botocore" or "lean"); None: the settings' default.
    sqs_client: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class BackendKind:
    """One entry of the table."""

    name: str
    description: str
    connect: Callable[[ConnectOptions], Awaitable[Backend]]
    #: True for a backend that lives in this process and starts with no queues.
    embedded: bool


async def _connect_memory(options: ConnectOptions) -> Backend:
    given = [
        flag
        for flag, value in (
            ("--region", options.region),
            ("--endpoint-url", options.endpoint_url),
            ("--queue-url", options.queue_urls),
            ("--sqs-client", options.sqs_client),
        )
        if value
    ]
    if given:
        raise ConfigError(f"{', '.join(given)}: not used by --backend memory (the embedded engine)")
    return MemoryBackend()


async def _connect_sqs(options: ConnectOptions) -> Backend:
    client = options.sqs_client or DEFAULT_SQS_CLIENT
    if client not in SQS_CLIENTS:
        raise ConfigError(f"--sqs-client {client!r}: choose from {', '.join(SQS_CLIENTS)}")
    settings = SqsSettings(
        region=options.region,
        endpoint_url=options.endpoint_url,
        queue_urls=options.queue_urls,
        client=client,  # type: ignore[arg-type]  # checked above
    )
    return await SqsBackend.connect(settings)


async def _connect_smq(options: ConnectOptions) -> Backend:
    given = [
        flag
        for flag, value in (
            ("--region", options.region),
            ("--queue-url", options.queue_urls),
            ("--sqs-client", options.sqs_client),
        )
        if value
    ]
    if given:
        raise ConfigError(
            f"{', '.join(given)}: not used by --backend smq (queues by name on --endpoint-url)"
        )
    return await SmqBackend.connect(SmqSettings.from_env(options.endpoint_url))


BACKENDS: Mapping[str, BackendKind] = MappingProxyType(
    {
        kind.name: kind
        for kind in (
            BackendKind(
                name="memory",
                description="the embedded in-memory engine",
                connect=_connect_memory,
                embedded=True,
            ),
            BackendKind(
                name="sqs",
                description="Amazon SQS (or an SQS-compatible endpoint)",
                connect=_connect_sqs,
                embedded=False,
            ),
            BackendKind(
                name="smq",
                description="Alibaba Cloud SMQ, formerly MNS (or serve-smq); keys from "
                "ALIBABA_CLOUD_ACCESS_KEY_ID/_SECRET",
                connect=_connect_smq,
                embedded=False,
            ),
        )
    }
)


async def connect(name: str, options: ConnectOptions | None = None) -> Backend:
    """Open the backend called `name`; `ConfigError` for a name not in `BACKENDS`."""
    kind = BACKENDS.get(name)
    if kind is None:
        raise ConfigError(f"backend {name!r}: choose from {', '.join(BACKENDS)}")
    return await kind.connect(options or ConnectOptions())
