"""IAM derived from behaviour: each feature's call path is driven here through the real
clients, against moto's server (SQS, S3, DynamoDB) or `lease-worker serve-sqs` (which has
the message move tasks moto lacks), with the AWS call recorder on (tests/aws_calls.py).
Every call made must be allowed by its feature's policy in deploy/iam on the resource it
names, the placeholders filled with this test's queues, bucket and table; and the calls
made must be the ones deploy/iam/README.md lists for that feature, so neither drifts.

`GET /api/dlq` calls ListMessageMoveTasks: the console test also checks that a copy of the
console policy without that action is refused, the way a pod was refused (502).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from backends.sqs import SqsBackend, SqsSettings
from tests.aws_calls import RECORDER, Call
from tests.cli.test_dlq_cli import dead_lettered
from tests.cli.test_serve_sqs_cli import Endpoint, client, free_port
from tests.deploy.iam_policies import (
    FEATURE_POLICIES,
    README,
    Grants,
    denied,
    policy,
    readme_rows,
    render_rows,
    table_rows,
)
from tests.moto_server import MOTO_ACCESS_KEY, MOTO_REGION, MOTO_SECRET_KEY, MotoServer
from tests.ops.test_listener import listening
from worker import Message, Retry, Worker, WorkerConfig
from worker.envelope.large_payloads import S3Payloads
from worker.envelope.payload_cleanup import PayloadCleanup
from worker.idempotency.dynamodb_store import DynamoDBStore, create_table
from worker.idempotency.record import Record, RecordState
from worker.sending.producer import Producer
from worker.testing import run_worker
from worker.types import QueueSpec, RedrivePolicy

pytestmark = pytest.mark.timeout(90)

ACCOUNT = "123456789012"
TOKEN = "iam-test-console-token"


def names(prefix: str) -> dict[str, str]:
    """Fresh resource names, by the placeholder each fills in the policies."""
    tag = f"{prefix}-{uuid.uuid4().hex[:8]}"
    return {
        "AWS_REGION": MOTO_REGION,
        "AWS_ACCOUNT_ID": ACCOUNT,
        "QUEUE_NAME": tag,
        "DLQ_NAME": f"{tag}-dlq",
        "TARGET_QUEUE_NAME": f"{tag}-target",
        "BUCKET_NAME": f"{tag}-payloads",
        "KEY_PREFIX": "large/",
        "TABLE_NAME": f"{tag}-idempotency",
    }


def check(
    calls: Iterable[Call],
    values: Mapping[str, str],
    owned: Iterable[str],
    *,
    context: str = "",
    documents: Mapping[str, Any] | None = None,
) -> list[str]:
    """What the policies refuse of `calls`; asserts the README rows of the `owned` features
    are exactly the call paths recorded, and the others' recorded rows are listed."""
    calls = list(calls)
    documents = documents or {}
    grants = {
        feature: Grants(documents.get(name) or policy(name), values)
        for feature, name in FEATURE_POLICIES.items()
    }
    recorded, listed = table_rows(calls), readme_rows(README.read_text())
    for feature in owned:
        mine = {row for row in recorded if row[0] == feature}
        theirs = {row for row in listed if row[0] == feature}
        assert mine == theirs, f"deploy/iam/README.md, {feature} rows:\n{render_rows(mine)}"
    assert recorded <= listed, f"not in deploy/iam/README.md:\n{render_rows(recorded - listed)}"
    sources = {values["DLQ_NAME"]: [values["QUEUE_NAME"]]}
    return denied(
        calls, grants, region=MOTO_REGION, account=ACCOUNT, sources=sources, context=context
    )


@asynccontextmanager
async def sqs_backend(endpoint_url: str, kind: str = "botocore") -> AsyncIterator[SqsBackend]:
    settings = SqsSettings(
        region=MOTO_REGION,
        endpoint_url=endpoint_url,
        access_key_id=MOTO_ACCESS_KEY,
        secret_access_key=MOTO_SECRET_KEY,
        max_attempts=2,
        client="lean" if kind == "lean" else "botocore",
    )
    backend = await SqsBackend.connect(settings)
    try:
        yield backend
    finally:
        await backend.aclose()


@asynccontextmanager
async def aws_client(service: str, endpoint_url: str) -> AsyncIterator[Any]:
    from aiobotocore.config import AioConfig
    from aiobotocore.session import get_session

    async with get_session().create_client(
        service,
        region_name=MOTO_REGION,
        endpoint_url=endpoint_url,
        aws_access_key_id=MOTO_ACCESS_KEY,
        aws_secret_access_key=MOTO_SECRET_KEY,
        config=AioConfig(s3={"addressing_style": "path"}),
    ) as made:
        yield made


