"""Handler durations, bucketed by whole seconds, for the adaptive extension length.

Like Pub/Sub's subscriber, the extension is the 99th percentile of observed durations,
clamped: a short-lived burst of slow handlers raises it, and memory stays bounded because
there is one counter per second of the clamp range.
"""

from __future__ import annotations

import math

__all__ = ["DurationHistogram"]


class DurationHistogram:
    def __init__(self, *, min_s: int, max_s: int) -> None:
        if not 1 <= min_s <= max_s:
            raise ValueError(f"need 1 <= min_s ({min_s}) <= max_s ({max_s})")
        self._min = min_s
        self._max = max_s
        self._counts: dict[int, int] = {}
        self._total = 0

    def __len__(self) -> int:
        return self._total

    def add(self, duration_s: float) -> None:
        # Rounded to the millisecond first, so that 120.0000001 s counts as 120 s.
        bucket = min(self._max, max(self._min, math.ceil(round(duration_s, 3))))
        self._counts[bucket] = self._counts.get(bucket, 0) + 1
        self._total += 1

    def percentile(self, percent: float) -> int:
        """The smallest bucket holding `percent` % of the samples; `min_s` when empty."""
        if not 0 <= percent <= 100:
            raise ValueError(f"percent must be within 0..100, got {percent}")
        if self._total == 0:
            return self._min
        target = self._total * percent / 100
        seen = 0
        for bucket in sorted(self._counts):
            seen += self._counts[bucket]
            if seen >= target:
                return bucket
        return self._max
