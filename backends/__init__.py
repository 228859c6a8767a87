"""Queue backends, and the table the CLI (and anyone else) opens one from by name.

A new backend plugs in with one entry here: its name, a line for `--help`, and a `connect`
function from `ConnectOptions` to an open `worker.backend.Backend`. Nothing outside this
table names a backend.

- `memory`: the embedded in-memory engine (`backends.memory`); it starts empty, so the
  CLI creates the app's queues on it.
- `sqs`: Amazon SQS through aiobotocore (`backends.sqs`).
- `smq`: Alibaba Cloud SMQ, formerly MNS, through a small async client (`backends.smq`).
"""

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from backends.factory import BACKENDS, BackendKind, ConnectOptions, connect

__all__ = ("BACKENDS", "BackendKind", "ConnectOptions", "connect")


def __getattr__(name: str) -> object:
    """The table is imported on first use (PEP 562): it imports every backend, and code
    that needs one module of one backend (`backends.sqs.lean_signer`) should not."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module("backends.factory"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
