"""Every fenced code block of docs/**/*.md and README.md is run or checked, so that no
example can rot (issue 21; the rules are in the blocks' modules):

- python: run, a page's blocks in order in one namespace (tests/docs/python_blocks.py);
- sh, bash: each command checked, `lease-worker` lines by the real parser
  (tests/docs/shell.py);
- yaml, json, toml: parsed; a Kubernetes resource (apiVersion and kind) is validated
  against its schema as tests/deploy validates deploy/;
- text: output and diagrams, counted only;
- `<!-- docs-test: skip REASON -->` before a fence: counted as skipped.

A block of any other language, or of none, fails `test_every_block_is_handled`, which also
prints the count of blocks by kind.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.docs.blocks import ROOT, Block, blocks, pages
from tests.docs.data_blocks import data_problems
from tests.docs.python_blocks import PythonPage
from tests.docs.shell import Shell, forget_modules_under


def _detail(block: Block) -> str:
    """The kind, with python blocks told apart by how they are tested."""
    if block.kind != "python":
        return block.kind
    first = block.text.lstrip().splitlines()[:1]
    if first and first[0].startswith("--8<--"):
        return "python (included from examples/)"
    if first and first[0].startswith("# ") and first[0].rstrip().endswith(".py"):
        return "python (a file the reader saves, run)"
    return "python (run)"


def test_every_block_is_handled() -> None:
    every = [block for page in pages() for block in blocks(page)]
    counts = Counter(_detail(block) for block in every)
    print(f"\n{len(every)} code blocks in {len(pages())} pages:")
    for kind, count in sorted(counts.items()):
        print(f"  {count:4d}  {kind}")
    unknown = [f"{b.where} ({b.language or 'no language'})" for b in every if b.kind == "unknown"]
    if unknown:
        kinds = "give each block a language of tests/docs/blocks.py's KINDS: "
        pytest.fail(kinds + ", ".join(unknown))
    assert sum(counts.values()) == len(every) > 0


def _page_id(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("page", pages(), ids=_page_id)
def test_the_pages_code_blocks_run(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    python, shell = PythonPage(tmp_path), Shell(tmp_path)
    problems: list[str] = []
    try:
        for block in blocks(page):
            if block.kind == "python":
                problem = python.run(block)
                if problem is not None:
                    problems.append(f"{block.where}: {problem}")
                    break  # the page's later blocks build on this one
            elif block.kind == "shell":
                shell.saved = python.saved
                problems += [f"{block.where}: {p}" for p in shell.check(block.text)]
            elif block.kind in ("json", "toml", "yaml"):
                problems += [f"{block.where}: {p}" for p in data_problems(block)]
        else:
            problems += [f"{_page_id(page)}: {p}" for p in python.run_tests()]
    finally:
        python.close()
        forget_modules_under(tmp_path)
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)
