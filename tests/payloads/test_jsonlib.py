"""`worker.jsonlib.loads` gives exactly `json.loads`'s values and errors, orjson or not."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from typing import Any

import pytest

from worker import jsonlib

EDGE_CASES = [
    "{}",
    "[]",
    ' {"a": 1} ',
    '{"a": 1, "a": 2}',
    '{"b": 1, "a": 2}',
    "NaN",
    "-Infinity",
    "[1e400]",
    "[-1e400]",
    "9223372036854775807",
    "9223372036854775808",
    "123456789012345678901234567890",
    '{"id": 18446744073709551616}',
    "0.1",
    "3.141592653589793238462643383279",
    "-0",
    "-0.0",
    "1E5",
    '"\\ud800"',
    '"\\ud83d\\ude00"',
    '"caf\\u00e9 \u00e9 \U0001f600"',
    '"\\"\\\\\\/\\b\\f\\n\\r\\t"',
    "",
    " ",
    "{",
    '{"a": }',
    "[1,]",
    "[1 2]",
    "nul",
    "true false",
    "\ufeff{}",
    '{"a": "\x01"}',
    "'single'",
    "01",
    ".5",
    "1.",
    "[" * 50 + "]" * 50,
    '"\ud800 a lone surrogate, unescaped"',
    '{"n": 1234567890123456789}',
    '{"n": 123456789012345678}',
    '["\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669"]',
]


def _outcome(loads: Any, text: str) -> tuple[str, str]:
    try:
        return "value", repr(loads(text))
    except json.JSONDecodeError as error:
        return "error", f"{type(error).__module__}.{type(error).__name__}: {error.msg} {error.pos}"
    except RecursionError:
        return "error", "RecursionError"


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randrange(-(10 ** rng.randrange(1, 30)), 10 ** rng.randrange(1, 30))
    if kind == 2:
        return rng.uniform(-1e6, 1e6) * 10 ** rng.randrange(-300, 300)
    if kind == 3:
        return "".join(
            chr(rng.choice([rng.randrange(32, 127), rng.randrange(0x80, 0x2FFF)]))
            for _ in range(rng.randrange(20))
        )
    if kind == 4:
        return rng.choice(["", "0" * 25, "x", "ü", "\n\t"])
    if kind == 5:
        return float(rng.choice(["nan", "inf", "-inf"])) if rng.random() < 0.2 else 0.5
    if kind in (6, 7):
        return [_random_json(rng, depth + 1) for _ in range(rng.randrange(5))]
    return {str(rng.randrange(100)): _random_json(rng, depth + 1) for _ in range(rng.randrange(5))}


@pytest.mark.parametrize("text", EDGE_CASES)
def test_edge_cases_decode_as_json_does(text: str) -> None:
    assert _outcome(jsonlib.loads, text) == _outcome(json.loads, text)


def test_random_documents_decode_as_json_does() -> None:
    rng = random.Random(20261124)
    for _ in range(2000):
        text = json.dumps(_random_json(rng), ensure_ascii=rng.random() < 0.5)
        if rng.random() < 0.1:  # damage a few: errors must match too
            cut = rng.randrange(len(text) + 1)
            text = text[:cut] + rng.choice(["", "}", ",", "x"]) + text[cut + 1 :]
        assert _outcome(jsonlib.loads, text) == _outcome(json.loads, text), text


@pytest.mark.parametrize("text", [t for t in EDGE_CASES if "\ud800 a" not in t])
def test_utf8_bytes_decode_as_json_does(text: str) -> None:
    data = text.encode("utf-8")
    assert _outcome(jsonlib.loads_utf8, data) == _outcome(json.loads, text)  # type: ignore[arg-type]


def test_bytes_that_are_not_utf8_are_a_value_error() -> None:
    with pytest.raises(UnicodeDecodeError):
        jsonlib.loads_utf8(b'{"a": "\xff"}')


@pytest.mark.parametrize(
    ("data", "long"),
    [
        (b"1234567890123456789", True),
        (b"123456789012345678", False),
        (b'{"a": "x"}' + b"9" * 30, True),
        (b"123456789 0123456789", False),
        ("\u0661".encode() * 19, False),  # Arabic-Indic digits are no JSON number
        ("1234567890\u00e9123456789".encode(), False),
        (b"", False),
    ],
)
def test_a_run_of_19_ascii_digits_is_found_and_nothing_else(data: bytes, long: bool) -> None:
    assert jsonlib.has_long_digits(data) is long


#: Where a long text is looked through in windows: runs of digits across their edges.
_WINDOW = 64 * 1024


@pytest.mark.parametrize("at", [5, _WINDOW - 19, _WINDOW - 10, _WINDOW, 2 * _WINDOW + 5])
def test_a_long_number_across_the_windows_of_a_long_text_decodes_exactly(at: int) -> None:
    """A receive answer or a body larger than one window is looked through a window at a
    time (no whole copy): a number that orjson would round, wherever it falls, still goes
    to json.loads."""
    number = "1234567890123456789012345"  # 25 digits: orjson would make it a float
    head = '["'
    text = head + "x" * (at - len(head) - 3) + '", ' + number + ', "' + "y" * _WINDOW + '"]'
    assert text.index(number) == at
    assert jsonlib.has_long_digits(text.encode())
    assert jsonlib.loads(text)[1] == int(number)
    assert jsonlib.loads_utf8(text.encode())[1] == int(number)
    short = text.replace(number, number[:18])  # 18 digits: no window finds 19
    assert not jsonlib.has_long_digits(short.encode())
    assert jsonlib.loads(short) == json.loads(short)


def test_decoding_a_body_keeps_no_copy_inside_it() -> None:
    """orjson given a string that is not ASCII keeps its UTF-8 inside the string for as long
    as it lives (a held body's size again): it is given a copy instead."""
    body = json.dumps({"text": "caf\u00e9 " * 2_000}, ensure_ascii=False)
    size = sys.getsizeof(body)
    assert jsonlib.loads(body) == json.loads(body)
    assert sys.getsizeof(body) == size


def test_orjson_is_used_when_installed() -> None:
    pytest.importorskip("orjson")
    assert jsonlib.LIBRARY == "orjson"
    assert jsonlib.loads is not json.loads


def test_the_environment_can_ask_for_the_standard_library() -> None:
    code = "import json; from worker import jsonlib as j; print(j.LIBRARY, j.loads is json.loads)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"LEASE_WORKER_JSON": "json", "PATH": ""},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["json", "True"]
