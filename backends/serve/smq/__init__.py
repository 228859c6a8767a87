"""An Alibaba Cloud SMQ (formerly MNS) endpoint over the in-memory engine's SMQ dialect: its
REST/XML protocol, signatures checked (`serve_smq`, `smq_endpoint_in_thread`)."""

from backends.serve.smq.endpoint import SmqEndpoint, serve_smq, smq_endpoint_in_thread

__all__ = ["SmqEndpoint", "serve_smq", "smq_endpoint_in_thread"]
