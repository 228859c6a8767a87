"""The lean path's signed headers equal what botocore's `SigV4Auth` makes of the same call
as botocore's own `AWSRequest` with the headers botocore's serialiser writes (the
query-mode header included), header by header (the signature included), at one frozen
instant: with and without a session token, over HTTP and HTTPS, on a non-default port, an
IPv6 host, an endpoint with a path, and bodies that are empty, not ASCII, or large.

Then on generated calls (hypothesis): bodies, operations, regions, signing names, secrets,
session tokens, endpoints, and a run of instants per signer (across a date change, back in
time, two credentials alternating), so the signer's caches (the timestamp of the latest
second, the signing key of the latest secret and date) are held to botocore too. And the
key cache on its own: a later date or another secret is never signed with a stale key.
`LEASE_WORKER_HYPOTHESIS=thorough` runs 400 examples; the default profile 60 (well under a
second)."""

from __future__ import annotations

import datetime
import string
from unittest import mock

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import ReadOnlyCredentials
from botocore.serialize import create_serializer
from botocore.session import get_session
from hypothesis import given
from hypothesis import strategies as st

from backends.sqs.lean import _request_url
from backends.sqs.lean_signer import RequestSigner
from tests import hypothesis_bounds

INSTANT = datetime.datetime(2026, 11, 24, 8, 30, 5)
KEYS = ReadOnlyCredentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", None)
SESSION = ReadOnlyCredentials("ASIAEXAMPLE", "secret", "FwoGZXIvYXdzEBYaDH//token+with/slashes=")
_SQS = get_session().get_service_model("sqs")


def botocores_headers(
    credentials: ReadOnlyCredentials,
    url: str,
    region: str,
    operation: str,
    body: bytes,
    *,
    signing_name: str = "sqs",
    query_compatible: bool = True,
) -> dict[str, str]:
    """What botocore signs: the headers its own JSON serialiser writes for `operation`
    (content type, target, `x-amzn-query-mode`, that one left out for a service that is not
    query-compatible), then `SigV4Auth` over an `AWSRequest`."""
    model = _SQS.operation_model(operation)
    serialized = create_serializer(_SQS.protocol, include_validation=False).serialize_to_request(
        {}, model
    )
    headers = dict(serialized["headers"])
    if not query_compatible:
        del headers["x-amzn-query-mode"]
    request = AWSRequest(method="POST", url=url, data=body, headers=headers)
    SigV4Auth(credentials, signing_name, region).add_auth(request)
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


# ---------------------------------------------------------------- generated calls

bounded = hypothesis_bounds.bounded(60, 400)

_LOWER = string.ascii_lowercase + string.digits + "-"
_BASE64 = string.ascii_letters + string.digits + "+/="
_TEXT = st.characters(codec="utf-8")  # anything UTF-8 can encode (no lone surrogates)

