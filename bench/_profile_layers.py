"""cProfile's own time by function, and by layer (runtime, engine, prometheus, asyncio,
botocore, …), for bench/profile.py.

A function's layer comes from its file. A C function (a builtin such as `list.append` or
`socket.send`, which cProfile files under "~") has no file, and a standard-library module
outside asyncio and logging (`email` parsing headers for botocore, `re`, `json`) belongs to
whoever calls it: the own time of either is split among the layers of its callers, in
proportion to the time each call site spent in it (recursively), so that "botocore"
includes the header parsing botocore asks of `email`, and "runtime" the builtins the
runtime calls. What has no caller to go by (start-up) stays "other".
"""

from __future__ import annotations

import pstats
import sysconfig
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_STDLIB = sysconfig.get_paths()["stdlib"]

#: (layer, what its files' paths contain), first match wins; the rest is "other".
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("runtime", (f"{ROOT}/worker/",)),
    ("engine", (f"{ROOT}/backends/memory/", f"{ROOT}/backends/serve/")),
    # The lean path's HTTP client is the transport, as aiohttp is for the botocore path.
    ("http", (f"{ROOT}/backends/sqs/lean_http.py",)),
    ("sqs backend", (f"{ROOT}/backends/sqs/",)),
    ("botocore", ("/botocore/", "/aiobotocore/")),
    ("http", ("/aiohttp/", "/yarl/", "/multidict/", "/urllib3/", f"{_STDLIB}/http/")),
    ("prometheus", ("/prometheus_client/",)),
    (
        "asyncio",
        (f"{_STDLIB}/asyncio/", "/anyio/", "/uvloop/", "/sniffio/", f"{_STDLIB}/selectors"),
    ),
    ("logging", ("/structlog/", f"{_STDLIB}/logging/")),
)

#: pstats' key: (file, line, function name).
Key = tuple[str, int, str]


def layer_of(filename: str) -> str:
    for layer, markers in LAYERS:
        if any(marker in filename for marker in markers):
            return layer
    return "other"


def _is_c(key: Key) -> bool:
    return key[0] == "~"


@dataclass
class Profile:
    #: pstats' table: key -> (primitive calls, calls, own s, cumulative s, callers), where
    #: callers maps each caller's key to the same four figures for calls from it.
    table: dict[Key, Any]

    def __post_init__(self) -> None:
        self._resolved: dict[Key, Counter[str]] = {}

    @classmethod
    def of(cls, stats: pstats.Stats) -> Profile:
        table: dict[Key, Any] = stats.stats  # type: ignore[attr-defined]
        return cls(table)

    @property
    def total_s(self) -> float:
        return float(sum(entry[2] for entry in self.table.values()))

    def shares(self, key: Key) -> Counter[str]:
        """The fraction of `key`'s own time each layer accounts for (they sum to 1)."""
        if key in self._resolved:
            return self._resolved[key]
        own = layer_of(key[0]) if not _is_c(key) else "other"
        if own != "other":
            self._resolved[key] = Counter({own: 1.0})
            return self._resolved[key]
        self._resolved[key] = Counter({"other": 1.0})  # a cycle back here stays "other"
        split: Counter[str] = Counter()
        for caller, (_, _, own_s, _) in self.table[key][4].items():
            if caller in self.table and own_s > 0:
                for layer, part in self.shares(caller).items():
                    split[layer] += own_s * part
        counted = sum(split.values())
        if counted > 0:
            self._resolved[key] = Counter({k: v / counted for k, v in split.items()})
        return self._resolved[key]

    def layer(self, key: Key) -> str:
        """The layer that accounts for most of `key`'s own time."""
        return self.shares(key).most_common(1)[0][0]


def layer_shares(profile: Profile) -> Counter[str]:
    """Own seconds by layer, callers' layers standing in for C and stdlib functions."""
    shares: Counter[str] = Counter()
    for key, entry in profile.table.items():
        for layer, part in profile.shares(key).items():
            shares[layer] += entry[2] * part
    return shares


@dataclass(frozen=True, slots=True)
class Function:
    name: str
    layer: str
    calls: int
    own_s: float
    cumulative_s: float


def _name(key: Key) -> str:
    filename, line, function = key
    if _is_c(key):
        return function
    path = Path(filename)
    parts = path.parts
    cut = max((i for i, part in enumerate(parts) if part == "site-packages"), default=-1)
    if cut >= 0:
        shown = "/".join(parts[cut + 1 :])
    elif path.is_relative_to(ROOT):
        shown = str(path.relative_to(ROOT))
    elif path.is_relative_to(_STDLIB):
        shown = str(path.relative_to(_STDLIB))
    else:
        shown = path.name
    return f"{shown}:{line} {function}"


def top_functions(profile: Profile, count: int) -> list[Function]:
    ranked = sorted(profile.table.items(), key=lambda item: item[1][2], reverse=True)
    return [
        Function(_name(key), profile.layer(key), int(entry[1]), entry[2], entry[3])
        for key, entry in ranked[:count]
    ]