@pytest.fixture(scope="module")
def serve_sqs() -> Iterator[str]:
    served = Endpoint("--port", str(free_port()))
    try:
        yield served.event("sqs_endpoint.started")["url"]
    finally:
        served.stop()


async def queues_with_dead_letters(backend: SqsBackend, values: Mapping[str, str]) -> None:
    await backend.create_queue(QueueSpec(values["DLQ_NAME"]))
    redrive = RedrivePolicy(values["DLQ_NAME"], 3)
    await backend.create_queue(QueueSpec(values["QUEUE_NAME"], redrive=redrive))


def worker_app(queue: str, large_payloads: S3Payloads | None = None) -> Worker:
    app = Worker(WorkerConfig(wait_s=1), large_payloads=large_payloads)

    @app.handler(queue)
    async def handle(message: Message) -> None:
        if message.body["do"] == "extend":
            await message.lease.extend(60)
        elif message.body["do"] == "retry" and message.receive_count == 1:
            raise Retry(after_s=0)

    return app


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["botocore", "lean"])
async def test_the_worker_may_make_every_call_it_makes(moto_server: MotoServer, kind: str) -> None:
    """Receive, renew, release, delete, the start-up checks and the queue sampler, which
    reads the dead-letter queue too."""
    values = names("worker")
    queue, dlq = values["QUEUE_NAME"], values["DLQ_NAME"]
    async with sqs_backend(moto_server.endpoint_url) as admin:
        await queues_with_dead_letters(admin, values)
        for do in ("delete", "extend", "retry"):
            await Producer(admin).send(queue, {"do": do})
    # A backend of its own, which finds the queues' URLs as a deployed worker does.
    async with sqs_backend(moto_server.endpoint_url, kind) as backend:
        with RECORDER.tap() as calls:
            app = worker_app(queue)
            async with run_worker(app, backend=backend, sample_queues_every_s=600) as harness:
                await harness.wait_for_handled(4, timeout_s=30)
                # The sampler's first round, on its own task: the dead-letter queue last.
                await calls.wait_for(lambda call: call.resource == dlq)
    assert {c.lean for c in calls if c.operation == "ReceiveMessage"} == {kind == "lean"}
    assert {c.operation for c in calls} >= {"ChangeMessageVisibilityBatch", "DeleteMessageBatch"}
    assert check(calls, values, ["worker"]) == []


@pytest.mark.asyncio
async def test_the_console_dead_letter_view_and_its_redrive_are_granted(serve_sqs: str) -> None:
    values = names("console")
    queue, dlq = values["QUEUE_NAME"], values["DLQ_NAME"]
    dead_lettered(client(serve_sqs), queue)  # `queue` and `queue`-dlq with one dead letter
    async with sqs_backend(serve_sqs) as backend:
        app = worker_app(queue)
        with RECORDER.tap() as calls:
            async with (
                run_worker(app, backend=backend) as harness,
                listening(harness.supervisor, console_token=TOKEN) as port,
                aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http,
            ):
                async with http.get("/api/dlq") as answer:
                    assert answer.status == 200, await answer.text()
                    [row] = (await answer.json())["dead_letter_queues"]
                    assert (row["queue"], row["visible"]) == (dlq, 1)
                body = {"queue": dlq, "confirm": dlq}
                headers = {"Authorization": f"Bearer {TOKEN}"}
                async with http.post("/api/dlq/redrive", json=body, headers=headers) as answer:
                    assert answer.status == 202, await answer.text()
    assert {c.operation for c in calls if c.feature == "console"} >= {"ListMessageMoveTasks"}
    assert {c.operation for c in calls if c.feature == "console-redrive"} >= {
        "StartMessageMoveTask"
    }
    assert check(calls, values, ["console", "console-redrive"]) == []
    # The console without its redrive (the debugging overlay: no token) needs, and is
    # granted, no move task and nothing on the source queue.
    read_only = Grants(policy("console-policy.json"), values)
    arn = f"arn:aws:sqs:{MOTO_REGION}:{ACCOUNT}:"
    assert not read_only.allows("sqs:StartMessageMoveTask", arn + dlq)
    assert not read_only.allows("sqs:SendMessage", arn + queue)
    assert check(calls, values, [], documents={"console-policy.json": without_list_tasks()}) == [
        "console: DeadLetterCalls.list_message_move_tasks calls ListMessageMoveTasks: "
        "deploy/iam/console-policy.json does not allow sqs:ListMessageMoveTasks on "
        f"arn:aws:sqs:{MOTO_REGION}:{ACCOUNT}:{dlq}"
    ]


