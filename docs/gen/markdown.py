"""Markdown tables for the generated pages."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["cell", "table"]


def cell(text: str) -> str:
    """One table cell: a single line, with `|` escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines
