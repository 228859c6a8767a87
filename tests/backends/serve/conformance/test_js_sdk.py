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


@pytest.fixture(scope="module", params=sorted(INSTALLS))
def js_results(request: pytest.FixtureRequest, conformance_endpoint: SqsEndpoint) -> Any:
    directory, setup, content_type = INSTALLS[request.param]
    node = shutil.which("node")
    if node is None or not (directory / "node_modules" / "@aws-sdk" / "client-sqs").is_dir():
        pytest.skip(f"Node or the SDK for the {request.param} protocol missing: run {setup}")
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