def without_list_tasks() -> dict[str, Any]:
    """The console policy as it was before issue 29: no sqs:ListMessageMoveTasks."""
    document = policy("console-policy.json")
    for statement in document["Statement"]:
        statement["Action"] = [a for a in statement["Action"] if a != "sqs:ListMessageMoveTasks"]
    return document


def test_the_dead_letter_tools_are_granted(
    serve_sqs: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`lease-worker dlq` list, inspect, tasks, redrive, cancel and purge, in this process."""
    from worker.cli.main import main

    for variable, value in (
        ("AWS_ACCESS_KEY_ID", MOTO_ACCESS_KEY),
        ("AWS_SECRET_ACCESS_KEY", MOTO_SECRET_KEY),
        ("AWS_REGION", MOTO_REGION),
    ):
        monkeypatch.setenv(variable, value)
    values = names("tools")
    queue, dlq = values["QUEUE_NAME"], values["DLQ_NAME"]
    dead_lettered(client(serve_sqs), queue)

    def dlq_tool(*args: str) -> int:
        return main(["dlq", *args, "--endpoint-url", serve_sqs])

    with RECORDER.tap() as calls:
        assert dlq_tool("list", "--prefix", queue) == 0
        assert dlq_tool("inspect", dlq) == 0
        assert dlq_tool("tasks", dlq) == 0
        capsys.readouterr()
        assert dlq_tool("redrive", dlq, "--rate", "1", "--json") == 0
        handle = json.loads(capsys.readouterr().out)
        dlq_tool("cancel", handle if isinstance(handle, str) else handle["task_handle"])
        assert dlq_tool("purge", dlq, "--confirm", dlq) == 0
    assert {c.operation for c in calls} >= {"ListQueues", "CancelMessageMoveTask", "PurgeQueue"}
    assert check(calls, values, ["dlq-tools"], context=dlq) == []


@pytest.mark.asyncio
async def test_a_producer_may_send_and_a_worker_may_take_large_payloads_through_s3(
    moto_server: MotoServer,
) -> None:
    """The producer sends to the queue the worker works (its target)."""
    values = names("payloads")
    queue, bucket = values["QUEUE_NAME"], values["BUCKET_NAME"]
    values["TARGET_QUEUE_NAME"] = queue
    async with sqs_backend(moto_server.endpoint_url) as admin:
        await admin.create_queue(QueueSpec(queue))
    async with (
        aws_client("s3", moto_server.endpoint_url) as s3,
        sqs_backend(moto_server.endpoint_url) as sqs,
    ):
        await s3.create_bucket(Bucket=bucket)
        store = S3Payloads(s3, bucket, key_prefix=values["KEY_PREFIX"], always=True)
        app = worker_app(queue, store)
        with RECORDER.tap() as calls:
            producer = Producer(sqs, large_payloads=store)
            await producer.send(queue, {"do": "delete"})
            async with run_worker(app, backend=PayloadCleanup(sqs, store)) as harness:
                await producer.send(queue, {"do": "delete"})
                await harness.wait_for_handled(2, timeout_s=30)
            listed = await s3.list_objects_v2(Bucket=bucket)
    assert listed.get("Contents", []) == []  # stored, fetched, deleted after the message
    assert {c.operation for c in calls if c.service == "s3"} == {
        "PutObject",
        "GetObject",
        "DeleteObject",
    }
    assert check(calls, values, ["producer", "large-payloads"]) == []


@pytest.mark.asyncio
async def test_the_idempotency_store_is_granted(moto_server: MotoServer) -> None:
    values = names("idempotency")
    table = values["TABLE_NAME"]
    async with aws_client("dynamodb", moto_server.endpoint_url) as dynamodb:
        with RECORDER.tap() as calls:
            await create_table(dynamodb, table)
            store = DynamoDBStore(dynamodb, table)
            record = Record(
                key="order-1",
                token="token-1",
                state=RecordState.IN_PROGRESS,
                owner="owner-1",
                stale_at=100.0,
                expires_at=100.0,
            )
            assert await store.create(record, now=0.0) is None
            assert await store.create(record, now=1.0) is not None  # refused, then read
            assert await store.replace(record, token="token-1")
            await store.beat("owner-1", until=200.0)
            assert await store.beat_of("owner-1") == 200.0
            assert await store.remove("order-1", token="token-1")
    assert {c.feature for c in calls} == {"provisioning", "idempotency"}
    assert check(calls, values, ["idempotency"]) == []
