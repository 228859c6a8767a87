"""The IAM policies in deploy/iam name exactly what the code calls, nothing more.

The SQS operations are read from backends/sqs/backend.py (the operation names each method
sends, following its calls to other methods), so a new call there fails this test until the
policy says whether the worker may make it. IAM has no batch actions: DeleteMessageBatch is
authorised as sqs:DeleteMessage, ChangeMessageVisibilityBatch as sqs:ChangeMessageVisibility.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import astuple
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import botocore.session
import pytest
from botocore import xform_name

from backends import BACKENDS
from tests.aws_calls import AwsCallsPlugin, Call
from tests.deploy.iam_policies import FEATURE_POLICIES, PROVISIONING, granted_actions, missing
from tests.deploy.iam_policies import iam_actions as iam_actions_for
from tests.deploy.kit import BASE, ROOT, one, rendered

SQS_BACKEND = ROOT / "backends" / "sqs" / "backend.py"
IAM = ROOT / "deploy" / "iam"
#: The Backend methods the runtime calls on a queue it works (receive, renew, release,
#: delete, read attributes); the queue sampler reads a dead-letter queue's attributes too.
WORKER_METHODS = ("queue_info", "receive", "extend", "release", "delete")
DEAD_LETTER_METHODS = ("queue_info",)
#: Backend methods that call nothing on the service (aclose) or only for the embedded engine
#: (create_queue: `lease-worker run` creates queues only for an embedded backend).
NOT_SQS_CALLS = {"aclose", "create_queue"}
PLACEHOLDERS = {
    "AWS_REGION",
    "AWS_ACCOUNT_ID",
    "QUEUE_NAME",
    "DLQ_NAME",
    "TARGET_QUEUE_NAME",
    "BUCKET_NAME",
    "KEY_PREFIX",
    "TABLE_NAME",
}


def _sqs_operation_names() -> frozenset[str]:
    model = botocore.session.get_session().get_service_model("sqs")
    return frozenset(model.operation_names)


def _methods() -> dict[str, ast.AsyncFunctionDef | ast.FunctionDef]:
    tree = ast.parse(SQS_BACKEND.read_text())
    (backend,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SqsBackend"]
    return {
        node.name: node
        for node in backend.body
        if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef)
    }


def sqs_operations(method_names: Iterable[str]) -> set[str]:
    """The SQS operations the given SqsBackend methods may send, directly or not."""
    methods, known = _methods(), _sqs_operation_names()
    operations: set[str] = set()
    seen: set[str] = set()
    pending = list(method_names)
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for node in ast.walk(methods[name]):
            if isinstance(node, ast.Constant) and node.value in known:
                operations.add(node.value)
            elif _is_self_call(node) and node.func.attr in methods:  # type: ignore[attr-defined]
                pending.append(node.func.attr)  # type: ignore[attr-defined]
    return operations


def _is_self_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "self"
    )


def iam_actions(operations: Iterable[str]) -> set[str]:
    return {"sqs:" + operation.removesuffix("Batch") for operation in operations}


def _policy(name: str) -> dict[str, Any]:
    policy: dict[str, Any] = json.loads((IAM / name).read_text())
    return policy


def _statement(policy: dict[str, Any], sid: str) -> dict[str, Any]:
    (statement,) = [s for s in policy["Statement"] if s["Sid"] == sid]
    found: dict[str, Any] = statement
    return found


def test_the_worker_may_make_exactly_the_calls_it_makes() -> None:
    statement = _statement(_policy("worker-policy.json"), "WorkTheQueue")
    needed = iam_actions(sqs_operations(WORKER_METHODS))
    assert needed == {
        "sqs:ChangeMessageVisibility",
        "sqs:DeleteMessage",
        "sqs:GetQueueAttributes",
        "sqs:GetQueueUrl",
        "sqs:ReceiveMessage",
    }
    assert set(statement["Action"]) == needed
    assert statement["Resource"] == "arn:aws:sqs:${AWS_REGION}:${AWS_ACCOUNT_ID}:${QUEUE_NAME}"


def test_the_dead_letter_queue_is_only_read() -> None:
    statement = _statement(_policy("worker-policy.json"), "SampleTheDeadLetterQueue")
    needed = iam_actions(sqs_operations(DEAD_LETTER_METHODS))
    assert set(statement["Action"]) == needed == {"sqs:GetQueueAttributes", "sqs:GetQueueUrl"}
    assert statement["Resource"] == "arn:aws:sqs:${AWS_REGION}:${AWS_ACCOUNT_ID}:${DLQ_NAME}"


def test_the_operation_scan_sees_every_call() -> None:
    """Every method's operations are found, the admin ones included: the scan is not blind."""
    everything = sqs_operations(_methods())
    assert everything == {
        "ChangeMessageVisibilityBatch",
        "CreateQueue",
        "DeleteMessageBatch",
        "DeleteQueue",
        "GetQueueAttributes",
        "GetQueueUrl",
        "PurgeQueue",
        "ReceiveMessage",
        "SendMessageBatch",
    }


