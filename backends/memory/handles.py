"""Receipt-handle rules: what a delete with a handle that is not the latest one does.

SQS documents two behaviours, and this engine offers them as `HandleRules`:

- `SQS` (as SQS documents it): on a standard queue a delete with an old handle, or a second
  delete, *succeeds* and deletes nothing ("If you use an old ReceiptHandle, the request will
  succeed, but the message might not be deleted"). On a FIFO queue a handle whose
  visibility timeout has ended is refused: `InvalidParameterValue`, "The receipt handle has
  expired." A handle this engine never issued is `ReceiptHandleIsInvalid` on both.
- `STRICT` (the engine's default): everything `SQS` refuses, and also what SQS accepts
  silently, a stale or repeated delete on a standard queue (`ReceiptHandleIsInvalid`). A
  runtime tested against it cannot lean on SQS's leniency: a lost lease shows.

Both modes: a delete with the latest handle of a stored message deletes it (a standard queue
even after its visibility ended, as SQS does); visibility changes need the latest handle of
a message in flight (`ReceiptHandleIsInvalid`, `MessageNotInflight`).
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["EXPIRED", "INVALID", "HandleRules", "stale_delete_problem"]

#: SQS's answer to a FIFO delete whose handle's visibility timeout has ended.
EXPIRED = ("InvalidParameterValue", "The receipt handle has expired.")
#: SQS's answer to a handle it cannot use.
INVALID = ("ReceiptHandleIsInvalid", "not the latest receipt handle of a stored message")


class HandleRules(StrEnum):
    """How deletes with a handle that is not the latest are answered (see the module)."""

    STRICT = "strict"
    SQS = "sqs"


def stale_delete_problem(
    rules: HandleRules, *, issued: bool, fifo: bool, still_stored: bool
) -> tuple[str, str] | None:
    """Why a delete with a handle that is not a stored message's latest is refused, or None
    when it succeeds and deletes nothing. `issued`: this engine handed the handle out;
    `still_stored`: its message is still in the queue (received again since)."""
    if not issued:
        return INVALID
    if fifo and still_stored:
        return EXPIRED
    if rules is HandleRules.SQS:
        return None
    return INVALID
