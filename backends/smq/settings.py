"""`SmqSettings`: how `backends.smq` reaches SMQ.

Rules this module keeps:
- The endpoint is given (`--endpoint-url`) or read from `ALIBABA_CLOUD_SMQ_ENDPOINT`
  (`http(s)://<account id>.mns.<region>.aliyuncs.com`); there is no default.
- Credentials come from Alibaba Cloud's usual variables (`ALIBABA_CLOUD_ACCESS_KEY_ID`,
  `ALIBABA_CLOUD_ACCESS_KEY_SECRET`, optional `ALIBABA_CLOUD_SECURITY_TOKEN` for STS) unless
  given; a key id needs its secret. They are never logged (the repr hides them).
- Every call has a timeout (a long poll: its wait plus `call_timeout_s`), unlike the SDK's
  HTTPS calls, which have none.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from worker.errors import ConfigError
from worker.rules import is_url

__all__ = ["SmqSettings"]

_ENV_ENDPOINT = "ALIBABA_CLOUD_SMQ_ENDPOINT"
_ENV_KEY_ID = "ALIBABA_CLOUD_ACCESS_KEY_ID"
_ENV_SECRET = "ALIBABA_CLOUD_ACCESS_KEY_SECRET"
_ENV_TOKEN = "ALIBABA_CLOUD_SECURITY_TOKEN"


@dataclass(frozen=True, slots=True, kw_only=True)
class SmqSettings:
    """How to reach SMQ."""

    #: `http(s)://<account id>.mns.<region>.aliyuncs.com`, or serve-smq's URL.
    endpoint: str
    access_key_id: str = field(repr=False)
    access_key_secret: str = field(repr=False)
    #: An STS token, for temporary credentials.
    security_token: str | None = field(default=None, repr=False)
    #: Seconds a call may take beyond its long poll's wait.
    call_timeout_s: float = 10.0
    #: Calls on the wire at once (extensions go one per call): the connection pool's size.
    max_concurrency: int = 64

    def __post_init__(self) -> None:
        if not is_url(self.endpoint):
            raise ConfigError(f"SMQ endpoint {self.endpoint!r}: an http:// or https:// URL")
        if not self.access_key_id or not self.access_key_secret:
            raise ConfigError("SMQ needs an AccessKey id and its secret")
        if self.call_timeout_s <= 0 or self.max_concurrency < 1:
            raise ConfigError("SMQ: call_timeout_s > 0 and max_concurrency >= 1")

    @classmethod
    def from_env(
        cls, endpoint: str | None = None, env: Mapping[str, str] | None = None
    ) -> SmqSettings:
        """Settings from `endpoint` (else the environment's) and the environment's keys."""
        env = os.environ if env is None else env
        endpoint = endpoint or env.get(_ENV_ENDPOINT)
        if not endpoint:
            raise ConfigError(f"--backend smq: give --endpoint-url or set {_ENV_ENDPOINT}")
        key_id, secret = env.get(_ENV_KEY_ID, ""), env.get(_ENV_SECRET, "")
        if not key_id or not secret:
            raise ConfigError(f"--backend smq: set {_ENV_KEY_ID} and {_ENV_SECRET}")
        return cls(
            endpoint=endpoint.rstrip("/"),
            access_key_id=key_id,
            access_key_secret=secret,
            security_token=env.get(_ENV_TOKEN) or None,
        )
