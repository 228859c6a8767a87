"""The fenced code blocks of the documentation: docs/**/*.md and README.md.

A block's kind comes from its fence's language (```` ```python ````); a block with none, or
one this module does not know, has the kind "unknown", which the tests refuse. The line
`<!-- docs-test: skip REASON -->` right before a fence makes the block "skipped".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["KINDS", "ROOT", "Block", "blocks", "pages"]

ROOT = Path(__file__).resolve().parents[2]
#: Fence language -> the kind of check the block gets.
KINDS = {
    "python": "python",
    "py": "python",
    "sh": "shell",
    "bash": "shell",
    "shell": "shell",
    "console": "shell",
    "yaml": "yaml",
    "yml": "yaml",
    "json": "json",
    "toml": "toml",
    "text": "text",
    "txt": "text",
}

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
_SKIP = re.compile(r"^\s*<!--\s*docs-test:\s*skip\s+(?P<reason>.+?)\s*-->\s*$")


@dataclass(frozen=True, slots=True)
class Block:
    page: Path
    #: 1-based line of the opening fence.
    line: int
    language: str
    text: str
    skip_reason: str | None = None

    @property
    def kind(self) -> str:
        if self.skip_reason is not None:
            return "skipped"
        return KINDS.get(self.language, "unknown")

    @property
    def where(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"


def pages() -> list[Path]:
    return [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]


def _language(info: str) -> str:
    words = info.strip().lstrip("{").split()
    return words[0].lstrip(".").lower().rstrip("}") if words else ""


def blocks(page: Path) -> list[Block]:
    """The page's fenced blocks in order, each dedented by its fence's indentation."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    row = 0
    while row < len(lines):
        opening = _FENCE.match(lines[row])
        if opening is None:
            row += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        body: list[str] = []
        end = row + 1
        while end < len(lines) and not _closes(lines[end], fence):
            body.append(lines[end][indent:] if lines[end][:indent].isspace() else lines[end])
            end += 1
        skip = _SKIP.match(lines[row - 1]) if row > 0 else None
        text = "\n".join(body) + "\n"
        reason = skip["reason"] if skip else None
        found.append(Block(page, row + 1, _language(opening["info"]), text, reason))
        row = end + 1
    return found


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return stripped.startswith(fence) and set(stripped) == {fence[0]}