_bodies = st.one_of(
    st.binary(max_size=300),
    st.text(_TEXT, max_size=80).map(str.encode),
    st.integers(100_000, 400_000).map(lambda size: b"{" + b"x" * size + b"}"),
)
_regions = st.one_of(
    st.sampled_from(["us-east-1", "eu-west-1", "ap-southeast-2", "us-gov-west-1", "cn-north-1"]),
    st.text(_LOWER, min_size=1, max_size=20),
)
_signing_names = st.one_of(st.just("sqs"), st.text(_LOWER, min_size=1, max_size=12))
_secrets = st.one_of(
    st.text(_BASE64, min_size=40, max_size=40), st.text(_TEXT, min_size=1, max_size=50)
)
_tokens = st.one_of(
    st.none(),
    st.just(""),
    st.text(_BASE64, min_size=1, max_size=400),
    # spaces around and runs of them within: signed trimmed, sent as they are
    st.from_regex(r" ?[A-Za-z0-9+/=]{1,20}( {1,3}[A-Za-z0-9+/=]{1,20}){0,3} ?", fullmatch=True),
)
_credentials = st.builds(
    ReadOnlyCredentials,
    st.text(string.ascii_uppercase + string.digits, min_size=16, max_size=20),
    _secrets,
    _tokens,
)
_hosts = st.one_of(
    st.sampled_from(
        ["127.0.0.1", "localhost", "LOCALHOST", "[::1]", "[2001:DB8::1]", "sqs.amazonaws.com"]
    ),
    st.from_regex(r"[a-zA-Z0-9]{1,10}(\.[a-z0-9-]{1,10}){0,3}", fullmatch=True),
)
_paths = st.one_of(
    st.just(""),
    st.just("/"),
    st.lists(
        st.one_of(
            st.sampled_from([".", "..", "", "%7E", "a%20b", "~user"]),
            st.text(string.ascii_letters + string.digits + "-._~!$&'()*+,;=:@ ", max_size=8),
            st.text(st.characters(min_codepoint=0xA0, codec="utf-8"), max_size=3),
        ),
        min_size=1,
        max_size=4,
    ).map(lambda segments: "/" + "/".join(segments)),
)
_endpoints = st.builds(
    lambda scheme, host, port, path: (
        f"{scheme}://{host}{'' if port is None else f':{port}'}" + path
    ),
    st.sampled_from(["http", "https"]),
    _hosts,
    st.one_of(st.none(), st.sampled_from([80, 443, 4566, 9324]), st.integers(1, 65535)),
    _paths,
)
_starts = st.one_of(
    st.datetimes(datetime.datetime(2000, 1, 1), datetime.datetime(2099, 12, 31)),
    # a second or less before midnight: the next calls are on another date
    st.datetimes(datetime.datetime(2000, 1, 1), datetime.datetime(2099, 12, 31)).map(
        lambda instant: instant.replace(hour=23, minute=59, second=59)
    ),
)
_steps = st.one_of(
    st.sampled_from(
        [
            datetime.timedelta(0),
            datetime.timedelta(microseconds=1),
            datetime.timedelta(seconds=1),
            datetime.timedelta(days=1),
            -datetime.timedelta(days=1),
        ]
    ),
    st.timedeltas(-datetime.timedelta(days=2), datetime.timedelta(days=2)),
)


