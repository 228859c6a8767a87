"""The names the console answers to (worker.ops.host_names): configured, never the
request's own, and compared in one spelling."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from worker.errors import ConfigError
from worker.ops.host_names import LOOPBACK_NAMES, HostNames

ROOT = Path(__file__).resolve().parents[2]


def test_a_wildcard_address_answers_to_the_loopback_names_only() -> None:
    for bind in ("0.0.0.0", "::", "[::]", ""):
        assert HostNames.default_for(bind).names == frozenset(LOOPBACK_NAMES)


def test_one_bound_address_is_a_name_besides_the_loopback_ones() -> None:
    names = HostNames.default_for("10.0.1.7")
    assert names.names == {*LOOPBACK_NAMES, "10.0.1.7"}
    assert names.allows("10.0.1.7:9100") and names.allows("localhost:9100")
    assert not names.allows("10.0.1.8:9100")


def test_hosts_are_compared_without_port_case_or_ipv6_spelling() -> None:
    names = HostNames.of(["Worker.Orders.Internal", "::1"])
    assert names.names == {"worker.orders.internal", "[::1]"}
    for host in ("worker.orders.internal", "WORKER.orders.internal:8080", "[::1]:9100"):
        assert names.allows(host), host
    assert names.allows("[0:0:0:0:0:0:0:1]:9100")
    assert not names.allows(None)
    for other in ("", "evil.example:9100", "worker.orders.internal.evil.example"):
        assert not names.allows(other), other


def test_an_origin_must_be_a_configured_name_on_the_authority_the_request_names() -> None:
    names = HostNames.default_for("0.0.0.0")
    assert names.allows_origin("http://localhost:9100", "localhost:9100")
    assert names.allows_origin("http://[::1]:9100", "[::1]:9100")
    refused = [
        ("http://evil.example:9100", "evil.example:9100"),  # rebinding: Host matches Origin
        ("http://localhost:3000", "localhost:9100"),  # another server on a loopback name
        ("https://localhost:9100", "localhost:9100"),
        ("null", "localhost:9100"),
        ("http://localhost:9100", None),
        ("http://localhost:9100/path", "localhost:9100"),
        ("http://127.0.0.1:9100", "localhost:9100"),
    ]
    for origin, host in refused:
        assert not names.allows_origin(origin, host), (origin, host)


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ([], "name at least one host"),
        (["localhost:9100"], "name a host without its port"),
        (["http://localhost"], "is not a host name or address"),
        (["  "], "is not a host name or address"),
    ],
)
def test_a_bad_name_is_a_config_error(given: list[str], error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        HostNames.of(given)


def test_the_cli_refuses_a_name_with_a_port_in_one_line() -> None:
    command = [sys.executable, "-m", "worker", "run", "examples.hello:app"]
    command += ["--console-hosts", "localhost,worker.internal:9100"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert (
        "--console-hosts=localhost,worker.internal:9100: console hosts: "
        "'worker.internal:9100': name a host without its port"
    ) in done.stderr
