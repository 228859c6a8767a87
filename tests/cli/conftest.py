"""What every CLI test shares."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import structlog


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """The CLI configures logging process-wide (`main([...])` in this process does too): put
    it back for the tests that follow, which would otherwise find DEBUG filtered out."""
    config = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    wire = {name: logging.getLogger(name).level for name in ("botocore", "aiobotocore")}
    yield
    structlog.reset_defaults()
    structlog.configure(**config)
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, wire_level in wire.items():
        logging.getLogger(name).setLevel(wire_level)
    logging.captureWarnings(False)
