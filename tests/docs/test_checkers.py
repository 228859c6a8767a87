"""The block checkers catch what they are there to catch: each bad example here is one a
page could hold, and each must be reported (a checker that passed everything would let
every example rot)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.blocks import Block, blocks
from tests.docs.data_blocks import resource_problems
from tests.docs.python_blocks import PythonPage
from tests.docs.shell import Shell, logical_lines


def _page(tmp_path: Path, text: str) -> list[Block]:
    page = tmp_path / "page.md"
    page.write_text(text)
    return blocks(page)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        # issue 21: the serve-sqs example that failed as written.
        (
            "aws --endpoint-url http://127.0.0.1:9324 sqs list-queues",
            "needs --region (or AWS_REGION)",
        ),
        ("lease-worker run app:app --no-such-option 1", "unrecognized arguments"),
        ("lease-worker run app:app --backend nope", "invalid choice: 'nope'"),
        ("lease-worker run app:app --max-in-flight many", "invalid int value"),
        ("LEASE_WORKER_BACKEND=nope lease-worker run app:app", "choose from memory, sqs"),
        ("LEASE_WORKER_NO_SUCH=1 lease-worker serve-sqs", "no option of this command reads"),
        ("pip install 'lease-worker[no-such-extra]'", "['no-such-extra'] are not in"),
        ("pip install requests", "is not lease-worker nor in OTHER_PACKAGES"),
        ("python -m no_such_module_here", "no such module"),
        ("rm -rf /", "'rm' is not in"),
        ("lease-worker run examples.hello:no_such_app", "does not load"),
    ],
)
def test_a_bad_shell_line_is_reported(tmp_path: Path, line: str, problem: str) -> None:
    reported = Shell(tmp_path).check(line + "\n")
    assert reported and all(r.startswith(repr(line)) for r in reported)
    assert any(problem in r for r in reported), reported


def test_good_shell_lines_pass(tmp_path: Path) -> None:
    text = """\
export AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
aws --endpoint-url http://127.0.0.1:9324 sqs list-queues  # a comment
lease-worker run examples.hello:app --backend sqs \\
    --max-in-flight 50 --adaptive
LEASE_WORKER_LOG_FORMAT=json lease-worker serve-sqs --queue orders
pip install -e '.[testing,redis]'
python -m examples.typed_orders
lease-worker --version
"""
    shell = Shell(tmp_path)
    assert shell.check(text) == []
    assert shell.programs == {"export": 1, "aws": 1, "lease-worker": 3, "pip": 1, "python": 1}


def test_continuations_are_joined_and_heredoc_bodies_dropped() -> None:
    text = "cat > app.yaml <<EOF\nkind: not a command\nEOF\nlease-worker run a:b \\\n  --adaptive\n"
    joined = ["cat > app.yaml <<EOF", "lease-worker run a:b --adaptive"]
    assert list(logical_lines(text)) == joined


def test_python_blocks_share_a_namespace_and_a_failure_is_reported(tmp_path: Path) -> None:
    first, second, third = _page(
        tmp_path,
        "```python\nx = 41\n```\n\ntext\n\n```python\nx += 1\nassert x == 42\n```\n\n"
        "```python\nraise ValueError('rotten')\n```\n",
    )
    page = PythonPage(tmp_path)
    assert page.run(first) is None and page.run(second) is None
    problem = page.run(third)
    assert problem is not None and "ValueError: rotten" in problem


def test_top_level_await_runs_on_virtual_time_and_saved_files_are_written(tmp_path: Path) -> None:
    [saved, waits] = _page(
        tmp_path,
        "```python\n# app.py\nVALUE = 7\n```\n\n"
        "```python\nimport asyncio\nloop = asyncio.get_running_loop()\n"
        "await asyncio.sleep(3600)\nwaited = loop.time()\n```\n",
    )
    page = PythonPage(tmp_path)
    assert page.run(saved) is None and page.run(waits) is None
    assert (tmp_path / "app.py").read_text() == "# app.py\nVALUE = 7\n"
    assert page.namespace["waited"] >= 3600
    page.close()


def test_a_test_function_of_a_page_is_run(tmp_path: Path) -> None:
    [block] = _page(tmp_path, "```python\ndef test_fails() -> None:\n    assert 1 == 2\n```\n")
    page = PythonPage(tmp_path)
    assert page.run(block) is None
    [problem] = page.run_tests()
    assert problem.startswith("test_fails:") and "AssertionError" in problem
    assert page.tests_run == ["test_fails"]


def test_an_include_must_be_a_file_of_examples(tmp_path: Path) -> None:
    good, bad = _page(
        tmp_path,
        '```python\n--8<-- "examples/hello.py"\n```\n\n```python\n--8<-- "worker/app.py"\n```\n',
    )
    page = PythonPage(tmp_path)
    assert page.run(good) is None and page.included == 1
    assert "must be files of examples/" in (page.run(bad) or "")


def test_a_config_maps_settings_are_checked_against_run() -> None:
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "lease-worker"},
        "data": {
            "LEASE_WORKER_BACKEND": "sqs",
            "LEASE_WORKER_GRACE_S": "30",
            "LEASE_WORKER_MAX_INFLIGHT": "10",
            "LEASE_WORKER_LOG_FORMAT": "yaml",
        },
    }
    assert resource_problems(config_map) == [
        "LEASE_WORKER_MAX_INFLIGHT: no option of this command reads it",
        "LEASE_WORKER_LOG_FORMAT=yaml: choose from auto, console, json",
    ]


def test_a_skip_comment_and_a_missing_language_are_their_own_kinds(tmp_path: Path) -> None:
    skipped, bare = _page(
        tmp_path,
        "<!-- docs-test: skip needs a cluster -->\n```sh\nkubectl apply -k .\n```\n\n```\nx\n```\n",
    )
    assert (skipped.kind, skipped.skip_reason) == ("skipped", "needs a cluster")
    assert bare.kind == "unknown"
