"""The in-memory engine: a faithful model of SQS on an injected clock (`MemoryEngine`), and
`MemoryBackend`, the runtime's `Backend` over it. The embedded default, and the engine our
contract tests hold to SQS's rules.

Modules: `engine` (messages), `catalog` (queues by name), `queue`, `message`, `groups` (FIFO),
`dedup`, `config`, `rules` (what a request must be) and `dialects` (the numbers per service).
"""

from backends.memory.backend import MemoryBackend
from backends.memory.engine import MemoryEngine

__all__ = ("MemoryBackend", "MemoryEngine")
