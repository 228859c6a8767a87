"""Conformance cases driven by the AWS SDK for JavaScript v3 over SQS's JSON protocol
(`js_cases.mjs`), against the same endpoint as the botocore cases.

The SDK is the one the benchmarks' Node peer installs (`bench/peers/setup.sh`, pinned by its
package-lock.json); without Node or that install the cases are skipped, with the reason. The
query protocol is not driven from JavaScript: that needs an SDK older than 3.446 installed
beside it (the botocore cases cover the query protocol).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from backends.serve.sqs.endpoint import SqsEndpoint

PEERS = Path(__file__).resolve().parents[4] / "bench" / "peers"
SCRIPT = Path(__file__).with_name("js_cases.mjs")
CASES = [
    "lifecycle",
    "sendReceiveDelete",
    "batchPartialFailure",
    "sizeLimit",
    "fifoAttempt",
    "tags",
    "moveBack",
]


@pytest.fixture(scope="module")
def js_results(conformance_endpoint: SqsEndpoint) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None or not (PEERS / "node_modules" / "@aws-sdk" / "client-sqs").is_dir():
        pytest.skip("Node or @aws-sdk/client-sqs missing: run bench/peers/setup.sh")
    done = subprocess.run(
        [node, str(SCRIPT), conformance_endpoint.url, str(PEERS)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results: dict[str, Any] = json.loads(done.stdout)
    assert sorted(results) == sorted(CASES)
    return results


@pytest.mark.parametrize("case", CASES)
def test_js_sdk_case(js_results: dict[str, Any], case: str) -> None:
    result = js_results[case]
    assert result["ok"], result["detail"]
