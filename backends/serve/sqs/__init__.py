"""SQS's JSON and query protocols over the in-memory engine: `lease-worker serve-sqs`.

Modules: `endpoint` (the HTTP, and which protocol a request speaks), `intake` (reading a body
within bounds), `query` (the query protocol's spelling of members and answers), `service`
and `admin` (the operations), `persist` (`--persist`), and the operations' parts, each with
its rules: `members` (request members), `messages`, `queue_attributes` and `errors`.
docs/reference/sqs-compatibility.md lists every SQS operation and what differs from SQS.
"""

from backends.serve.sqs.endpoint import SqsEndpoint, serve_sqs, sqs_endpoint_in_thread

__all__ = ("SqsEndpoint", "serve_sqs", "sqs_endpoint_in_thread")
