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

from backends.sqs.backend import SqsBackend
from backends.sqs.settings import SqsSettings

__all__ = ("SqsBackend", "SqsSettings")
