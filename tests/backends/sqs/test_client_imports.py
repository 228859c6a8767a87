"""Importing one small module of the SQS client loads that module, not the runtime (issue
40): `import backends.sqs.lean_signer` loaded 98 of the project's modules, all of
`worker.runtime` among them, and aiobotocore, because `worker`, `backends` and
`backends.sqs` imported everything they export. They import each name when it is first
used (PEP 562); `from worker import Worker` works as before.

Each import runs in a fresh interpreter, which nothing else has imported into."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _loaded_after(statement: str) -> list[str]:
    script = f"{statement}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    loaded: list[str] = json.loads(done.stdout)
    return loaded


def _ours(loaded: list[str]) -> list[str]:
    return [name for name in loaded if name.split(".")[0] in ("worker", "backends")]


@pytest.mark.parametrize(
    "module", ["backends.sqs.lean_signer", "backends.sqs.lean_wire", "backends.sqs.redirects"]
)
def test_a_small_module_of_the_sqs_client_loads_no_runtime(module: str) -> None:
    loaded = _loaded_after(f"import {module}")
    ours = _ours(loaded)
    assert module in ours
    assert not [name for name in ours if name.startswith("worker.runtime")]
    assert not [name for name in ours if name.startswith(("worker.sending", "worker.cli"))]
    assert "backends.factory" not in ours and "backends.memory" not in ours
    assert "aiobotocore" not in loaded
    assert len(ours) <= 8, ours


def test_the_names_the_packages_export_still_import() -> None:
    loaded = _loaded_after(
        "from worker import Worker, run, FatalBackendError, __version__\n"
        "from backends import connect\n"
        "from backends.sqs import SqsBackend, SqsSettings\n"
        "import worker, backends.sqs\n"
        "assert set(worker.__all__) <= set(dir(worker))\n"
        "assert worker.Worker is Worker and backends.sqs.SqsSettings is SqsSettings"
    )
    assert "worker.runtime.supervisor" in loaded  # `run` lives there


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(subprocess.CalledProcessError) as failed:
        _loaded_after("from worker import NoSuchName")
    assert "cannot import name 'NoSuchName'" in str(failed.value.stderr)
