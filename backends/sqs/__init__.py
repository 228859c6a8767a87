"""Amazon SQS through aiobotocore: `SqsBackend`, set up from `SqsSettings`.

Modules: `backend` (the calls), `settings` (the client's set-up), `wire` (SQS's shapes to and
from `worker.types`) and `errors` (what is checked before a call, and botocore's exceptions
mapped onto `worker.errors` after).
"""

from backends.sqs.backend import SqsBackend
from backends.sqs.settings import SqsSettings

__all__ = ("SqsBackend", "SqsSettings")