def _backend_calls(path: Path) -> Iterator[str]:
    """Methods called on anything named `...backend`, except by a method of the same name
    (a wrapper handing a call through)."""

    def visit(node: ast.AST, function: str | None) -> Iterator[str]:
        if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef):
            function = node.name
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
            if name.endswith("backend") and node.func.attr != function:
                yield node.func.attr
        for child in ast.iter_child_nodes(node):
            yield from visit(child, function)

    yield from visit(ast.parse(path.read_text()), None)


def test_the_runtime_calls_no_other_backend_method() -> None:
    """What `lease-worker run` can call on a backend. Not the runtime's own calls:
    worker/testing.py (a test harness that sends), worker/producer.py (the application's
    sends: a handler that sends needs SendMessage on its target queues, granted by
    deploy/iam/producer-policy.json) and worker/integrations (the Spark pipeline, a
    driver of its own whose queue sink sends)."""
    integrations = ROOT / "worker" / "integrations"
    sources = [
        p
        for p in (ROOT / "worker").rglob("*.py")
        if p.name not in ("testing.py", "producer.py") and integrations not in p.parents
    ]
    called = {name for path in sources for name in _backend_calls(path)}
    assert "receive" in called and "delete" in called  # the scan finds calls at all
    assert called <= set(WORKER_METHODS) | NOT_SQS_CALLS
    assert not BACKENDS["sqs"].embedded


def _placeholders(text: str) -> set[str]:
    return set(re.findall(r"\$\{([A-Z_]+)\}", text))


#: The only wildcards in a Resource: `lease-worker dlq list` asks every queue whether it is a
#: dead-letter queue; a large payload's key is made up per message under the prefix.
WILDCARDS = {
    (
        "dlq-tools-policy.json",
        "FindTheDeadLetterQueues",
    ): "arn:aws:sqs:${AWS_REGION}:${AWS_ACCOUNT_ID}:*",
    (
        "s3-payloads-policy.json",
        "ReadAndRemoveLargePayloads",
    ): "arn:aws:s3:::${BUCKET_NAME}/${KEY_PREFIX}*",
    ("s3-payloads-policy.json", "StoreLargePayloads"): "arn:aws:s3:::${BUCKET_NAME}/${KEY_PREFIX}*",
}
RESOURCE_KINDS = ("arn:aws:sqs:", "arn:aws:s3:::", "arn:aws:dynamodb:")


def test_the_policies_grant_nothing_wide() -> None:
    names = [*FEATURE_POLICIES.values(), "keda-operator-policy.json"]
    assert sorted(p.name for p in IAM.glob("*.json")) == sorted(
        [*names, "worker-trust-policy.json"]
    )
    for name in names:
        policy = _policy(name)
        assert policy["Version"] == "2012-10-17"
        for statement in policy["Statement"]:
            assert statement["Effect"] == "Allow"
            assert all("*" not in action for action in statement["Action"]), name
            assert statement["Action"] == sorted(set(statement["Action"])), name
            resource = statement["Resource"]
            assert resource.startswith(RESOURCE_KINDS), name
            if "*" in resource:
                assert WILDCARDS.get((name, statement["Sid"])) == resource, (name, resource)
        assert _placeholders((IAM / name).read_text()) <= PLACEHOLDERS


def test_keda_may_only_read_the_queue_depth() -> None:
    (statement,) = _policy("keda-operator-policy.json")["Statement"]
    assert statement["Action"] == ["sqs:GetQueueAttributes"]
    worker = _statement(_policy("worker-policy.json"), "WorkTheQueue")
    assert statement["Resource"] == worker["Resource"]


def test_the_trust_policy_names_the_workers_service_account() -> None:
    (statement,) = _policy("worker-trust-policy.json")["Statement"]
    account = one(rendered(BASE), "ServiceAccount")["metadata"]["name"]
    condition = statement["Condition"]["StringEquals"]
    assert condition["${OIDC_PROVIDER}:sub"] == f"system:serviceaccount:${{NAMESPACE}}:{account}"
    assert condition["${OIDC_PROVIDER}:aud"] == "sts.amazonaws.com"
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"


# --- Every AWS operation the code names is granted somewhere (issue 29) -------------------

