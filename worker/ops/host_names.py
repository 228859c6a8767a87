"""The names the console answers to: what a request's `Host` and a redrive's `Origin` are
checked against.

A browser sends, as `Host`, the name in the address bar. A page of another site whose name
was made to resolve to the listener's address (DNS rebinding: through a port-forward, to
127.0.0.1) sends its own name, so a console that answered any `Host` would let that page
read it with the operator's browser. The names are therefore configured, never taken from
the request: by default the loopback names (`kubectl port-forward`, a worker on a laptop)
and the listener's own address when it binds one (`--ops-addr 10.0.0.5`); on a wildcard
address (0.0.0.0, ::) only the loopback names. `--console-hosts` replaces them.

Rules:
- a name is compared without its port, lower-cased; an IPv6 address in brackets;
- a request without `Host` (HTTP/1.0) names nothing and is refused;
- an `Origin` must be `http://<a configured name>[:port]` and name the same authority as
  the request's `Host`: a page on another port of a configured name (another local server)
  is another origin.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from worker.errors import ConfigError

__all__ = ["LOOPBACK_NAMES", "HostNames"]

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


@dataclass(frozen=True)
class HostNames:
    """Names (and addresses) a browser may use for the console, without ports."""

    names: frozenset[str]

    @classmethod
    def of(cls, names: Iterable[str]) -> HostNames:
        """Configured names: `ConfigError` for an empty list or a name with a port, scheme
        or path."""
        found = frozenset(_normalised(name) for name in names)
        if not found:
            raise ConfigError("console hosts: name at least one host")
        return cls(found)

    @classmethod
    def default_for(cls, bind: str) -> HostNames:
        """The loopback names, and `bind` when it is one address (not a wildcard)."""
        names = set(LOOPBACK_NAMES)
        if bind and not _is_wildcard(bind):
            names.add(bind)
        return cls.of(names)

    def allows(self, host: str | None) -> bool:
        """Whether a `Host` header names this listener."""
        return host is not None and _name_of(host) in self.names

    def allows_origin(self, origin: str, host: str | None) -> bool:
        """Whether an `Origin` header is this listener as the request's `Host` names it."""
        if host is None or not self.allows(host):
            return False
        parts = urlsplit(origin)
        if parts.scheme != "http" or parts.path or parts.query or parts.fragment:
            return False
        return parts.netloc.lower() == host.lower() and _name_of(parts.netloc) in self.names


def _name_of(authority: str) -> str:
    """The name of a `Host` or an origin's authority, as configured names are written:
    "[::1]:9100" -> "[::1]", "Localhost:9100" -> "localhost"."""
    authority = authority.strip().lower()
    if authority.startswith("["):
        name = authority.split("]", 1)[0] + "]"
    else:
        name = authority.rsplit(":", 1)[0] if authority.count(":") == 1 else authority
    return _address(name) or name


def _address(name: str) -> str | None:
    """An IP address in one spelling ("[::1]" for every spelling of it), else None."""
    try:
        address = ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return None
    return f"[{address.compressed}]" if address.version == 6 else address.compressed


def _normalised(name: str) -> str:
    name = name.strip().lower()
    if not name or any(mark in name for mark in ("/", "@", "?", "#", " ")):
        raise ConfigError(f"console hosts: {name!r} is not a host name or address")
    address = _address(name)
    if address is None and ":" in name:
        raise ConfigError(f"console hosts: {name!r}: name a host without its port")
    return address or name


def _is_wildcard(bind: str) -> bool:
    try:
        return ipaddress.ip_address(bind.strip("[]")).is_unspecified
    except ValueError:
        return False
