"""The sending side: what a producer does to put messages on a queue.

- `producer`: `Producer`, batched sends with partial failure as a value;
- `sync_producer`: `SyncProducer`, the same from synchronous code, on a loop of its own;
- `outgoing`: `Outgoing`, a message prepared for sending (body encoded, attributes checked).

It imports the contract and `worker.envelope` (codecs, large payloads, trace context), never
the receiving side (`worker.app`, `worker.registry`, `worker.runtime`), which never imports it.
The public names are re-exported by `worker`.
"""
