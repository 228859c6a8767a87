"""How much of a request an error answer may repeat: `bounded`, for both emulators.

An error's message often names what was wrong (a queue URL, an attribute name), and those
come from the request, up to its size limit (about 4 MiB for serve-sqs). An answer repeats
at most `MAX_ECHO_CHARS` of any one text: the start and the end, which hold what a reader
needs (the end usually says why), with the count of characters left out between them.
"""

from __future__ import annotations

__all__ = ["MAX_ECHO_CHARS", "bounded"]

#: The longest text an error answer carries, counted in characters.
MAX_ECHO_CHARS = 1024
_TAIL = 256


def bounded(text: str, limit: int = MAX_ECHO_CHARS) -> str:
    """`text` if it is at most `limit` characters, else its start and end around a marker
    saying how much was left out; never longer than `limit`."""
    if len(text) <= limit:
        return text
    tail = min(_TAIL, limit // 4)
    # Room for the longest marker (its count is below len(text)), then the true count.
    head = max(limit - tail - len(_marker(len(text))), 0)
    return text[:head] + _marker(len(text) - head - tail) + text[len(text) - tail :]


def _marker(left_out: int) -> str:
    return f"...[{left_out} characters left out]..."
