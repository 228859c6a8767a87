"""The lean path's signed headers equal what botocore's `SigV4Auth` makes of the same call
as botocore's own `AWSRequest` with the headers botocore's serialiser writes (the
query-mode header included), header by header (the signature included), at one frozen
instant: with and without a session token, over HTTP and HTTPS, on a non-default port, an
IPv6 host, an endpoint with a path, and bodies that are empty, not ASCII, or large."""

from __future__ import annotations

import datetime
from unittest import mock

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import ReadOnlyCredentials
from botocore.serialize import create_serializer
from botocore.session import get_session

from backends.sqs.lean import _request_url
from backends.sqs.lean_signer import RequestSigner

INSTANT = datetime.datetime(2026, 11, 24, 8, 30, 5)
KEYS = ReadOnlyCredentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", None)
SESSION = ReadOnlyCredentials("ASIAEXAMPLE", "secret", "FwoGZXIvYXdzEBYaDH//token+with/slashes=")
_SQS = get_session().get_service_model("sqs")


def botocores_headers(
    credentials: ReadOnlyCredentials, url: str, region: str, operation: str, body: bytes
) -> dict[str, str]:
    """What botocore signs: the headers its own JSON serialiser writes for `operation`
    (content type, target, `x-amzn-query-mode`), then `SigV4Auth` over an `AWSRequest`."""
    model = _SQS.operation_model(operation)
    serialized = create_serializer(_SQS.protocol, include_validation=False).serialize_to_request(
        {"QueueUrl": "https://sqs.eu-west-1.amazonaws.com/1/q"}, model
    )
    request = AWSRequest(method="POST", url=url, data=body, headers=serialized["headers"])
    SigV4Auth(credentials, "sqs", region).add_auth(request)
    return dict(request.headers.items())


def signed_both_ways(
    credentials: ReadOnlyCredentials, endpoint: str, body: bytes, region: str = "eu-west-1"
) -> tuple[dict[str, str], dict[str, str]]:
    url = _request_url(endpoint)
    with mock.patch("botocore.auth.get_current_datetime", return_value=INSTANT):
        lean = RequestSigner(url, region, "sqs").headers(credentials, "ReceiveMessage", body)
        botocore = botocores_headers(credentials, url, region, "ReceiveMessage", body)
    return lean, botocore


RECEIVE = b'{"QueueUrl":"https://sqs.eu-west-1.amazonaws.com/1/q","MaxNumberOfMessages":10}'


@pytest.mark.parametrize("credentials", [KEYS, SESSION], ids=["keys", "session-token"])
@pytest.mark.parametrize(
    "endpoint",
    [
        "https://sqs.eu-west-1.amazonaws.com",
        "http://127.0.0.1:9324",
        "http://LOCALHOST:80",
        "https://[::1]:8443",
        "https://gateway.example.com/sqs/proxy",
    ],
)
def test_the_lean_signature_is_botocores(credentials: ReadOnlyCredentials, endpoint: str) -> None:
    lean, botocore = signed_both_ways(credentials, endpoint, RECEIVE)
    assert lean == botocore
    assert lean["x-amzn-query-mode"] == "true"
    assert set(lean) == {
        "Content-Type",
        "X-Amz-Target",
        "x-amzn-query-mode",
        "X-Amz-Date",
        "Authorization",
    } | ({"X-Amz-Security-Token"} if credentials.token else set())
    assert lean["X-Amz-Date"] == "20261124T083005Z"


@pytest.mark.parametrize(
    "body",
    [
        b"",
        '{"Entries":[{"Id":"0","MessageBody":"h\u00e9llo \u2603 \U0001f600"}]}'.encode(),
        b'{"MessageBody":"' + b"x" * 300_000 + b'"}',
    ],
    ids=["empty", "non-ascii", "large"],
)
def test_the_body_is_signed_as_botocore_signs_it(body: bytes) -> None:
    lean, botocore = signed_both_ways(SESSION, "https://sqs.us-east-1.amazonaws.com", body)
    assert lean == botocore


def test_the_signature_changes_with_what_it_covers() -> None:
    """The comparison above is not vacuous: the body, the region and the secret all move it."""
    base = signed_both_ways(KEYS, "http://127.0.0.1:9324", RECEIVE)[0]["Authorization"]
    other_body = signed_both_ways(KEYS, "http://127.0.0.1:9324", RECEIVE + b" ")[0]
    other_region = signed_both_ways(KEYS, "http://127.0.0.1:9324", RECEIVE, region="us-east-1")[0]
    other_port = signed_both_ways(KEYS, "http://127.0.0.1:9325", RECEIVE)[0]
    secret = ReadOnlyCredentials(KEYS.access_key, KEYS.secret_key + "x", None)
    other_secret = signed_both_ways(secret, "http://127.0.0.1:9324", RECEIVE)[0]
    others = [other_body, other_region, other_port, other_secret]
    assert len({base, *(headers["Authorization"] for headers in others)}) == 5
    assert "SignedHeaders=content-type;host;x-amz-date;x-amz-target;x-amzn-query-mode," in base
