"""What `FlowControl.max_bytes` counts, and how many messages a receive may ask for under it.

A held message costs memory beyond its body's UTF-8 bytes, and a receive costs more while
its answer is read than once its messages are held. Measured on a worker process
(bench/flow_bytes.py, 1 MiB JSON bodies): a held message kept its body (1 MiB as a Python
string), its decoded payload (another 1 MiB for a body that is mostly one string) while its
handler ran, and every receive answer was held three times over for a moment (its raw bytes,
the JSON parser's copy of them, and the strings parsed out of it). So:

- `message_bytes` is what holding one message costs: its body as Python stores it (1, 2 or
  4 bytes a character: `sys.getsizeof`, so a body with one emoji counts four times its
  length), its receipt handle and attributes' values, and, unless the handler takes the body raw,
  as much again as the body for its decoded payload. A payload of many small values (numbers,
  short strings) takes more than its JSON text (a list of floats about four times): that is
  the multiplier left to the cap's user (docs/how-to/flow-control.md).
- `ByteBudget` sizes each receive from the largest message seen so far, counted with twice its
  body for the answer's raw bytes and the parser's copy while it is read: a receive asks for
  no more messages than the bytes left under `max_bytes` can take, and at least one (so a
  message larger than the cap is still received, alone). The first receive, with nothing
  seen, asks for one message. So bytes counted go beyond `max_bytes` by one message at most,
  when the largest seen is still the largest.

Pure: no I/O and no clock.
"""

from __future__ import annotations

import sys

from worker.types import ReceivedMessage

__all__ = ["ByteBudget", "message_bytes"]

_sizeof = sys.getsizeof


def message_bytes(received: ReceivedMessage, *, decoded: bool) -> int:
    """What holding `received` costs in memory, as `max_bytes` counts it (see the module)."""
    body = _sizeof(received.body)
    size = body + body if decoded else body
    size += _sizeof(received.receipt_handle)
    for value in received.attributes.values():  # the names are the same few for all
        size += _sizeof(value)
    for name, attribute in received.message_attributes.items():
        size += _sizeof(name) + _sizeof(attribute.data_type)
        if attribute.string_value is not None:
            size += _sizeof(attribute.string_value)
        if attribute.binary_value is not None:
            size += _sizeof(attribute.binary_value)
    return size


class ByteBudget:
    """How many messages one receive may ask for while `max_bytes` is counted."""

    __slots__ = ("largest", "max_bytes")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        #: The most a message seen so far cost while its receive was read: its count from
        #: `message_bytes` and twice its body (0: none seen yet).
        self.largest = 0

    def seen(self, counted: int, received: ReceivedMessage) -> None:
        """A message was received and counted `counted` bytes."""
        receiving = counted + 2 * _sizeof(received.body)
        if receiving > self.largest:
            self.largest = receiving

    def receive_count(self, reserved: int, counted: int) -> int:
        """Messages to ask for, of `reserved` slots, with `counted` bytes counted now."""
        if not self.largest:
            return min(reserved, 1)
        return max(1, min(reserved, (self.max_bytes - counted) // self.largest))

    def ahead(self, count: int) -> int:
        """Bytes to count for a receive of `count` messages while it is under way."""
        return count * self.largest
