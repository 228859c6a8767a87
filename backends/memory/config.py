"""The attributes of one queue of the in-memory engine, as it stores them."""

from __future__ import annotations

from dataclasses import dataclass

from worker.types import QueueSpec, RedrivePolicy

__all__ = ["QueueConfig"]


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueConfig:
    name: str
    url: str
    fifo: bool
    visibility_timeout_s: int
    delay_s: int
    retention_s: int
    redrive: RedrivePolicy | None
    content_based_deduplication: bool
    #: SQS's MaximumMessageSize: the largest body plus attributes a send may carry.
    max_message_bytes: int

    @classmethod
    def of(cls, spec: QueueSpec, url: str, *, max_message_bytes: int) -> QueueConfig:
        return cls(
            name=spec.name,
            url=url,
            fifo=spec.fifo,
            visibility_timeout_s=spec.visibility_timeout_s,
            delay_s=spec.delay_s,
            retention_s=spec.retention_s,
            redrive=spec.redrive,
            content_based_deduplication=spec.content_based_deduplication,
            max_message_bytes=max_message_bytes,
        )
