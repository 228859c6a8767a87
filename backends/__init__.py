"""Queue backends, and the table the CLI (and anyone else) opens one from by name.

A new backend plugs in with one entry here: its name, a line for `--help`, and a `connect`
function from `ConnectOptions` to an open `worker.backend.Backend`. Nothing outside this
table names a backend.

- `memory`: the embedded in-memory engine (`backends.memory`); it starts empty, so the
  CLI creates the app's queues on it.
- `sqs`: Amazon SQS through aiobotocore (`backends.sqs`).
- `smq`: Alibaba Cloud SMQ, formerly MNS, through a small async client (`backends.smq`).
"""

from backends.factory import BACKENDS, BackendKind, ConnectOptions, connect

__all__ = ("BACKENDS", "BackendKind", "ConnectOptions", "connect")
