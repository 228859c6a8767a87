"""`loads`: JSON message bodies decoded by orjson when it is installed, with exactly the
standard library's results.

orjson parses a small body in a fortieth of `json.loads`'s time (0.02 µs against 0.64 for
`{}`, 0.5 against 1.9 for a 200-byte order), but differs in three places, so it is used only
where it agrees:
- An integer beyond 64 bits becomes a float (precision lost): a body with a run of 19 or
  more ASCII digits goes to `json.loads`. The run is found by turning every byte of the
  UTF-8 text into a space or a "0" and looking for nineteen "0"s: 1.6 us over 3 kB, where a
  regular expression took 26 us, more than orjson's whole parse (7) and json.loads' (17).
- `NaN`, `Infinity`, a number too large for a double, and a lone surrogate are errors in
  orjson but values in `json`: any orjson error is decided again by `json.loads`, whose
  result or `json.JSONDecodeError` (with its message and position) is the answer.
- Anything else decodes to the same Python values (dict order and duplicate keys included).

`LEASE_WORKER_JSON=json` in the environment uses the standard library alone (read at
import); `[fast]` (`pip install 'lease-worker[fast]'`) installs orjson.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

__all__ = ["LIBRARY", "has_long_digits", "loads", "loads_utf8"]

#: Every byte but an ASCII digit as a space, every digit as "0" (UTF-8's multi-byte
#: sequences have no byte in 0x30-0x39, so only real digits count).
_DIGITS = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
#: An integer orjson would turn into a float (2**63 has 19 digits); also found inside a
#: string or a long mantissa, which then merely takes the slower path.
_LONG_DIGITS = b"0" * 19
#: A longer text is looked through this much at a time (each window overlapping the next by
#: 18, so no run is cut): the copies the look makes stay this small, where a whole copy of
#: a 10 MiB receive answer was 10 MiB more for a moment.
_WINDOW = 64 * 1024
_OVERLAP = len(_LONG_DIGITS) - 1


def has_long_digits(data: bytes) -> bool:
    """True if `data` has a run of 19 or more ASCII digits."""
    if len(data) <= _WINDOW:
        return data.translate(_DIGITS).find(_LONG_DIGITS) >= 0
    return any(
        data[start : start + _WINDOW + _OVERLAP].translate(_DIGITS).find(_LONG_DIGITS) >= 0
        for start in range(0, len(data), _WINDOW)
    )


def _text_has_long_digits(text: str) -> bool:
    """`has_long_digits` of the text's UTF-8 (a digit is one character and one byte, so
    windows of characters overlap as well as windows of bytes)."""
    # surrogatepass: a lone surrogate is orjson's error, then json.loads' to decide.
    if len(text) <= _WINDOW:
        return has_long_digits(text.encode("utf-8", "surrogatepass"))
    return any(
        has_long_digits(text[start : start + _WINDOW + _OVERLAP].encode("utf-8", "surrogatepass"))
        for start in range(0, len(text), _WINDOW)
    )


def _json_loads_utf8(data: bytes) -> Any:
    return json.loads(data.decode("utf-8"))


def _orjson_loaders() -> tuple[Callable[[str], Any], Callable[[bytes], Any]] | None:
    if os.environ.get("LEASE_WORKER_JSON", "").strip().lower() == "json":
        return None
    try:
        import orjson
    except ImportError:
        return None
    fast = orjson.loads
    error = orjson.JSONDecodeError
    slow = json.loads

    def loads(body: str) -> Any:
        """orjson's value where it agrees with json.loads, else json.loads' own."""
        if _text_has_long_digits(body):
            return slow(body)
        # orjson reads an ASCII string in place; of any other it would keep a UTF-8 copy
        # inside the string for as long as the string lives (a held body's size again), so
        # it reads a copy that is dropped at once (a lone surrogate fails there: slow's).
        source = body if body.isascii() else body.encode("utf-8", "surrogatepass")
        try:
            return fast(source)
        except error:
            return slow(body)

    def loads_utf8(data: bytes) -> Any:
        # As botocore reads an answer: a byte that is not UTF-8 is an error (orjson refuses
        # it, and decoding it for json.loads raises UnicodeDecodeError). orjson reads the
        # bytes themselves: no decoded copy of a whole receive answer.
        if has_long_digits(data):
            return slow(data.decode("utf-8"))
        try:
            return fast(data)
        except error:
            return slow(data.decode("utf-8"))

    return loads, loads_utf8


_FAST = _orjson_loaders()
#: What decodes bodies: "orjson" or "json".
LIBRARY = "json" if _FAST is None else "orjson"
#: A JSON text's value, as `json.loads` gives it (and raises its errors).
loads: Callable[[str], Any] = json.loads if _FAST is None else _FAST[0]
#: The same of UTF-8 bytes; a byte that is not UTF-8 raises UnicodeDecodeError (a ValueError).
loads_utf8: Callable[[bytes], Any] = _json_loads_utf8 if _FAST is None else _FAST[1]
