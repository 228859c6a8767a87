"""MkDocs hooks (mkdocs.yml `hooks:`): the code layout page is made at build time.

docs/reference/layout.md lists every module with the first sentence of its docstring: a
committed copy would be stale at every new module of anyone's, so it is generated into
each build instead and never committed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `mkdocs` run as a console script has no cwd on sys.path
    sys.path.insert(0, str(ROOT))

from docs.gen import layout_page  # noqa: E402

LAYOUT = "reference/layout.md"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    files.append(File.generated(config, LAYOUT, content=layout_page.render()))
    return files
