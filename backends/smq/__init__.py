"""Alibaba Cloud SMQ (formerly MNS): `SmqBackend`, a small async client of SMQ's REST/XML
protocol on aiohttp, and `SmqSettings`. See docs/how-to/smq.md for why not the official SDK."""

from backends.smq.backend import SmqBackend
from backends.smq.settings import SmqSettings

__all__ = ("SmqBackend", "SmqSettings")