@bounded
@given(
    endpoint=_endpoints,
    region=_regions,
    signing_name=_signing_names,
    query_compatible=st.booleans(),
    both=st.tuples(_credentials, _credentials),
    start=_starts,
    calls=st.lists(
        st.tuples(
            st.integers(0, 1),
            _steps,
            st.sampled_from(_SQS.operation_names),
            _bodies,
            st.booleans(),
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_generated_calls_are_signed_as_botocore_signs_them(
    endpoint: str,
    region: str,
    signing_name: str,
    query_compatible: bool,
    both: tuple[ReadOnlyCredentials, ReadOnlyCredentials],
    start: datetime.datetime,
    calls: list[tuple[int, datetime.timedelta, str, bytes, bool]],
) -> None:
    """One signer for a run of calls, as a transport keeps one: each call's credentials
    (of two), instant, operation and body are generated, the instant given as `now` or
    through botocore's clock."""
    url = _request_url(endpoint)
    signer = RequestSigner(url, region, signing_name, query_compatible=query_compatible)
    instant = start
    for which, step, operation, body, given_now in calls:
        instant += step
        credentials = both[which]
        with mock.patch("botocore.auth.get_current_datetime", return_value=instant):
            botocore = botocores_headers(
                credentials,
                url,
                region,
                operation,
                body,
                signing_name=signing_name,
                query_compatible=query_compatible,
            )
            lean = signer.headers(credentials, operation, body, now=instant if given_now else None)
        assert lean == botocore
        assert list(lean) == list(botocore)
        assert lean["X-Amz-Date"] == instant.strftime("%Y%m%dT%H%M%SZ")


# ---------------------------------------------------------------- the key cache


def test_a_later_date_or_another_secret_is_never_signed_with_a_stale_key() -> None:
    """The signing key depends on the secret and the date: one signer, calls that change
    the date (a second past midnight; a day back), the secret (and back), or neither, each
    equal to botocore's. A cache that kept the first key would sign all but the first
    wrongly."""
    url = _request_url("https://sqs.eu-west-1.amazonaws.com")
    signer = RequestSigner(url, "eu-west-1", "sqs")
    before_midnight = datetime.datetime(2026, 12, 31, 23, 59, 59, 999_999)
    after_midnight = datetime.datetime(2027, 1, 1, 0, 0, 0)
    rotated = ReadOnlyCredentials(KEYS.access_key, "rotatedSECRET/+=", None)
    calls = [
        (KEYS, before_midnight),
        (KEYS, after_midnight),  # the date changes, the secret does not
        (rotated, after_midnight),  # the secret changes, the date does not
        (KEYS, after_midnight),  # back to the first secret
        (KEYS, before_midnight),  # back a day (a clock stepped back)
        (rotated, after_midnight),  # both change at once
        (rotated, after_midnight + datetime.timedelta(hours=5)),  # neither: the key kept
    ]
    signatures = []
    for credentials, instant in calls:
        with mock.patch("botocore.auth.get_current_datetime", return_value=instant):
            botocore = botocores_headers(credentials, url, "eu-west-1", "ReceiveMessage", RECEIVE)
        lean = signer.headers(credentials, "ReceiveMessage", RECEIVE, now=instant)
        assert lean == botocore
        signatures.append(lean["Authorization"].rsplit("Signature=", 1)[1])
    first, next_day, rotated_next_day, back, day_back, both_back, later = signatures
    assert (back, day_back, both_back) == (next_day, first, rotated_next_day)
    assert len({first, next_day, rotated_next_day, later}) == 4


def test_timestamps_within_one_second_are_one_and_the_next_second_is_its_own() -> None:
    signer = RequestSigner("http://127.0.0.1:9324/", "eu-west-1", "sqs")
    instants = [
        datetime.datetime(2026, 11, 24, 8, 30, 5, 0),
        datetime.datetime(2026, 11, 24, 8, 30, 5, 999_999),
        datetime.datetime(2026, 11, 24, 8, 30, 6, 0),
        datetime.datetime(2026, 11, 25, 8, 30, 6, 0),
    ]
    dates = [signer.headers(KEYS, "ReceiveMessage", b"", now=at)["X-Amz-Date"] for at in instants]
    assert dates == ["20261124T083005Z", "20261124T083005Z", "20261124T083006Z", "20261125T083006Z"]


def test_a_signer_that_is_not_query_compatible_signs_no_query_mode() -> None:
    url = "http://127.0.0.1:9324/"
    signer = RequestSigner(url, "eu-west-1", "sqs", query_compatible=False)
    lean = signer.headers(SESSION, "SendMessageBatch", RECEIVE, now=INSTANT)
    with mock.patch("botocore.auth.get_current_datetime", return_value=INSTANT):
        botocore = botocores_headers(
            SESSION, url, "eu-west-1", "SendMessageBatch", RECEIVE, query_compatible=False
        )
    assert lean == botocore
    assert list(lean) == [
        "X-Amz-Target",
        "Content-Type",
        "X-Amz-Date",
        "X-Amz-Security-Token",
        "Authorization",
    ]
    assert (
        "SignedHeaders=content-type;host;x-amz-date;x-amz-security-token;x-amz-target,"
        in (lean["Authorization"])
    )


# ---------------------------------------------------------------- secrets kept out of sight


def test_neither_the_secret_nor_the_token_shows_in_the_signers_repr() -> None:
    signer = RequestSigner("https://sqs.eu-west-1.amazonaws.com/", "eu-west-1", "sqs")
    signer.headers(SESSION, "ReceiveMessage", RECEIVE, now=INSTANT)
    signer.headers(KEYS, "ReceiveMessage", RECEIVE, now=INSTANT)
    assert repr(signer) == (
        "RequestSigner(url='https://sqs.eu-west-1.amazonaws.com/', region='eu-west-1', "
        "signing_name='sqs', query_compatible=True)"
    )
    assert not hasattr(signer, "__dict__")


@pytest.mark.parametrize(
    ("credentials", "message"),
    [
        (
            ReadOnlyCredentials("AKIDEXAMPLE", "secret\ud800SECRET", None),
            "the secret access key is not valid UTF-8",
        ),
        (
            ReadOnlyCredentials("AKIDEXAMPLE", "secret", "token\udfffTOKEN"),
            "a signed header (session token or target) is not valid UTF-8",
        ),
    ],
    ids=["secret", "token"],
)
def test_text_utf8_cannot_encode_is_refused_without_showing_it(
    credentials: ReadOnlyCredentials, message: str
) -> None:
    signer = RequestSigner("http://127.0.0.1:9324/", "eu-west-1", "sqs")
    with pytest.raises(ValueError) as caught:
        signer.headers(credentials, "ReceiveMessage", RECEIVE, now=INSTANT)
    assert str(caught.value) == message
    assert caught.value.__context__ is None and caught.value.__cause__ is None
