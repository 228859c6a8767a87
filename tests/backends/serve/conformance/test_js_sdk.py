"""Conformance cases driven by the AWS SDK for JavaScript v3 (`js_cases.mjs`) over both of
SQS's protocols, against the same endpoint as the botocore cases:

- `json`: the SDK the benchmarks' Node peer installs (`bench/peers/setup.sh`, pinned by its
  package-lock.json), which speaks JSON;
- `query`: `js-query/` (`setup-js.sh`), @aws-sdk/client-sqs 3.445.0, the last to speak the
  query protocol.

Without Node or an install, that protocol's cases are skipped with the reason (CI installs
neither; the botocore cases cover both protocols there).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from backends.serve.sqs.endpoint import SqsEndpoint

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "js_cases.mjs"
#: protocol -> (the directory whose node_modules holds the SDK, its setup, its content type)
ROOT = HERE.parents[3]
INSTALLS = {
    "json": (ROOT / "bench" / "peers", "bench/peers/setup.sh", "application/x-amz-json-1.0"),
    "query": (
        HERE / "js-query",
        f"{HERE.relative_to(ROOT)}/setup-js.sh",
        "application/x-www-form-urlencoded",
    ),
}
CASES = [
    "lifecycle",
    "sendReceiveDelete",
    "batchPartialFailure",
    "sizeLimit",
    "fifoAttempt",
    "tags",
    "moveBack",
]


def _installed(protocol: str) -> bool:
    directory = INSTALLS[protocol][0]
    sdk = directory / "node_modules" / "@aws-sdk" / "client-sqs"
    return shutil.which("node") is not None and sdk.is_dir()


#: Decided once, when the module is collected: a test that installs an SDK while the suite
#: runs (the benchmark's peers) must not change which cases run with the order of the tests.
PROTOCOLS = [
    pytest.param(
        protocol,
        marks=pytest.mark.skipif(
            not _installed(protocol),
            reason=f"Node or the SDK for the {protocol} protocol missing: run {setup}",
        ),
    )
    for protocol, (_, setup, _) in sorted(INSTALLS.items())
]


@pytest.fixture(scope="module", params=PROTOCOLS)
def js_results(request: pytest.FixtureRequest, conformance_endpoint: SqsEndpoint) -> Any:
    directory, _, content_type = INSTALLS[request.param]
    node = shutil.which("node")
    assert node is not None
    done = subprocess.run(
        [node, str(SCRIPT), conformance_endpoint.url, str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results: dict[str, Any] = json.loads(done.stdout)
    assert results["contentTypes"] == [content_type]  # the protocol it was meant to speak
    assert sorted(results["cases"]) == sorted(CASES)
    return results["cases"]


@pytest.mark.parametrize("case", CASES)
def test_js_sdk_case(js_results: dict[str, Any], case: str) -> None:
    result = js_results[case]
    assert result["ok"], result["detail"]
