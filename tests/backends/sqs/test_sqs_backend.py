"""SqsBackend without a server: the error mapping, the wire format, the checks before a call.

Mocks stand only at the aiobotocore boundary (the client's methods); everything behind them
is the real module.
"""

from __future__ import annotations

import json
from typing import Any
from unittest.mock import AsyncMock, MagicMock, patch

import aiohttp
import anyio
import pytest
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    ReadTimeoutError,
    SSLError,
)

from backends.serve.sqs.endpoint import sqs_endpoint_in_thread
from backends.sqs import SqsBackend, SqsSettings
from backends.sqs.errors import map_error
from backends.sqs.settings import DEFAULT_SYSTEM_ATTRIBUTES
from worker.backend import Backend, QueueAdmin
from worker.errors import (
    AccessDenied,
    BackendError,
    ConfigError,
    FatalBackendError,
    OverLimit,
    QueueNotFound,
    TransientBackendError,
)
from worker.rules import SQS_LIMITS
from worker.types import (
    Deletion,
    EntryFailure,
    MessageAttribute,
    OutgoingMessage,
    QueueSpec,
    RedrivePolicy,
    VisibilityChange,
)

URL = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs"
DLQ_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs-dlq"


def client_error(
    code: str, status: int = 400, query_code: str | None = None, operation: str = "X"
) -> ClientError:
    error: dict[str, Any] = {"Code": code, "Message": f"{code} happened"}
    if query_code is not None:
        error["QueryErrorCode"] = query_code
    return ClientError({"Error": error, "ResponseMetadata": {"HTTPStatusCode": status}}, operation)


def mapped(exc: BaseException) -> BackendError:
    error = map_error(exc, operation="ReceiveMessage", queue="jobs")
    assert error is not None
    return error


# -- the error mapping -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("Throttling", 400, TransientBackendError),
        ("ThrottlingException", 400, TransientBackendError),
        ("RequestThrottled", 403, TransientBackendError),
        ("SlowDown", 503, TransientBackendError),
        ("KmsThrottled", 400, TransientBackendError),
        ("ServiceUnavailable", 503, TransientBackendError),
        ("InternalError", 500, TransientBackendError),
        ("SomethingNew", 502, TransientBackendError),
        ("OverLimit", 403, OverLimit),
        ("AWS.SimpleQueueService.NonExistentQueue", 400, QueueNotFound),
        ("QueueDoesNotExist", 400, QueueNotFound),
        ("AccessDenied", 403, AccessDenied),
        ("InvalidClientTokenId", 403, AccessDenied),
        ("SignatureDoesNotMatch", 403, AccessDenied),
        ("KmsAccessDenied", 400, AccessDenied),
        ("InvalidParameterValue", 400, FatalBackendError),
        ("AWS.SimpleQueueService.TooManyEntriesInBatchRequest", 400, FatalBackendError),
    ],
)
def test_client_error_codes(code: str, status: int, expected: type[BackendError]) -> None:
    error = mapped(client_error(code, status))
    assert type(error) is expected
    assert (error.operation, error.queue, error.code) == ("ReceiveMessage", "jobs", code)


def test_query_compatible_code_is_looked_up_too() -> None:
    error = mapped(client_error("AWS.SimpleQueueService.Odd", query_code="QueueDoesNotExist"))
    assert isinstance(error, QueueNotFound)
    assert error.code == "AWS.SimpleQueueService.Odd"


def test_over_limit_is_transient() -> None:
    assert isinstance(mapped(client_error("OverLimit", 403)), TransientBackendError)


@pytest.mark.parametrize(
    "exc",
    [
        EndpointConnectionError(endpoint_url="https://sqs"),
        ConnectionClosedError(endpoint_url="https://sqs"),
        ReadTimeoutError(endpoint_url="https://sqs"),
        ConnectTimeoutError(endpoint_url="https://sqs"),
        aiohttp.ClientConnectionError("reset"),
        aiohttp.ServerDisconnectedError(),
        ConnectionResetError("reset by peer"),
        TimeoutError(),
    ],
    ids=lambda exc: type(exc).__name__,
)
def test_transport_failures_are_transient(exc: BaseException) -> None:
    error = mapped(exc)
    assert type(error) is TransientBackendError
    assert error.code == type(exc).__name__


def test_missing_credentials_are_access_denied() -> None:
    error = mapped(NoCredentialsError())
    assert type(error) is AccessDenied
    assert error.code == "NoCredentialsError"


