"""Amazon SQS through aiobotocore: `SqsBackend`, set up from `SqsSettings`.

Modules: `backend` (the calls), `settings` (the client's set-up), `wire` (SQS's shapes to and
from `worker.types`), `errors` (what is checked before a call, and botocore's exceptions
mapped onto `worker.errors` after), `redirects` (a 3xx is an error, never followed, on both
clients) and `botocore_internals` (the private names of botocore it uses, each with its
reason; nothing else uses any); with `SqsSettings(client="lean")`, the default, `lean`
(the hot calls sent without botocore's per-call machinery), `lean_wire` (their JSON),
`lean_signer` (their signature), `lean_retry` (botocore's standard-mode retry decisions for
them) and `lean_tracing` (their spans).
"""

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from backends.sqs.backend import SqsBackend
    from backends.sqs.settings import SqsSettings

__all__ = ("SqsBackend", "SqsSettings")
_HOME_OF = {"SqsBackend": "backends.sqs.backend", "SqsSettings": "backends.sqs.settings"}


def __getattr__(name: str) -> object:
    """Each imported on first use (PEP 562): one module of the client (`lean_signer`,
    `errors`) loads without aiobotocore and the rest of the client."""
    home = _HOME_OF.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