#: Where the project's AWS calls are made: the runtime and its stores, the real SQS client.
#: Not backends/smq (not AWS), nor the engine and its emulators (they answer calls).
SCANNED = [ROOT / "worker", ROOT / "backends" / "sqs"]
AWS_SERVICES = ("sqs", "s3", "dynamodb")


def _operations_by_name() -> dict[str, tuple[str, str]]:
    """CamelCase and snake_case operation names -> (service, operation)."""
    session = botocore.session.get_session()
    found: dict[str, tuple[str, str]] = {}
    for service in AWS_SERVICES:
        for operation in session.get_service_model(service).operation_names:
            found.setdefault(operation, (service, operation))
            found.setdefault(xform_name(operation), (service, operation))
    return found


def named_operations(paths: Iterable[Path]) -> set[tuple[str, str, str]]:
    """(file, service, operation) for each operation name in a string constant (what
    `SqsBackend._call` and the lean path send) or a method called (`s3.put_object(...)`)."""
    known = _operations_by_name()
    found = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            name = None
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                name = node.value if node.value[:1].isupper() else None
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                name = node.func.attr if _may_be_a_client_call(node.func) else None
            if name in known:
                found.add((str(path.relative_to(ROOT)), *known[name]))
    return found


def _may_be_a_client_call(func: ast.Attribute) -> bool:
    """A one-word operation (query, scan) counts only on something named like a client:
    a dashboard builder's `.query(...)` is not DynamoDB's Query."""
    receiver = ast.unparse(func.value).lower()
    return "_" in func.attr or any(word in receiver for word in ("client", *AWS_SERVICES))


def _granted_anywhere() -> set[str]:
    return {a for name in FEATURE_POLICIES.values() for a in granted_actions(_policy(name))}


def test_every_aws_operation_named_in_the_code_is_granted_by_some_policy() -> None:
    """A call path no test drives still fails here: a new `_call("TagQueue", ...)` or
    `client.update_item(...)` needs a policy (or is declared provisioning)."""
    sources = [p for folder in SCANNED for p in folder.rglob("*.py")]
    named = named_operations(sources)
    operations = {(service, operation) for _, service, operation in named}
    assert {("sqs", "ReceiveMessage"), ("s3", "PutObject"), ("dynamodb", "PutItem")} <= operations
    granted = _granted_anywhere()
    ungranted = sorted(
        f"{file}: {service} {operation}"
        for file, service, operation in named
        if (service, operation) not in PROVISIONING
        and not set(iam_actions_for(service, operation)) <= granted
    )
    assert ungranted == []


def test_the_scan_sees_a_new_call() -> None:
    new = ROOT / "build" / "iam-scan-probe.py"
    new.parent.mkdir(exist_ok=True)
    new.write_text("async def f(client):\n    await client.update_item(TableName='t')\n")
    try:
        assert named_operations([new]) == {("build/iam-scan-probe.py", "dynamodb", "UpdateItem")}
    finally:
        new.unlink()


def test_the_backstop_fails_a_run_whose_calls_a_policy_lacks() -> None:
    """What tests/aws_calls.py's controller check says when ListMessageMoveTasks is not in
    the console policy, and that it sets a failing exit status."""
    call = Call("sqs", "ListMessageMoveTasks", "console", "DeadLetterCalls.list_message_move_tasks")
    assert missing([call]) == []
    doctored = {name: _policy(name) for name in FEATURE_POLICIES.values()}
    for statement in doctored["console-policy.json"]["Statement"]:
        statement["Action"] = [a for a in statement["Action"] if a != "sqs:ListMessageMoveTasks"]
    assert missing([call], doctored) == [
        "console: DeadLetterCalls.list_message_move_tasks calls sqs ListMessageMoveTasks, "
        "needing sqs:ListMessageMoveTasks: not in deploy/iam/console-policy.json"
    ]
    plugin = AwsCallsPlugin(SimpleNamespace())  # type: ignore[arg-type]
    untagged = Call("sqs", "TagQueue", "worker", "SqsBackend.tag")
    plugin.pytest_testnodedown(
        SimpleNamespace(workeroutput={"aws_calls": [list(astuple(untagged))]}), None
    )
    session = SimpleNamespace(exitstatus=pytest.ExitCode.OK)
    plugin.pytest_sessionfinish(session)  # type: ignore[arg-type]
    assert session.exitstatus == pytest.ExitCode.TESTS_FAILED
    assert plugin.missing == [
        "worker: SqsBackend.tag calls sqs TagQueue, needing sqs:TagQueue: "
        "not in deploy/iam/worker-policy.json"
    ]
