"""Markdown tables for the generated pages."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["cell", "prose", "table"]


def prose(text: str) -> str:
    """Text from the code as Markdown: `<` outside code spans escaped, so that
    `LEASE_WORKER_<OPTION>` is not taken for an HTML tag."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("<", "&lt;")
    return "`".join(parts)


def cell(text: str) -> str:
    """One table cell: a single line of `prose`, with `|` escaped."""
    return prose(" ".join(text.split())).replace("|", "\\|")


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines
