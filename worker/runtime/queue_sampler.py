"""Queue depth and oldest message age, sampled at a bounded rate.

Every `interval_s` the sampler reads each handler queue's attributes into
`queue_messages{queue, state}`, `queue_oldest_message_age_seconds{queue}` and
`queue_in_flight_quota{queue}`, and its dead-letter queue's into
`dead_letter_queue_messages{queue, dead_letter_queue}`.
One GetQueueAttributes call per queue per interval (30 s by default: under 3,000 calls a
day per queue and process, a few cents a month on SQS).

SQS does not tell the oldest message's age through its API (only CloudWatch's
ApproximateAgeOfOldestMessage does): there the age is that of the oldest message this
worker received since the previous sample, 0 when the queue is empty, and the last value
while messages wait but none is received. A failed read is logged once per streak of
failures; the gauges keep their last values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import anyio
import structlog
from anyio.abc import TaskStatus

from worker.backend import Backend
from worker.clock import Clock
from worker.errors import BackendError
from worker.runtime.calls import as_backend_error, call_by
from worker.runtime.metrics import Metrics
from worker.types import QueueInfo

__all__ = ["QueueSampler"]


class QueueSampler:
    def __init__(
        self,
        backend: Backend,
        *,
        queues: Callable[[], Mapping[str, QueueInfo]],
        oldest_received_age_s: Callable[[str], float | None],
        metrics: Metrics,
        clock: Clock,
        interval_s: float,
        call_timeout_s: float,
        logger: Any = None,
    ) -> None:
        self._backend = backend
        self._queues = queues
        self._oldest_received_age_s = oldest_received_age_s
        self._metrics = metrics
        self._clock = clock
        self._interval_s = interval_s
        self._call_timeout_s = call_timeout_s
        self._failing: set[str] = set()
        self._log = logger or structlog.get_logger("lease_worker.queue_sampler")

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self.sample()
            await anyio.sleep(self._interval_s)

    async def sample(self) -> None:
        """Read every handler queue's attributes once, then each dead-letter queue's."""
        handler_queues = dict(self._queues())
        for queue in handler_queues:
            await self._sample(queue, partial(self._record, queue))
        sources: dict[str, list[str]] = {}
        for queue, info in handler_queues.items():
            if info.redrive is not None:
                sources.setdefault(info.redrive.dead_letter_queue, []).append(queue)
        for dead_letter_queue, queues in sorted(sources.items()):
            record = partial(self._record_dead_letters, dead_letter_queue, queues)
            await self._sample(dead_letter_queue, record)

    async def _sample(self, queue: str, record: Callable[[QueueInfo], None]) -> None:
        try:
            info = await call_by(
                self._clock.now() + self._call_timeout_s,
                lambda: self._backend.queue_info(queue),
                operation="GetQueueAttributes",
                queue=queue,
            )
        except Exception as raised:
            self._failed(queue, as_backend_error(raised, self._log, "queue_info", queue))
            return
        if queue in self._failing:
            self._failing.discard(queue)
            self._log.info("queue_sample.recovered", queue=queue)
        record(info)

    def _record_dead_letters(
        self, dead_letter_queue: str, sources: list[str], info: QueueInfo
    ) -> None:
        count = info.approximate_visible + info.approximate_in_flight + info.approximate_delayed
        for queue in sources:
            self._metrics.dead_letter_messages.labels(queue, dead_letter_queue).set(count)

    def _record(self, queue: str, info: QueueInfo) -> None:
        received_age_s = self._oldest_received_age_s(queue)
        depth = self._metrics.queue_messages
        depth.labels(queue, "visible").set(info.approximate_visible)
        depth.labels(queue, "in_flight").set(info.approximate_in_flight)
        depth.labels(queue, "delayed").set(info.approximate_delayed)
        if info.in_flight_limit is not None:
            self._metrics.in_flight_quota.labels(queue).set(info.in_flight_limit)
        age = info.oldest_message_age_s
        if age is None and received_age_s is not None:
            age = received_age_s
        elif age is None and info.approximate_visible + info.approximate_in_flight == 0:
            age = 0.0
        if age is not None:
            self._metrics.oldest_message_age.labels(queue).set(age)

    def _failed(self, queue: str, error: BackendError) -> None:
        if queue not in self._failing:
            self._failing.add(queue)
            self._log.warning("queue_sample.failed", queue=queue, code=error.code, error=str(error))
