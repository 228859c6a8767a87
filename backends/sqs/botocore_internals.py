"""Every private name of botocore and aiobotocore the SQS client uses, each with its reason.

Everything else in `backends.sqs` uses their public interfaces only (a test greps for it:
`tests/backends/sqs/test_botocore_internals.py`). A private name can change in any release,
so `pyproject.toml` bounds `aiobotocore` (which pins botocore) to the releases tested, and
`scripts/test` runs `tests/backends/sqs` on the oldest and the newest of them. Moving a
bound means running those suites on the new end. The names:

- `client._user_agent_creator` (botocore), read by `skip_user_agent_rebuild` to unregister
  the handler that builds the User-Agent header a second time for every request (about a
  tenth of a call's CPU on the botocore client). Only the client holds the bound method the
  handler was registered as; without it the header is built twice, which is correct, so a
  release without it only costs the CPU.
"""

from __future__ import annotations

from typing import Any

__all__ = ["skip_user_agent_rebuild"]


def skip_user_agent_rebuild(client: Any) -> None:
    """botocore builds the User-Agent header twice per request (the second time to add
    features registered during the call); that second build is about a tenth of a call's
    CPU. The header keeps its first form. Skipped quietly if botocore changes its shape."""
    creator = getattr(client, "_user_agent_creator", None)
    handler = getattr(creator, "rebuild_and_replace_user_agent_handler", None)
    if handler is not None:
        client.meta.events.unregister("request-created.sqs", handler)
