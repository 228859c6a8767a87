"""`python -m docs.gen`: rewrite the generated reference pages; `--check`: exit 1 naming
the stale ones, changing nothing."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from docs.gen import cli_page, config_page, logs_page, metrics_page

REFERENCE = Path(__file__).resolve().parents[1] / "reference"

#: Each generated page and what makes it.
PAGES: dict[str, Callable[[], str]] = {
    "cli.md": cli_page.render,
    "config.md": config_page.render,
    "logs.md": logs_page.render,
    "metrics.md": metrics_page.render,
}


def stale() -> list[str]:
    """The generated pages whose committed text differs from what the code makes now."""
    return [
        name
        for name, render in PAGES.items()
        if not (REFERENCE / name).is_file() or (REFERENCE / name).read_text() != render()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m docs.gen", description=__doc__)
    parser.add_argument("--check", action="store_true", help="only report stale pages")
    args = parser.parse_args(argv)
    if args.check:
        names = stale()
        for name in names:
            print(f"docs/reference/{name} is stale: run python -m docs.gen", file=sys.stderr)
        return 1 if names else 0
    for name, render in PAGES.items():
        (REFERENCE / name).write_text(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
