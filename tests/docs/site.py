"""Building the site with mkdocs, in a process of its own, as CI and scripts/docs do."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.docs.blocks import ROOT

__all__ = ["Build", "build", "copy_sources"]


@dataclass(frozen=True, slots=True)
class Build:
    returncode: int
    output: str
    site: Path
    seconds: float


def build(config: Path, site: Path) -> Build:
    """`mkdocs build --strict` of `config` into `site`."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return Build(done.returncode, done.stdout + done.stderr, site, time.monotonic() - started)


def copy_sources(into: Path) -> Path:
    """A copy of mkdocs.yml and docs/ under `into` (examples/ linked); its mkdocs.yml."""
    shutil.copytree(ROOT / "docs", into / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "mkdocs.yml", into / "mkdocs.yml")
    (into / "examples").symlink_to(ROOT / "examples")  # the pages include files of it
    return into / "mkdocs.yml"
