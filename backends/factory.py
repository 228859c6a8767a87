"""The backend factory table: each backend's name, description and `connect` function.

Rules: a new backend is one entry in `BACKENDS`; nothing outside this module names a
backend; `connect` takes only `ConnectOptions` and answers an open `Backend`, or raises
`ConfigError` for options that backend cannot use.

A setting the AWS chain refuses while the SQS client is made (a profile that does not exist,
a malformed region or endpoint, half a key pair, a config file that does not parse, any
other botocore configuration error) is a `ConfigError` of one line naming where the value
came from (`--region`, `AWS_REGION`, `AWS_PROFILE`, ...) and what to do, never botocore's
traceback nor a library's keyword (`region=`).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from botocore.exceptions import (
    BotoCoreError,
    ConfigParseError,
    InvalidRegionError,
    NoRegionError,
    PartialCredentialsError,
    ProfileNotFound,
)
from botocore.session import Session as BotocoreSession

from backends.memory import MemoryBackend
from backends.smq import SmqBackend, SmqSettings
from backends.sqs import SqsBackend, SqsSettings
from backends.sqs.settings import DEFAULT_SQS_CLIENT, SQS_CLIENTS
from worker.backend import Backend
from worker.errors import ConfigError
from worker.rules import is_url

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
    if options.endpoint_url and not is_url(options.endpoint_url):
        raise ConfigError(f"--endpoint-url {options.endpoint_url!r}: {_NOT_AN_ENDPOINT}")
    _check_ca_bundle()
    settings = SqsSettings(
        region=options.region,
        endpoint_url=options.endpoint_url,
        queue_urls=options.queue_urls,
        client=client,  # type: ignore[arg-type]  # checked above
    )
    try:
        return await SqsBackend.connect(settings)
    except (BotoCoreError, ValueError) as error:
        mapped = _aws_setup_error(error, options)
        if mapped is None:
            raise
        raise mapped from error


_NOT_AN_ENDPOINT = "not an http:// or https:// URL, e.g. http://localhost:9324"


def _check_ca_bundle() -> None:
    # botocore would fail every call on a missing bundle, retried as if the service were down.
    bundle = os.environ.get("AWS_CA_BUNDLE")
    if bundle and not os.path.isfile(bundle):
        raise ConfigError(f"AWS_CA_BUNDLE={bundle!r}: no such file; fix the path or unset it")


def _aws_setup_error(error: Exception, options: ConnectOptions) -> ConfigError | None:
    """One line for what the AWS chain refused while the client was made; None: not ours."""
    if isinstance(error, ConfigError) and isinstance(error.__cause__, NoRegionError):
        return ConfigError(
            "no AWS region: give --region (e.g. --region us-east-1) or set AWS_REGION, "
            "or a region in the AWS profile"
        )
    if isinstance(error, ProfileNotFound):
        return _no_such_profile(str(error.kwargs.get("profile", "")))
    if isinstance(error, InvalidRegionError):
        region = str(error.kwargs.get("region_name", ""))
        where = _source(region, options.region, "--region", ("AWS_REGION", "AWS_DEFAULT_REGION"))
        return ConfigError(f"{where}: not an AWS region name, e.g. us-east-1")
    if isinstance(error, PartialCredentialsError):
        fix = (
            "set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or neither"
            if error.kwargs.get("provider") == "env"
            else "give the profile both keys"
        )
        return ConfigError(f"AWS credentials: {error}; {fix}")
    if isinstance(error, ConfigParseError):
        return ConfigError(
            f"the AWS config file {error.kwargs.get('path')} cannot be parsed: fix it, or point "
            "AWS_CONFIG_FILE (AWS_SHARED_CREDENTIALS_FILE for credentials) at another file"
        )
    if isinstance(error, BotoCoreError):
        detail = " ".join(str(error).split())
        return ConfigError(f"AWS configuration: {detail} (see the AWS_* variables, ~/.aws/config)")
    return _bad_endpoint(options)


def _no_such_profile(profile: str) -> ConfigError:
    variable = next(
        (name for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE") if os.environ.get(name)),
        "AWS_PROFILE",
    )
    try:
        known = sorted(BotocoreSession().available_profiles)
    except BotoCoreError:
        known = []
    there = f"profiles there: {', '.join(known)}" if known else "they hold none"
    return ConfigError(
        f"{variable}={profile!r}: no such profile in the AWS config files ({there}); set "
        f"{variable} to one of them, or unset {variable}"
    )


def _bad_endpoint(options: ConnectOptions) -> ConfigError | None:
    """The client refused its endpoint URL (a ValueError): say which setting gave it."""
    if options.endpoint_url:
        return ConfigError(f"--endpoint-url {options.endpoint_url!r}: {_NOT_AN_ENDPOINT}")
    for variable in ("AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL"):
        value = os.environ.get(variable)
        if value:
            return ConfigError(f"{variable}={value!r}: {_NOT_AN_ENDPOINT}")
    return None


def _source(value: str, given: str | None, flag: str, variables: tuple[str, ...]) -> str:
    """Where `value` came from: the option, the first variable holding it, or the profile."""
    if given == value:
        return f"{flag} {value!r}"
    for variable in variables:
        if os.environ.get(variable) == value:
            return f"{variable}={value!r}"
    return f"region {value!r} of the AWS profile"


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
