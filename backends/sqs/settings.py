"""`SqsSettings`: how `backends.sqs` reaches SQS.

Rules this module keeps:
- Region, endpoint and credentials come from the standard AWS chain unless given explicitly.
- botocore retries in `standard` mode (`total_max_attempts` counts the first try).
- `client` picks how the hot calls travel: "lean", the default (`backends.sqs.lean`:
  receive, delete, extend and send written, signed, sent and read directly, with botocore's
  credential chain and standard-mode retry rules, answering and raising what botocore
  would; everything else stays on aiobotocore), or "botocore" (aiobotocore for everything:
  the opt-out, for code that hooks botocore's event system or instruments aiobotocore's
  `_make_api_call` on the hot calls).
- No call follows a redirect, on either client (`backends.sqs.redirects`): the client's
  HTTP session is `backends.sqs.botocore_internals.NoRedirectSession`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, get_args

from aiobotocore.config import AioConfig

from backends.sqs.botocore_internals import NoRedirectSession
from worker.errors import ConfigError
from worker.rules import is_url

__all__ = [
    "DEFAULT_SQS_CLIENT",
    "DEFAULT_SYSTEM_ATTRIBUTES",
    "KEEPALIVE_S",
    "SQS_CLIENTS",
    "SqsClientKind",
    "SqsSettings",
]

SqsClientKind = Literal["botocore", "lean"]
#: The values of `SqsSettings.client`.
SQS_CLIENTS: tuple[str, ...] = get_args(SqsClientKind)
#: `SqsSettings.client` when none is given (the CLI's and the factory's default too).
DEFAULT_SQS_CLIENT: SqsClientKind = "lean"

_LONGEST_POLL_S = 20
#: Seconds an idle connection is kept, on both clients: aiobotocore's own default (its
#: `DEFAULT_KEEPALIVE_TIMEOUT`, a private constant, copied by value), under the 20 s after
#: which AWS closes an idle connection.
KEEPALIVE_S = 12.0
DEFAULT_SYSTEM_ATTRIBUTES = (
    "ApproximateReceiveCount",
    "SentTimestamp",
    "MessageGroupId",
    "MessageDeduplicationId",
    "SequenceNumber",
    "AWSTraceHeader",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SqsSettings:
    """How to reach SQS. Unset fields fall back to the standard AWS chain (env, profile, role)."""

    #: AWS region; None: `AWS_REGION` / `AWS_DEFAULT_REGION` / the profile.
    region: str | None = None
    #: Another endpoint (moto, LocalStack, a VPC endpoint); None: the region's own.
    endpoint_url: str | None = None
    #: Explicit credentials; all None: the standard chain. A key id needs its secret.
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    #: A named profile of the shared config files.
    profile: str | None = None
    #: Attempts per call including the first (botocore `standard` retry mode).
    max_attempts: int = 5
    connect_timeout_s: float = 5.0
    #: Must exceed the 20 s long poll, or every idle receive would time out.
    read_timeout_s: float = 30.0
    max_pool_connections: int = 20
    #: Known queue URLs by name, used instead of GetQueueUrl (another account's queues).
    queue_urls: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    #: System attributes asked for on every receive. The runtime needs the receive count
    #: and (FIFO) the group; each further attribute costs parsing on every message, so
    #: `("All",)` is opt-in.
    system_attributes: tuple[str, ...] = DEFAULT_SYSTEM_ATTRIBUTES
    #: Message attributes asked for on every receive (only those set cost anything).
    message_attributes: tuple[str, ...] = ("All",)
    #: How ReceiveMessage, DeleteMessageBatch, ChangeMessageVisibilityBatch and
    #: SendMessageBatch travel: "lean" (the default: the same calls without botocore's
    #: generic serialise / event / parse steps; credentials, signing, endpoint and
    #: standard-mode retries still botocore's, answers and exceptions as botocore's) or
    #: "botocore" (plain aiobotocore: its event hooks see those calls too).
    client: SqsClientKind = DEFAULT_SQS_CLIENT

    def __post_init__(self) -> None:
        if self.client not in SQS_CLIENTS:
            raise ConfigError(
                f"SqsSettings.client={self.client!r}: choose from {', '.join(SQS_CLIENTS)}"
            )
        object.__setattr__(self, "queue_urls", MappingProxyType(dict(self.queue_urls)))
        for name, url in self.queue_urls.items():
            if not is_url(url):
                raise ConfigError(f"SqsSettings.queue_urls[{name!r}]={url!r}: not an http(s) URL")
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ConfigError("SqsSettings: access_key_id and secret_access_key go together")
        rules = (
            ("max_attempts", self.max_attempts >= 1, ">= 1"),
            ("connect_timeout_s", self.connect_timeout_s > 0, "> 0"),
            ("read_timeout_s", self.read_timeout_s > _LONGEST_POLL_S, f"> {_LONGEST_POLL_S}"),
            ("max_pool_connections", self.max_pool_connections >= 1, ">= 1"),
        )
        for name, ok, rule in rules:
            if not ok:
                raise ConfigError(f"SqsSettings.{name}={getattr(self, name)!r}: must be {rule}")

    def client_config(self) -> AioConfig:
        return AioConfig(
            retries={"mode": "standard", "total_max_attempts": self.max_attempts},
            connect_timeout=self.connect_timeout_s,
            read_timeout=self.read_timeout_s,
            max_pool_connections=self.max_pool_connections,
            # The backend builds and checks entries; botocore's validator would walk every call.
            parameter_validation=False,
            connector_args={"keepalive_timeout": KEEPALIVE_S},
            # No redirect is ever followed (`backends.sqs.redirects`).
            http_session_cls=NoRedirectSession,
        )
