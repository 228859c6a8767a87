"""Fixtures of the conformance cases: one endpoint for the session (SQS's receipt-handle
rules, as `serve-sqs` runs by default), and `sqs`, a boto3 client per protocol.

Why a service model rather than a pinned old botocore in a venv of its own: the query
protocol is chosen by the model botocore loads (`metadata.protocol`), and current botocore
still serialises and parses the query protocol for other services. Loading SQS's last query
model into today's botocore gives the same wire format as botocore < 1.31.81 with no second
venv, and the model is SQS's own description of its query wire format, written
independently of this server. It is read from botocore 1.31.80's own wheel, downloaded from
PyPI once into pytest's cache (about 11 MB), not copied into this repository; without
network the query cases are skipped with that reason.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.config import Config

from backends.memory.handles import HandleRules
from backends.serve.sqs.endpoint import SqsEndpoint, sqs_endpoint_in_thread

#: The last botocore whose SQS model speaks the query protocol.
QUERY_BOTOCORE = "botocore==1.31.80"
_MODEL_IN_WHEEL = "botocore/data/sqs/2012-11-05/service-2.json"
_CLIENT = {
    "region_name": "us-east-1",
    "aws_access_key_id": "testing",
    "aws_secret_access_key": "testing",
    "config": Config(retries={"total_max_attempts": 1}, read_timeout=10),
}


@pytest.fixture(scope="session")
def conformance_endpoint() -> Iterator[SqsEndpoint]:
    with sqs_endpoint_in_thread(handle_rules=HandleRules.SQS, max_in_flight=50) as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def query_models(request: pytest.FixtureRequest) -> Path:
    """A botocore data directory whose SQS model is the query-protocol one."""
    root = Path(request.config.cache.mkdir("botocore-1.31.80-sqs"))
    target = root / "sqs" / "2012-11-05" / "service-2.json"
    if not target.exists():
        _extract_query_model(root, target)
    return root


def _extract_query_model(root: Path, target: Path) -> None:
    wheels = root / "wheel"
    pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", str(wheels)]
    download = subprocess.run(
        [*pip, "--only-binary", ":all:", QUERY_BOTOCORE],
        capture_output=True,
        text=True,
        check=False,
    )
    if download.returncode != 0:
        pytest.skip(f"cannot download {QUERY_BOTOCORE} (its SQS query model): no network?")
    [wheel] = wheels.glob("botocore-1.31.80-*.whl")
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        target.write_bytes(archive.read(_MODEL_IN_WHEEL))
    shutil.rmtree(wheels)


def query_client(endpoint_url: str, models: Path) -> Any:
    session = botocore.session.get_session()
    session.get_component("data_loader").search_paths.insert(0, str(models))
    client = boto3.Session(botocore_session=session).client(
        "sqs", endpoint_url=endpoint_url, **_CLIENT
    )
    assert client.meta.service_model.protocol == "query"
    return client


def json_client(endpoint_url: str) -> Any:
    client = boto3.client("sqs", endpoint_url=endpoint_url, **_CLIENT)
    assert client.meta.service_model.protocol == "json"
    return client


@pytest.fixture(scope="session", params=["json", "query"])
def protocol(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture(scope="session")
def sqs(protocol: str, conformance_endpoint: SqsEndpoint, query_models: Path) -> Any:
    if protocol == "json":
        return json_client(conformance_endpoint.url)
    return query_client(conformance_endpoint.url, query_models)


@pytest.fixture
def name() -> str:
    """A fresh queue name for one case."""
    return f"c-{uuid.uuid4().hex[:12]}"
