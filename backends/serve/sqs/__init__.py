"""SQS's JSON protocol over the in-memory engine: `lease-worker serve-sqs`.

Modules: `endpoint` (the HTTP), `service` (the operations), and the protocol's parts, each
with its rules: `members` (request members), `messages`, `queue_attributes` and `errors`.
"""

from backends.serve.sqs.endpoint import SqsEndpoint, serve_sqs, sqs_endpoint_in_thread

__all__ = ("SqsEndpoint", "serve_sqs", "sqs_endpoint_in_thread")
