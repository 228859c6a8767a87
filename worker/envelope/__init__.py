"""What travels with a message besides its handler, shared by both sides.

- `codecs`: bodies encoded for sending and decoded into a handler's typed payload;
- `large_payloads`: bodies stored in S3, in the pointer format of AWS's extended clients;
- `payload_cleanup`: a backend wrapper that deletes a large payload's object after its message;
- `tracing`: OpenTelemetry context across the queue, injected when sent, continued when handled.

The receiving side (`worker.registry`, `worker.runtime`) and the sending side
(`worker.sending`) each import this package and never each other; it imports only the
contract. The public names are re-exported by `worker`.
"""
