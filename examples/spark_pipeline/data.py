"""The example's generated data: sales datasets (CSV) and click-stream events (JSON)."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

REGIONS = ("north", "south", "east", "west")
PRODUCTS = ("tea", "coffee", "cocoa")
KINDS = ("view", "click", "buy")


def write_sales(path: Path, *, day: int, rows: int) -> None:
    """One day's sales: `rows` lines of region, product, amount (cents)."""
    rng = random.Random(day)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["day", "region", "product", "amount"])
        for _ in range(rows):
            region, product = rng.choice(REGIONS), rng.choice(PRODUCTS)
            writer.writerow([day, region, product, rng.randint(100, 5_000)])


def events(count: int) -> list[str]:
    """Click-stream events as JSON bodies."""
    rng = random.Random(count)
    return [
        json.dumps({"n": n, "kind": rng.choice(KINDS), "region": rng.choice(REGIONS)})
        for n in range(count)
    ]
