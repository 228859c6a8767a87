"""A recorder of the AWS API calls the project's code makes, for the IAM checks.

Every botocore (and aiobotocore, boto3) client made in the test process reports its calls
through botocore's `before-parameter-build` event, registered on every botocore `Session`
as it is made (a client copies its session's handlers); the lean SQS path
(`backends.sqs.lean.LeanTransport.call`), which skips botocore's events, is wrapped.
Each call is kept as a `Call`: service, operation, the resource it names (queue, bucket and
key, table), the feature it serves and its call site, both read from the project frames on
the stack (`worker/`, `backends/`). A call from no project frame (a test's own boto3
client setting things up) is not a call path of the project and is not kept.

    with RECORDER.tap() as calls:      # the calls made inside the block
        ...

Across pytest-xdist, `AwsCallsPlugin` (registered by tests/conftest.py) sends each worker's
calls to the controller in `workeroutput`, the way pytest-cov sends its data; the
controller checks them all against deploy/iam (`tests.deploy.iam_policies.missing`) and
fails the run with a list of what no policy grants. The dedicated tests in
tests/deploy/test_iam_calls.py drive each feature's call path themselves and check
resources too; this is the backstop for call paths only other tests reach.

SMQ is not AWS: its client is not botocore, so nothing of it is recorded.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import anyio
import botocore.session
import pytest

__all__ = ["RECORDER", "AwsCallsPlugin", "Call", "Recorder", "Tap", "feature_of"]

_ROOT = Path(__file__).resolve().parents[1]
_PROJECT = tuple(str(_ROOT / part) + "/" for part in ("worker", "backends"))
#: Code whose own AWS calls are no pod's: the tests' and the examples'.
_OWN_CODE = tuple(str(_ROOT / part) + "/" for part in ("tests", "examples"))
_WORKEROUTPUT_KEY = "aws_calls"
#: A file to write every recorded call to, as JSON rows, when the run ends.
DUMP_VARIABLE = "TESTS_AWS_CALLS_DUMP"


@dataclasses.dataclass(frozen=True, order=True)
class Call:
    service: str  # botocore's service name: sqs, s3, dynamodb
    operation: str  # the API operation: ReceiveMessage, PutObject, ...
    feature: str  # worker, producer, console, dlq-tools, large-payloads, idempotency, ...
    site: str  # the project function that made it: SqsBackend.receive, S3Payloads.offload
    resource: str = ""  # queue name, bucket/key, table name; "" when the call names none
    lean: bool = False  # sent by the lean SQS path, not botocore's


#: (module, function) of the project frames on the stack, outermost first.
Frames = tuple[tuple[str, str], ...]


def _project_frames(frame: FrameType | None) -> Frames:
    """The project frames that made a call; none when the innermost frame of this repository
    is a test's or an example's own (its client, called from a test helper, even one that a
    worker's task runs)."""
    found: list[tuple[str, str]] = []
    innermost = True
    while frame is not None:
        filename = frame.f_code.co_filename
        if innermost and filename.startswith(_OWN_CODE) and filename != __file__:
            return ()
        if filename.startswith(_PROJECT):
            innermost = False
            module = filename[len(str(_ROOT)) + 1 : -3].replace("/", ".")
            found.append((module, frame.f_code.co_qualname))
        frame = frame.f_back
    return tuple(reversed(found))


#: Project functions that only provision (create or delete queues and tables, purge a queue
#: a test uses): the deploy kit grants none of them to a pod; whoever provisions does.
PROVISIONING_SITES = frozenset(
    {
        "SqsBackend.create_queue",
        "SqsBackend.delete_queue",
        "SqsBackend.purge",
        "create_table",
    }
)


def _site(frames: Frames) -> str:
    """The innermost public project function: the method a caller of the backend, the
    payload store or the idempotency store called (`_call`, `_url`, `_arn` are its steps)."""
    for _, function in reversed(frames):
        if not function.split(".")[-1].startswith("_") and "<locals>" not in function:
            return function
    return frames[-1][1] if frames else ""


def feature_of(service: str, frames: Frames) -> str:
    """The feature (and so the policy) a call serves, from the project frames that made it."""
    modules = {module for module, _ in frames}
    site = _site(frames)
    if service == "s3":
        return "large-payloads"
    if service == "dynamodb":
        return "provisioning" if site in PROVISIONING_SITES else "idempotency"
    if "worker.ops.console_actions" in modules:
        # Reading the dead-letter queue and redriving it are two policies: an overlay
        # whose console can never redrive (no token) is granted no redrive.
        return "console-redrive" if site == "DeadLetterCalls.start_message_move_task" else "console"
    if modules & {"worker.cli.dlq", "worker.ops.dead_letters"}:
        return "dlq-tools"
    if site in PROVISIONING_SITES:
        return "provisioning"
    if site == "SqsBackend.send":
        return "producer"
    if site.startswith("DeadLetterCalls."):
        return "dlq-tools"
    return "worker"


def _resource(params: Mapping[str, Any]) -> str:
    for key in ("QueueUrl", "SourceArn", "QueueName"):
        value = params.get(key)
        if isinstance(value, str):
            return value.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
    if "Bucket" in params:
        return f"{params['Bucket']}/{params.get('Key', '')}"
    table = params.get("TableName")
    return table if isinstance(table, str) else ""


class Tap(list[Call]):
    """The calls made while a `Recorder.tap()` is open, in order."""

    def __init__(self) -> None:
        super().__init__()
        self._waiting: list[tuple[Callable[[Call], bool], anyio.Event]] = []

    def add(self, call: Call) -> None:
        self.append(call)
        for predicate, event in self._waiting:
            if predicate(call):
                event.set()

    async def wait_for(self, predicate: Callable[[Call], bool], timeout_s: float = 10.0) -> None:
        """Until a call matching `predicate` is made (made already: at once)."""
        if any(predicate(call) for call in self):
            return
        event = anyio.Event()
        self._waiting.append((predicate, event))
        try:
            with anyio.fail_after(timeout_s):
                await event.wait()
        finally:
            self._waiting.remove((predicate, event))


class Recorder:
    """Keeps every call the project makes in this process (`calls`), and those made while a
    `tap()` is open in that tap's list. Cheap: one walk up the stack per call."""

    def __init__(self) -> None:
        self.calls: set[Call] = set()
        self._taps: list[Tap] = []
        self._installed = False
        self._lock = threading.Lock()

    def record(self, service: str, operation: str, params: Mapping[str, Any], lean: bool) -> None:
        frames = _project_frames(sys._getframe(2))
        if not frames:
            return
        call = Call(
            service=service,
            operation=operation,
            feature=feature_of(service, frames),
            site=_site(frames),
            resource=_resource(params),
            lean=lean,
        )
        with self._lock:
            self.calls.add(dataclasses.replace(call, resource=""))
            taps = list(self._taps)
        for tap in taps:
            tap.add(call)

    @contextmanager
    def tap(self) -> Iterator[Tap]:
        self.install()
        calls = Tap()
        self._taps.append(calls)
        try:
            yield calls
        finally:
            self._taps.remove(calls)

    def install(self) -> None:
        """Hook every botocore session made from now on, and the lean path. Idempotent."""
        if self._installed:
            return
        self._installed = True
        _hook_sessions(self)
        _hook_lean(self)


def _hook_sessions(recorder: Recorder) -> None:
    original: Callable[..., None] = botocore.session.Session.__init__

    def on_params(params: Mapping[str, Any], model: Any, **_: Any) -> None:
        recorder.record(model.service_model.service_name, model.name, params, lean=False)

    @functools.wraps(original)
    def init(self: botocore.session.Session, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.register("before-parameter-build", on_params, unique_id="tests.aws_calls")

    botocore.session.Session.__init__ = init


def _hook_lean(recorder: Recorder) -> None:
    from backends.sqs.lean import LeanTransport

    original = LeanTransport.call

    @functools.wraps(original)
    async def call(self: LeanTransport, operation: str, params: Mapping[str, Any]) -> Any:
        recorder.record("sqs", operation, params, lean=True)
        return await original(self, operation, params)

    LeanTransport.call = call  # type: ignore[method-assign]


RECORDER = Recorder()


def _as_rows(calls: Iterable[Call]) -> list[list[Any]]:
    return [list(dataclasses.astuple(call)) for call in sorted(calls)]


class AwsCallsPlugin:
    """Records in every process of the run; the controller (or a run without xdist) checks
    the union against deploy/iam when the session ends and fails the run on a gap."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.gathered: set[Call] = set()
        self.missing: list[str] = []
        RECORDER.install()

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        workeroutput = getattr(self.config, "workeroutput", None)
        if workeroutput is not None:  # an xdist worker: hand the calls to the controller
            workeroutput[_WORKEROUTPUT_KEY] = _as_rows(RECORDER.calls)
            return
        from tests.deploy.iam_policies import missing

        everything = self.gathered | RECORDER.calls
        self.missing = missing(everything)
        dump = os.environ.get(DUMP_VARIABLE)
        if dump:
            Path(dump).write_text(json.dumps(_as_rows(everything), indent=1) + "\n")
        if self.missing and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        rows = getattr(node, "workeroutput", {}).get(_WORKEROUTPUT_KEY, [])
        self.gathered.update(Call(*row) for row in rows)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.missing:
            terminalreporter.section("AWS calls no IAM policy grants", red=True, bold=True)
            for line in self.missing:
                terminalreporter.line(line, red=True)
            terminalreporter.line(
                "Grant each in the feature's policy under deploy/iam/ (see deploy/iam/README.md),"
                " or declare it in tests/deploy/iam_policies.py if no pod may make it."
            )
