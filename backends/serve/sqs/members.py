"""Request members of SQS's JSON protocol, read as SQS names them.

Part of the operations (`backends.serve.sqs.service`), in the JSON protocol's spelling
(the query protocol's is mapped to it by `backends.serve.sqs.query`); the rule kept:

- Members are read as SQS names them; a wrong JSON type is `InvalidParameterValue`, a missing
  required member `MissingParameter`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from backends.serve.sqs.errors import SqsError

__all__ = [
    "entries",
    "entry_id",
    "integer",
    "invalid",
    "mapping",
    "missing",
    "required_string",
    "string",
    "string_list",
]


def invalid(member: str, reason: str) -> SqsError:
    return SqsError("InvalidParameterValue", f"Value for parameter {member} is invalid. {reason}")


def missing(member: str) -> SqsError:
    return SqsError("MissingParameter", f"The request must contain the parameter {member}.")


def string(params: Mapping[str, Any], member: str) -> str | None:
    value = params.get(member)
    if value is None or isinstance(value, str):
        return value
    raise invalid(member, "Reason: expected a string.")


def required_string(params: Mapping[str, Any], member: str) -> str:
    value = string(params, member)
    if value is None:
        raise missing(member)
    return value


def integer(params: Mapping[str, Any], member: str) -> int | None:
    value = params.get(member)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise invalid(member, "Reason: expected an integer.")


def string_list(params: Mapping[str, Any], member: str) -> list[str]:
    value = params.get(member)
    if value is None:
        return []
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return value
    raise invalid(member, "Reason: expected a list of strings.")


def mapping(params: Mapping[str, Any], member: str) -> dict[str, Any]:
    value = params.get(member)
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    raise invalid(member, "Reason: expected a map.")


def entries(params: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    value = params.get("Entries")
    if value is None:
        return []
    if isinstance(value, list) and all(isinstance(item, dict) for item in value):
        return value
    raise invalid("Entries", "Reason: expected a list of entries.")


def entry_id(entry: Mapping[str, Any]) -> str:
    # A missing or odd id is left for the engine's batch check (InvalidBatchEntryId).
    value = entry.get("Id")
    return value if isinstance(value, str) else ""
