"""The policies in deploy/iam, which feature each one serves, and what an AWS call needs.

- `FEATURE_POLICIES`: the feature a call serves (`tests.aws_calls.feature_of`) -> the policy
  file that must grant it. `provisioning` has no policy: creating and deleting queues and
  tables is for whoever provisions, never a pod; `PROVISIONING` says which operations.
- `iam_actions(service, operation)`: the IAM actions one call needs. IAM has no batch
  actions (DeleteMessageBatch is sqs:DeleteMessage); a message move task also needs, on its
  source queue, sqs:ReceiveMessage, sqs:DeleteMessage and sqs:GetQueueAttributes, and
  StartMessageMoveTask sqs:SendMessage on the destination (AWS's "Amazon SQS API
  permissions: Actions and resource reference").
- `missing(calls)`: the calls whose actions the feature's policy lacks (actions only: the
  backstop over the whole suite, whose queue names are made up per test).
- `Grants`: a policy with its placeholders filled in, asked whether it allows an action on
  a resource ARN, as IAM matches `Resource` (wildcards `*` and `?`). Conditions: none used.
- `table_rows(calls)` / `readme_rows(text)`: the mapping from call site to actions that
  deploy/iam/README.md shows, made from recorded calls and read back from the README.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tests.aws_calls import Call

IAM = Path(__file__).resolve().parents[2] / "deploy" / "iam"
README = IAM / "README.md"

FEATURE_POLICIES: Mapping[str, str] = {
    "worker": "worker-policy.json",
    "producer": "producer-policy.json",
    "console": "console-policy.json",
    "console-redrive": "console-redrive-policy.json",
    "dlq-tools": "dlq-tools-policy.json",
    "large-payloads": "s3-payloads-policy.json",
    "idempotency": "dynamodb-idempotency-policy.json",
}
#: What project code may call to provision (tests do, `lease-worker run` on the embedded
#: engine does, `create_table` does): granted by no policy here.
PROVISIONING = frozenset(
    {
        ("sqs", "CreateQueue"),
        ("sqs", "DeleteQueue"),
        ("sqs", "PurgeQueue"),
        ("sqs", "GetQueueAttributes"),  # create_queue reads the dead-letter queue's ARN
        ("sqs", "GetQueueUrl"),
        ("dynamodb", "CreateTable"),
        ("dynamodb", "DescribeTable"),
        ("dynamodb", "UpdateTimeToLive"),
    }
)
_MOVE_TASK_SOURCE = ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes")


def iam_actions(service: str, operation: str) -> tuple[str, ...]:
    """The actions one call needs on the resource it names, its own action first."""
    if service == "sqs":
        own = "sqs:" + operation.removesuffix("Batch")
        if operation.endswith("MessageMoveTask") or operation == "ListMessageMoveTasks":
            return (own, *_MOVE_TASK_SOURCE)
        return (own,)
    return (f"{service}:{operation}",)


def policy(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((IAM / name).read_text())
    return loaded


def granted_actions(document: Mapping[str, Any]) -> set[str]:
    return {
        action
        for statement in document["Statement"]
        if statement["Effect"] == "Allow"
        for action in statement["Action"]
    }


def missing(
    calls: Iterable[Call], policies: Mapping[str, Mapping[str, Any]] | None = None
) -> list[str]:
    """One line per (feature, call site, operation) whose actions its policy does not
    grant, or a provisioning call outside `PROVISIONING`. `policies`: file name -> document
    (default: the files in deploy/iam)."""
    documents = policies or {name: policy(name) for name in FEATURE_POLICIES.values()}
    lines = set()
    for call in calls:
        if call.feature == "provisioning":
            if (call.service, call.operation) not in PROVISIONING:
                lines.add(f"provisioning: {call.site} calls {call.operation}, not provisioning")
            continue
        name = FEATURE_POLICIES[call.feature]
        lacking = set(iam_actions(call.service, call.operation)) - granted_actions(documents[name])
        if lacking:
            lines.add(
                f"{call.feature}: {call.site} calls {call.service} {call.operation}, "
                f"needing {', '.join(sorted(lacking))}: not in deploy/iam/{name}"
            )
    return sorted(lines)


class Grants:
    """One policy document with its placeholders given values (`${NAME}` -> value)."""

    def __init__(self, document: Mapping[str, Any], values: Mapping[str, str]) -> None:
        text = json.dumps(document)
        left = set(re.findall(r"\$\{([A-Z_]+)\}", text)) - set(values)
        if left:
            raise ValueError(f"no value for {sorted(left)}")
        for name, value in values.items():
            text = text.replace("${" + name + "}", value)
        self.statements: list[dict[str, Any]] = json.loads(text)["Statement"]

    def allows(self, action: str, arn: str) -> bool:
        return any(
            statement["Effect"] == "Allow"
            and action in statement["Action"]
            and fnmatch.fnmatchcase(arn, statement["Resource"])
            for statement in self.statements
        )


def table_rows(calls: Iterable[Call]) -> set[tuple[str, str, str, str]]:
    """(feature, call site, operation, IAM actions) for each recorded call path."""
    return {
        (c.feature, c.site, c.operation, ", ".join(iam_actions(c.service, c.operation)))
        for c in calls
        if c.feature != "provisioning"
    }


_ROW = re.compile(r"^\| `([\w-]+)` \| `([\w.]+)` \| (\w+) \| ([\w:, ]+) \|$")


def readme_rows(text: str) -> set[tuple[str, str, str, str]]:
    rows = set()
    for line in text.splitlines():
        match = _ROW.match(line)
        if match:
            feature, site, operation, actions = match.groups()
            rows.add((feature, site, operation, actions.strip()))
    return rows


def render_rows(rows: Iterable[tuple[str, str, str, str]]) -> str:
    """The README's table lines for `rows`, sorted as the README keeps them."""
    order = list(FEATURE_POLICIES)
    return "\n".join(
        f"| `{feature}` | `{site}` | {operation} | {actions} |"
        for feature, site, operation, actions in sorted(
            rows, key=lambda row: (order.index(row[0]), row[1], row[2])
        )
    )


