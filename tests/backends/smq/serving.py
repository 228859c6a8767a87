"""`smq_pair`: serve-smq on a fresh SMQ-dialect engine in this event loop, and an
`SmqBackend` on it (the engine's clock is the loop's, so looptime moves both)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from backends.memory.dialects import SMQ_DIALECT
from backends.memory.engine import MemoryEngine
from backends.serve.smq import serve_smq
from backends.smq import SmqBackend, SmqSettings
from worker.clock import LoopClock


@asynccontextmanager
async def smq_pair(secret: str = "test") -> AsyncIterator[tuple[SmqBackend, MemoryEngine]]:
    engine = MemoryEngine(LoopClock(), dialect=SMQ_DIALECT)
    async with anyio.create_task_group() as tg:
        url = await tg.start(serve_smq, engine)
        settings = SmqSettings(endpoint=url, access_key_id="test", access_key_secret=secret)
        backend = await SmqBackend.connect(settings)
        try:
            yield backend, engine
        finally:
            await backend.aclose()
            tg.cancel_scope.cancel()