def test_tls_failure_and_other_botocore_errors_are_fatal() -> None:
    tls = SSLError(endpoint_url="https://sqs", error="certificate verify failed")
    assert type(mapped(tls)) is FatalBackendError
    assert type(mapped(ParamValidationError(report="bad"))) is FatalBackendError


def test_foreign_exceptions_are_not_mapped() -> None:
    assert map_error(ValueError("mine"), operation="X") is None
    assert map_error(QueueNotFound("already mapped"), operation="X") is None


def test_mapped_error_reads_as_one_line() -> None:
    exc = ClientError(
        {"Error": {"Code": "InternalError", "Message": "line one\nline two"}}, "ReceiveMessage"
    )
    text = str(mapped(exc))
    assert text == "ReceiveMessage on queue 'jobs' failed (InternalError): line one line two"


# -- the backend over a mocked client -----------------------------------------------------


def make_backend(**methods: Any) -> tuple[SqsBackend, MagicMock]:
    client = MagicMock()
    client.get_queue_url = AsyncMock(return_value={"QueueUrl": URL})
    for name, value in methods.items():
        setattr(client, name, value if isinstance(value, AsyncMock) else AsyncMock(**value))
    return SqsBackend(client), client


def test_backend_satisfies_the_protocols() -> None:
    backend, _ = make_backend()
    assert isinstance(backend, Backend)
    assert isinstance(backend, QueueAdmin)
    assert backend.limits is SQS_LIMITS


@pytest.mark.asyncio
async def test_receive_parameters_and_parsing() -> None:
    raw = {
        "MessageId": "m-1",
        "ReceiptHandle": "rh-1",
        "Body": "payload",
        "Attributes": {"ApproximateReceiveCount": "3", "SentTimestamp": "1700000000000"},
        "MessageAttributes": {
            "kind": {"DataType": "String", "StringValue": "a"},
            "blob": {"DataType": "Binary", "BinaryValue": b"\x01"},
        },
    }
    backend, client = make_backend(receive_message={"return_value": {"Messages": [raw]}})
    [message] = await backend.receive("jobs", max_messages=10, wait_s=0.5, visibility_s=60)
    client.receive_message.assert_awaited_once_with(
        QueueUrl=URL,
        MaxNumberOfMessages=10,
        WaitTimeSeconds=1,
        MessageSystemAttributeNames=list(DEFAULT_SYSTEM_ATTRIBUTES),
        MessageAttributeNames=["All"],
        VisibilityTimeout=60,
    )
    assert (message.queue, message.message_id, message.receipt_handle) == ("jobs", "m-1", "rh-1")
    assert message.receive_count == 3
    assert message.attributes["SentTimestamp"] == "1700000000000"
    assert message.message_attributes["kind"] == MessageAttribute("String", string_value="a")
    assert message.message_attributes["blob"] == MessageAttribute("Binary", binary_value=b"\x01")


@pytest.mark.asyncio
async def test_receive_leaves_visibility_to_the_queue_by_default() -> None:
    backend, client = make_backend(receive_message={"return_value": {}})
    assert list(await backend.receive(URL, max_messages=1, wait_s=20)) == []
    params = client.receive_message.await_args.kwargs
    assert "VisibilityTimeout" not in params
    assert params["QueueUrl"] == URL and params["WaitTimeSeconds"] == 20
    client.get_queue_url.assert_not_awaited()


def test_installed_botocore_knows_message_system_attribute_names() -> None:
    import botocore.session

    model = botocore.session.get_session().get_service_model("sqs")
    members = model.operation_model("ReceiveMessage").input_shape.members
    assert "MessageSystemAttributeNames" in members


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_messages": 0, "wait_s": 0},
        {"max_messages": 11, "wait_s": 0},
        {"max_messages": 1, "wait_s": 21},
        {"max_messages": 1, "wait_s": 0, "visibility_s": 43_201},
    ],
)
@pytest.mark.asyncio
async def test_receive_bounds_are_checked_before_calling(kwargs: dict[str, Any]) -> None:
    backend, client = make_backend(receive_message={"return_value": {}})
    with pytest.raises(ValueError):
        await backend.receive("jobs", **kwargs)
    client.receive_message.assert_not_awaited()


@pytest.mark.asyncio
async def test_queue_url_is_resolved_once_and_evicted_when_missing() -> None:
    backend, client = make_backend(receive_message={"return_value": {}})
    for _ in range(3):
        await backend.receive("jobs", max_messages=1, wait_s=0)
    client.get_queue_url.assert_awaited_once_with(QueueName="jobs")

    client.receive_message.side_effect = client_error("QueueDoesNotExist")
    with pytest.raises(QueueNotFound) as caught:
        await backend.receive("jobs", max_messages=1, wait_s=0)
    assert (caught.value.operation, caught.value.queue) == ("ReceiveMessage", "jobs")
    client.receive_message.side_effect = None
    await backend.receive("jobs", max_messages=1, wait_s=0)
    assert client.get_queue_url.await_count == 2