def required(
    call: Call, *, region: str, account: str, sources: Mapping[str, Iterable[str]], context: str
) -> list[tuple[str, str]]:
    """(action, resource ARN) pairs one recorded call needs. `sources`: a dead-letter queue's
    source queues, where a move task without a destination sends; `context`: the queue a
    call that names none acts on (CancelMessageMoveTask names only a task handle)."""
    actions = iam_actions(call.service, call.operation)
    if call.service == "s3":
        return [(action, f"arn:aws:s3:::{call.resource}") for action in actions]
    if call.service == "dynamodb":
        arn = f"arn:aws:dynamodb:{region}:{account}:table/{call.resource}"
        return [(action, arn) for action in actions]
    queue = "" if call.operation == "ListQueues" else call.resource or context
    pairs = [(action, f"arn:aws:sqs:{region}:{account}:{queue}") for action in actions]
    if call.operation == "StartMessageMoveTask":
        pairs += [
            ("sqs:SendMessage", f"arn:aws:sqs:{region}:{account}:{source}")
            for source in sources.get(queue, ())
        ]
    return pairs


def denied(
    calls: Iterable[Call],
    grants: Mapping[str, Grants],
    *,
    region: str,
    account: str,
    sources: Mapping[str, Iterable[str]] | None = None,
    context: str = "",
) -> list[str]:
    """One line per action a recorded call needs on its resource that its feature's policy
    (`grants`: feature -> filled-in policy) does not allow."""
    lines = set()
    for call in calls:
        if call.feature == "provisioning":
            continue
        pairs = required(
            call, region=region, account=account, sources=sources or {}, context=context
        )
        for action, arn in pairs:
            if not grants[call.feature].allows(action, arn):
                lines.add(
                    f"{call.feature}: {call.site} calls {call.operation}: "
                    f"deploy/iam/{FEATURE_POLICIES[call.feature]} does not allow {action} on {arn}"
                )
    return sorted(lines)
