"""The console in a real headless Chromium (Debian's chromium and chromium-driver, driven by
selenium): a running worker's in-flight messages appear with live lease figures.

`LEASE_WORKER_SCREENSHOT=docs/console.png pytest tests/ops/test_console_browser.py` also
writes the screenshot the README shows.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ops.test_prometheus import ROOT, free_port, get_json, wait_for

pytestmark = [
    pytest.mark.process,
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        shutil.which("chromium") is None or shutil.which("chromedriver") is None,
        reason="Debian's chromium and chromium-driver are not installed",
    ),
]

pytest.importorskip("selenium")
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture
def worker_port(tmp_path: Path) -> Iterator[int]:
    port = free_port()
    command = [sys.executable, "-P", "-m", "worker", "run", "tests.apps.ops_app:app"]
    options = ["--ops-port", str(port), "--grace-s", "1", "--log-format", "json"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with (tmp_path / "worker.log").open("w") as log:
        worker = subprocess.Popen([*command, *options], stdout=log, stderr=log, env=env)
    try:
        wait_for("the worker ready", lambda: get_json(f"http://127.0.0.1:{port}/readyz"))
        yield port
    finally:
        worker.terminate()
        worker.wait(timeout=20)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    options = Options()
    options.binary_location = shutil.which("chromium") or ""
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,900",
        f"--user-data-dir={tmp_path / 'chromium'}",
    ):
        options.add_argument(flag)
    service = Service(executable_path=shutil.which("chromedriver") or "")
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()


#: The table as the page shows it, read in one step (the page redraws it every second, so
#: element references go stale between two reads).
_READ_TABLE = """
return [...document.querySelectorAll('#messages tbody tr')].map(row => ({
    id: row.dataset.messageId,
    state: row.querySelector('td.lease-state').textContent,
    held: row.querySelector('td.held').textContent,
    renewals: Number(row.querySelector('td.renewals').textContent),
    deadline: Number(row.querySelector('td.deadline').dataset.seconds),
}));
"""


def table(driver: webdriver.Chrome) -> dict[str, dict[str, Any]]:
    rows: list[dict[str, Any]] = driver.execute_script(_READ_TABLE)
    return {row["id"]: row for row in rows}


def held_s(text: str) -> float:
    """Seconds from the page's "12.3 s" / "1 m 5 s" / "1 h 2 m"."""
    units = {"s": 1, "m": 60, "h": 3600}
    parts = text.split()
    return sum(float(n) * units[u] for n, u in zip(parts[::2], parts[1::2], strict=True))


def test_the_console_shows_live_leases(worker_port: int, browser: webdriver.Chrome) -> None:
    browser.get(f"http://127.0.0.1:{worker_port}/")
    wait = WebDriverWait(browser, 20, poll_frequency=0.1)
    # The message held for a minute is the one received first: its row has the most held.
    wait.until(lambda d: any(row["state"] == "running" for row in table(d).values()))
    rows = table(browser)
    message_id = max(rows, key=lambda found: held_s(rows[found]["held"]))
    seen: list[tuple[int, float]] = []

    def moved_on(driver: webdriver.Chrome) -> bool:
        row = table(driver).get(message_id)
        if row is not None and (not seen or seen[-1] != (row["renewals"], row["deadline"])):
            seen.append((row["renewals"], row["deadline"]))
        return len(seen) > 1 and seen[-1][0] >= seen[0][0] + 2

    wait.until(moved_on)  # two more renewals, the page updating itself
    renewals = [r for r, _ in seen]
    assert renewals == sorted(renewals)  # never backwards
    falls = [b[1] < a[1] for a, b in itertools.pairwise(seen) if a[0] == b[0]]
    assert any(falls)  # between renewals, the deadline comes closer
    state, in_flight = browser.execute_script(
        "return [document.getElementById('worker-state').textContent, document.querySelector("
        "'article.queue[data-queue=\"orders\"] .in-flight').textContent];"
    )
    assert state.startswith("running") and in_flight.startswith("in flight ")
    assert in_flight.endswith("of 50 (queue quota 120,000)")
    dead = (
        "return document.querySelector('#dead-letters tr[data-queue=\"orders-dlq\"]')?.textContent"
    )
    wait.until(lambda d: "orders" in (d.execute_script(dead) or ""))  # listed every 5 s
    target = os.environ.get("LEASE_WORKER_SCREENSHOT")
    if target:  # a minute of history first, for the plot
        status_url = f"http://127.0.0.1:{worker_port}/api/status"
        wait_for("30 points", lambda: len(get_json(status_url)["history"]["points"]) >= 30, 90)
        browser.save_screenshot(str(ROOT / target))
