"""docs/how-to/testing.md's python blocks are one test module: written out and run with
pytest in a new process, in a directory of their own, as a reader would run them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[3] / "docs" / "how-to" / "testing.md"
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def test_the_pages_blocks_are_one_module_of_passing_tests(tmp_path: Path) -> None:
    blocks = PYTHON_BLOCK.findall(PAGE.read_text())
    assert blocks[0].startswith("# test_handlers.py\n")
    (tmp_path / "test_handlers.py").write_text("\n\n".join(blocks))
    options = ["-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
    config = ["-o", "asyncio_default_fixture_loop_scope=function"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *options, *config, "test_handlers.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    tests = sum(len(re.findall(r"^async def test_", block, re.MULTILINE)) for block in blocks)
    assert tests == 5
    assert f"{tests} passed" in done.stdout


pytestmark = [pytest.mark.process, pytest.mark.timeout(60)]
