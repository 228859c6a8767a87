"""`backends.serve.echo.bounded`: an error answer repeats at most its limit of a text, and
says truly how much it left out."""

from __future__ import annotations

import re

import pytest

from backends.serve.echo import MAX_ECHO_CHARS, bounded


@pytest.mark.parametrize("size", [MAX_ECHO_CHARS + 1, 2_000, 100_000])
def test_the_count_left_out_is_what_is_missing(size: int) -> None:
    # It said len(text) - limit: 976 for 2,000 characters, where 1,007 were left out.
    text = "".join(chr(ord("a") + i % 26) for i in range(size))
    answer = bounded(text)
    assert len(answer) <= MAX_ECHO_CHARS
    found = re.search(r"\.\.\.\[(\d+) characters left out\]\.\.\.", answer)
    assert found is not None
    head, tail = answer[: found.start()], answer[found.end() :]
    assert text.startswith(head) and text.endswith(tail)
    assert int(found.group(1)) == size - len(head) - len(tail)


def test_a_short_text_is_whole() -> None:
    assert bounded("x" * MAX_ECHO_CHARS) == "x" * MAX_ECHO_CHARS