@pytest.mark.asyncio
async def test_known_queue_urls_skip_get_queue_url() -> None:
    client = MagicMock()
    client.get_queue_url = AsyncMock(side_effect=AssertionError("no lookup expected"))
    client.receive_message = AsyncMock(side_effect=client_error("QueueDoesNotExist"))
    backend = SqsBackend(client, queue_urls={"jobs": URL})
    for _ in range(2):  # a known URL stays known, even after the queue was missing once
        with pytest.raises(QueueNotFound):
            await backend.receive("jobs", max_messages=1, wait_s=0)
        assert client.receive_message.await_args.kwargs["QueueUrl"] == URL


def test_settings_queue_urls_are_checked_and_frozen() -> None:
    settings = SqsSettings(queue_urls={"jobs": URL})
    with pytest.raises(TypeError):
        settings.queue_urls["other"] = URL  # type: ignore[index]
    with pytest.raises(ConfigError, match="jobs"):
        SqsSettings(queue_urls={"jobs": "jobs"})


@pytest.mark.asyncio
async def test_missing_queue_name_is_queue_not_found() -> None:
    backend, client = make_backend()
    client.get_queue_url.side_effect = client_error("AWS.SimpleQueueService.NonExistentQueue")
    with pytest.raises(QueueNotFound) as caught:
        await backend.queue_info("nope")
    assert caught.value.operation == "GetQueueUrl"
    assert caught.value.queue == "nope"


@pytest.mark.asyncio
async def test_batch_failures_are_values() -> None:
    response = {
        "Successful": [{"Id": "a"}],
        "Failed": [
            {"Id": "b", "Code": "ReceiptHandleIsInvalid", "Message": "bad", "SenderFault": True},
            {"Id": "c", "Code": "InternalError", "SenderFault": False},
        ],
    }
    backend, client = make_backend(change_message_visibility_batch={"return_value": response})
    entries = [VisibilityChange(i, f"rh-{i}", 30) for i in "abc"]
    result = await backend.extend("jobs", entries)
    assert result.succeeded == ("a",)
    assert result.failed == (
        EntryFailure("b", "ReceiptHandleIsInvalid", "bad", True),
        EntryFailure("c", "InternalError", "", False),
    )
    client.change_message_visibility_batch.assert_awaited_once_with(
        QueueUrl=URL,
        Entries=[{"Id": i, "ReceiptHandle": f"rh-{i}", "VisibilityTimeout": 30} for i in "abc"],
    )


@pytest.mark.asyncio
async def test_delete_batch() -> None:
    response = {"Successful": [{"Id": "d"}]}
    backend, client = make_backend(delete_message_batch={"return_value": response})
    result = await backend.delete("jobs", [Deletion("d", "rh")])
    assert result.succeeded == ("d",) and not result.failed
    client.delete_message_batch.assert_awaited_once_with(
        QueueUrl=URL, Entries=[{"Id": "d", "ReceiptHandle": "rh"}]
    )


@pytest.mark.asyncio
async def test_send_wire_format_and_message_ids() -> None:
    response = {"Successful": [{"Id": "a", "MessageId": "m-a"}, {"Id": "b", "MessageId": "m-b"}]}
    backend, client = make_backend(send_message_batch={"return_value": response})
    messages = [
        OutgoingMessage(body="plain", entry_id="a"),
        OutgoingMessage(
            body="rich",
            entry_id="b",
            delay_s=5,
            message_attributes={"k": MessageAttribute("Number", string_value="1")},
            group_id="g",
            deduplication_id="d",
        ),
    ]
    result = await backend.send("jobs", messages)
    assert dict(result.message_ids) == {"a": "m-a", "b": "m-b"}
    entries = client.send_message_batch.await_args.kwargs["Entries"]
    assert entries[0] == {"Id": "a", "MessageBody": "plain"}
    assert entries[1] == {
        "Id": "b",
        "MessageBody": "rich",
        "DelaySeconds": 5,
        "MessageAttributes": {"k": {"DataType": "Number", "StringValue": "1"}},
        "MessageGroupId": "g",
        "MessageDeduplicationId": "d",
    }


