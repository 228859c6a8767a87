"""Large payloads through S3, in the pointer format of AWS's own extended clients.

A body over `threshold_bytes` is stored as an S3 object, and the message carries a pointer
instead, as the Java, Python, JavaScript and .NET extended clients write and read it::

    body:       ["software.amazon.payloadoffloading.PayloadS3Pointer",
                 {"s3BucketName": "my-bucket", "s3Key": "9f1c..."}]
    attribute:  ExtendedPayloadSize (Number) = the original body's size in bytes

so a message sent by one of those libraries is read here and the other way round (the
legacy pointer class `com.amazon.sqs.javamessaging.MessageS3Pointer` and attribute
`SQSLargePayloadSize` are read too).

- `Producer(backend, large_payloads=S3Payloads(s3, "bucket"))` stores large bodies before
  sending (the pointer takes one of the 10 attributes, so 9 are left to the caller).
- `Worker(large_payloads=...)` fetches each pointed-to body before decoding; a missing or
  unreadable object is a decode failure (the error policy applies), never a crash.
- `PayloadCleanup(backend, store)` wraps the worker's backend: an object is deleted once the
  delete of its message succeeded (off with `S3Payloads(delete_after=False)`, e.g. when a
  lifecycle rule expires the objects instead).

`s3` is an aiobotocore S3 client (anything with async put_object/get_object/delete_object),
opened and closed by the caller.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any

from worker.types import MessageAttribute, OutgoingMessage, ReceivedMessage

__all__ = ["MissingPayload", "Pointer", "S3Payloads", "pointer_of"]

POINTER_CLASS = "software.amazon.payloadoffloading.PayloadS3Pointer"
LEGACY_POINTER_CLASS = "com.amazon.sqs.javamessaging.MessageS3Pointer"
SIZE_ATTRIBUTE = "ExtendedPayloadSize"
LEGACY_SIZE_ATTRIBUTE = "SQSLargePayloadSize"
#: The extended clients' default threshold (SQS's limit before August 2025).
DEFAULT_THRESHOLD = 262_144

Pointer = tuple[str, str]  # (bucket, key)


class MissingPayload(Exception):
    """The object a pointer names could not be read. Its text names the object, not data."""


def pointer_of(received: ReceivedMessage) -> Pointer | None:
    """The (bucket, key) a message's body points to, or None for an ordinary message."""
    attributes = received.message_attributes
    if SIZE_ATTRIBUTE not in attributes and LEGACY_SIZE_ATTRIBUTE not in attributes:
        return None
    try:
        kind, where = json.loads(received.body)
        if kind not in (POINTER_CLASS, LEGACY_POINTER_CLASS):
            return None
        return str(where["s3BucketName"]), str(where["s3Key"])
    except (ValueError, TypeError, KeyError):
        return None


class S3Payloads:
    """Where large bodies go: one S3 bucket, through the caller's aiobotocore S3 client."""

    #: The producer checks bodies against this, not the queue's limit: they go to S3.
    max_body_bytes = 2**31

    def __init__(
        self,
        s3: Any,
        bucket: str,
        *,
        threshold_bytes: int = DEFAULT_THRESHOLD,
        always: bool = False,
        key_prefix: str = "",
        delete_after: bool = True,
    ) -> None:
        if not isinstance(threshold_bytes, int) or not 0 <= threshold_bytes <= 1_048_576:
            raise ValueError(f"threshold_bytes={threshold_bytes!r}: must be 0-1048576")
        self.s3 = s3
        self.bucket = bucket
        self.threshold_bytes = threshold_bytes
        self.always = always
        self.key_prefix = key_prefix
        self.delete_after = delete_after

    async def offload(self, message: OutgoingMessage) -> OutgoingMessage:
        """`message` itself if small enough, else its body stored and a pointer in its place."""
        data = message.body.encode("utf-8")
        if len(data) <= self.threshold_bytes and not self.always:
            return message
        key = f"{self.key_prefix}{uuid.uuid4()}"
        await self.s3.put_object(Bucket=self.bucket, Key=key, Body=data)
        pointer = [POINTER_CLASS, {"s3BucketName": self.bucket, "s3Key": key}]
        attributes = dict(message.message_attributes)
        attributes[SIZE_ATTRIBUTE] = MessageAttribute("Number", string_value=str(len(data)))
        return replace(
            message, body=json.dumps(pointer, separators=(",", ":")), message_attributes=attributes
        )

    async def resolve(self, received: ReceivedMessage) -> ReceivedMessage:
        """`received` with the body its pointer names; raises `MissingPayload`."""
        pointer = pointer_of(received)
        if pointer is None:
            return received
        bucket, key = pointer
        try:
            answer = await self.s3.get_object(Bucket=bucket, Key=key)
            async with answer["Body"] as stream:
                data = await stream.read()
            body = data.decode("utf-8")
        except Exception as error:  # botocore's NoSuchKey, AccessDenied, a bad encoding
            code = getattr(error, "response", {}).get("Error", {}).get("Code")
            raise MissingPayload(
                f"s3://{bucket}/{key} could not be read: {code or type(error).__name__}"
            ) from None
        return replace(received, body=body)

    async def delete(self, pointer: Pointer) -> None:
        bucket, key = pointer
        await self.s3.delete_object(Bucket=bucket, Key=key)