@pytest.mark.parametrize(
    "ids", [[f"e{i}" for i in range(11)], ["x", "x"], ["has space"], ["x" * 81], [""]]
)
@pytest.mark.asyncio
async def test_bad_batches_never_leave(ids: list[str]) -> None:
    backend, client = make_backend(
        change_message_visibility_batch={"return_value": {}},
        delete_message_batch={"return_value": {}},
        send_message_batch={"return_value": {}},
    )
    with pytest.raises(ValueError):
        await backend.extend("jobs", [VisibilityChange(i, "rh", 30) for i in ids])
    with pytest.raises(ValueError):
        await backend.release("jobs", [VisibilityChange(i, "rh", 0) for i in ids])
    with pytest.raises(ValueError):
        await backend.delete("jobs", [Deletion(i, "rh") for i in ids])
    with pytest.raises(ValueError):
        await backend.send("jobs", [OutgoingMessage(body="b", entry_id=i) for i in ids])
    client.change_message_visibility_batch.assert_not_awaited()
    client.delete_message_batch.assert_not_awaited()
    client.send_message_batch.assert_not_awaited()


@pytest.mark.asyncio
async def test_visibility_out_of_range_never_leaves() -> None:
    backend, client = make_backend(change_message_visibility_batch={"return_value": {}})
    with pytest.raises(ValueError, match="43200"):
        await backend.extend("jobs", [VisibilityChange("a", "rh", 43_201)])
    with pytest.raises(ValueError):
        await backend.release("jobs", [VisibilityChange("a", "rh", -1)])
    client.change_message_visibility_batch.assert_not_awaited()


@pytest.mark.asyncio
async def test_empty_batches_make_no_call() -> None:
    backend, client = make_backend()
    assert (await backend.delete("jobs", [])).succeeded == ()
    assert (await backend.extend("jobs", [])).failed == ()
    client.get_queue_url.assert_not_awaited()


@pytest.mark.asyncio
async def test_whole_call_errors_carry_operation_queue_and_code() -> None:
    backend, _ = make_backend(
        send_message_batch={"side_effect": client_error("RequestThrottled", 403)}
    )
    with pytest.raises(TransientBackendError) as caught:
        await backend.send("jobs", [OutgoingMessage(body="secret body")])
    error = caught.value
    assert (error.operation, error.queue, error.code) == (
        "SendMessageBatch",
        "jobs",
        "RequestThrottled",
    )
    assert "secret body" not in str(error)
    assert "\n" not in str(error)


@pytest.mark.asyncio
async def test_transport_error_during_delete_is_transient() -> None:
    backend, _ = make_backend(
        delete_message_batch={"side_effect": ReadTimeoutError(endpoint_url=URL)}
    )
    with pytest.raises(TransientBackendError) as caught:
        await backend.delete("jobs", [Deletion("a", "rh")])
    assert caught.value.code == "ReadTimeoutError"


@pytest.mark.asyncio
async def test_cancellation_and_bugs_pass_through() -> None:
    backend, _ = make_backend(receive_message={"side_effect": KeyError("bug")})
    with pytest.raises(KeyError):
        await backend.receive("jobs", max_messages=1, wait_s=0)


@pytest.mark.asyncio
async def test_queue_info_parsing() -> None:
    attributes = {
        "VisibilityTimeout": "45",
        "DelaySeconds": "2",
        "FifoQueue": "true",
        "RedrivePolicy": json.dumps(
            {
                "deadLetterTargetArn": "arn:aws:sqs:us-east-1:123456789012:jobs-dlq",
                "maxReceiveCount": "4",
            }
        ),
        "ApproximateNumberOfMessages": "7",
        "ApproximateNumberOfMessagesNotVisible": "3",
        "ApproximateNumberOfMessagesDelayed": "1",
    }
    backend, client = make_backend(
        get_queue_attributes={"return_value": {"Attributes": attributes}}
    )
    info = await backend.queue_info("jobs")
    assert (info.name, info.url, info.visibility_timeout_s, info.delay_s) == ("jobs", URL, 45, 2)
    assert info.fifo
    assert info.redrive == RedrivePolicy("jobs-dlq", 4)
    assert (info.approximate_visible, info.approximate_in_flight) == (7, 3)
    assert info.approximate_delayed == 1
    client.get_queue_attributes.assert_awaited_once_with(QueueUrl=URL, AttributeNames=["All"])


@pytest.mark.asyncio
async def test_create_queue_maps_redrive_fifo_and_dedup() -> None:
    arn = "arn:aws:sqs:us-east-1:123456789012:jobs-dlq"
    backend, client = make_backend(
        get_queue_attributes={"return_value": {"Attributes": {"QueueArn": arn}}},
        create_queue={"return_value": {"QueueUrl": URL + ".fifo"}},
        purge_queue={"return_value": {}},
    )
    client.get_queue_url.return_value = {"QueueUrl": DLQ_URL}
    url = await backend.create_queue(
        QueueSpec(
            "jobs.fifo",
            visibility_timeout_s=60,
            redrive=RedrivePolicy("jobs-dlq", 5),
            content_based_deduplication=True,
        )
    )
    assert url == URL + ".fifo"
    attributes = client.create_queue.await_args.kwargs["Attributes"]
    assert attributes["FifoQueue"] == "true"
    assert attributes["ContentBasedDeduplication"] == "true"
    assert attributes["VisibilityTimeout"] == "60"
    assert json.loads(attributes["RedrivePolicy"]) == {
        "deadLetterTargetArn": arn,
        "maxReceiveCount": 5,
    }
    # The new queue's URL is cached: no GetQueueUrl for it afterwards.
    await backend.purge("jobs.fifo")
    client.purge_queue.assert_awaited_once_with(QueueUrl=URL + ".fifo")
    client.get_queue_url.assert_awaited_once_with(QueueName="jobs-dlq")


@pytest.mark.asyncio
async def test_closed_backend_refuses_calls() -> None:
    backend, _ = make_backend()
    await backend.aclose()
    await backend.aclose()
    with pytest.raises(RuntimeError, match="closed"):
        await backend.queue_info("jobs")


# -- settings and a real client -----------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"read_timeout_s": 20},
        {"max_attempts": 0},
        {"access_key_id": "only-the-id"},
        {"connect_timeout_s": 0},
        {"max_pool_connections": 0},
    ],
)
def test_settings_are_validated(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        SqsSettings(**kwargs)


def test_client_config() -> None:
    config = SqsSettings(max_attempts=3, read_timeout_s=25).client_config()
    assert config.retries == {"mode": "standard", "total_max_attempts": 3}
    assert config.read_timeout == 25
    assert config.parameter_validation is False


@pytest.mark.asyncio
async def test_a_refused_connection_is_transient_end_to_end() -> None:
    # Port 9 (discard) on loopback: nothing listens, the connection is refused at once.
    settings = SqsSettings(
        region="us-east-1",
        endpoint_url="http://127.0.0.1:9",
        access_key_id="testing",
        secret_access_key="testing",
        max_attempts=1,
        connect_timeout_s=1,
    )
    backend = await SqsBackend.connect(settings)
    try:
        with pytest.raises(TransientBackendError) as caught:
            await backend.receive(URL, max_messages=1, wait_s=0)
    finally:
        await backend.aclose()
    assert caught.value.code == "EndpointConnectionError"
    assert caught.value.operation == "ReceiveMessage"


@pytest.mark.asyncio
async def test_no_region_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
    with pytest.raises(ConfigError, match="region"):
        await SqsBackend.connect(SqsSettings(access_key_id="x", secret_access_key="y"))


@pytest.mark.asyncio
async def test_aws_region_alone_is_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    # Once refused: botocore reads AWS_DEFAULT_REGION only, while the AWS SDKs, EKS pods
    # and our own Deployment set AWS_REGION; the error message itself named AWS_REGION.
    for name in ("AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    backend = await SqsBackend.connect(SqsSettings(access_key_id="x", secret_access_key="y"))
    try:
        assert backend._client.meta.region_name == "eu-west-1"
    finally:
        await backend.aclose()


@pytest.mark.asyncio
async def test_receive_asks_for_the_attributes_the_settings_name() -> None:
    backend, client = make_backend(receive_message={"return_value": {}})
    backend = SqsBackend(client, system_attributes=("All",), message_attributes=("trace",))
    backend._known = {"jobs": URL}
    assert await backend.receive("jobs", max_messages=1, wait_s=0) == []
    kwargs = client.receive_message.await_args.kwargs
    assert kwargs["MessageSystemAttributeNames"] == ["All"]
    assert kwargs["MessageAttributeNames"] == ["trace"]


def test_connect_leaves_one_user_agent_build_per_request() -> None:
    async def count_builds() -> int:
        settings = SqsSettings(
            region="us-east-1",
            endpoint_url=endpoint.url,
            access_key_id="testing",
            secret_access_key="testing",
        )
        backend = await SqsBackend.connect(settings)
        try:
            creator = backend._client._user_agent_creator
            with patch.object(creator, "to_string", wraps=creator.to_string) as to_string:
                await backend.create_queue(QueueSpec("ua"))
            return int(to_string.call_count)
        finally:
            await backend.aclose()

    with sqs_endpoint_in_thread() as endpoint:
        assert anyio.run(count_builds) == 1  # botocore alone builds it twice
