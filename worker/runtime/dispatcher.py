"""The dispatcher: from a received message to a running handler task.

Rules:
- One handler task per message, except on FIFO queues: the messages of one message group
  run one at a time, in the order received, in one task per group; groups run side by
  side. When a message of a group does not succeed (error, retry, timeout, lost lease,
  shutdown), the later messages of that group already received are released at once, not
  run, so that SQS delivers the group again in its order.
- A batch handler's messages go to `worker.runtime.batches`, which gathers them per queue.
- A message is never handled twice at once in this process. When a receive returns a
  message this process already holds (a second copy in one receive, or a redelivery after
  its visibility lapsed), the held lease adopts the newer receipt handle and deadline, and
  the copy is dropped: the running handler goes on and settles with the newest handle. A
  copy of a message whose release is under way is a new delivery instead, and the releasing
  lease ends at once: a release still queued is dropped (the copy may be one of SQS's rare
  duplicates, received while the message was still in flight), and one already on the wire
  was either what made the message visible or is refused, the message being received again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import structlog

from worker.core.lease import Lease, held_for
from worker.core.settlement import Outcome
from worker.registry import HandlerSpec
from worker.runtime.batches import Batches
from worker.runtime.handler_tasks import HandlerTasks
from worker.runtime.handlers import Executor
from worker.runtime.lease_keeper import LeaseKeeper
from worker.types import ReceivedMessage

__all__ = ["Dispatcher"]

_Entry = tuple[HandlerSpec, ReceivedMessage, Lease]
_IN_ORDER = frozenset({Outcome.SUCCEEDED, Outcome.DISCARDED, Outcome.DUPLICATE})


class Dispatcher:
    def __init__(
        self,
        *,
        executor: Executor,
        keeper: LeaseKeeper,
        spec_for: Callable[[str], HandlerSpec],
        is_fifo: Callable[[str], bool],
        logger: Any = None,
    ) -> None:
        self._executor = executor
        self._keeper = keeper
        self._spec_for = spec_for
        self._is_fifo = is_fifo
        self._log = logger or structlog.get_logger("lease_worker.dispatch")
        #: Every message held, from its receive until its lease ends: by queue, then message
        #: id (no (queue, id) tuple to keep per message).
        self._held: dict[str, dict[str, Lease]] = {}
        self._count = 0
        self._groups: dict[tuple[str, str], deque[_Entry]] = {}
        self._batches = Batches(executor=executor, is_fifo=is_fifo)
        self.tasks: HandlerTasks | None = None
        #: Each queue's handler and whether the queue is FIFO, looked up once a queue.
        self._routes: dict[str, tuple[HandlerSpec, bool]] = {}

    def adopt(self, received: ReceivedMessage, sent_at: float, visibility_s: float) -> bool:
        """True if `received` is a copy of a message held here; its lease takes the handle."""
        held = self._held.get(received.queue)
        lease = None if held is None else held.get(received.message_id)
        if lease is None or not lease.active:
            return False
        if lease.releasing:
            # Its release is decided: the copy is a new delivery, run as any other (adopted,
            # it would only be released again: each failure would cost two receives toward
            # the DLQ). The releasing lease ends here, so that one lease at a time stands for
            # the message (flow control counts by message id): a release still queued is
            # dropped, one on the wire changes nothing when it answers.
            self._keeper.settled(lease)
            return False
        # The service counts the new handle's visibility from this receive, whatever an
        # earlier renewal of the old handle said.
        self._keeper.adopt(lease, received.receipt_handle, sent_at + held_for(visibility_s))
        self._log.info(
            "message.received_while_held",
            queue=received.queue,
            message_id=received.message_id,
            receive_count=received.receive_count,
        )
        return True

    @property
    def held_count(self) -> int:
        """How many messages are held."""
        return self._count

    def held(self) -> list[Lease]:
        """Every held message's lease (a copy)."""
        return [lease for held in self._held.values() for lease in held.values()]

    def hold(self, received: ReceivedMessage, lease: Lease) -> None:
        """Hold the message (until `forget`) without running it yet: a message waiting for
        its tenant's turn (`worker.runtime.tenants`), run later with `dispatch`."""
        held = self._held.get(received.queue)
        if held is None:
            held = self._held[received.queue] = {}
        if held.get(received.message_id) is None:
            self._count += 1
        held[received.message_id] = lease

    def dispatch(self, received: ReceivedMessage, lease: Lease) -> None:
        """Hold the message (until `forget`), then run its handler, or queue it to run.

        Raises RuntimeError when the handler task group refuses the task the message needs
        (it is stopping): nothing then waits for that task, and the caller releases it.
        """
        self.hold(received, lease)
        queue = received.queue
        assert self.tasks is not None, "dispatch before the handler task group started"
        route = self._routes.get(queue)
        if route is None:
            route = self._routes[queue] = (self._spec_for(queue), self._is_fifo(queue))
        spec, fifo = route
        if spec.batch is not None:
            self._batches.add(spec, received, lease, self.tasks)
            return
        # A standard queue's message is not asked for its group id (an attribute lookup).
        group = received.group_id if fifo else None
        if group is None:
            self.tasks.create_task(self._executor.run(spec, received, lease))
            return
        group_key = (queue, group)
        waiting = self._groups.get(group_key)
        if waiting is not None:
            waiting.append((spec, received, lease))
            return
        # Registered with its task or not at all: a group the stopping task group refuses
        # (RuntimeError, this message released by the caller) would take the group's later
        # messages with no task to run them.
        waiting = deque([(spec, received, lease)])
        self.tasks.create_task(self._run_group(group_key, waiting))
        self._groups[group_key] = waiting

    def forget(self, lease: Lease) -> None:
        """The lease ended: a later receive of the same message is a new delivery."""
        held = self._held.get(lease.queue)
        if held is not None and held.get(lease.message_id) is lease:
            del held[lease.message_id]
            self._count -= 1

    async def _run_group(self, group_key: tuple[str, str], waiting: deque[_Entry]) -> None:
        try:
            while waiting:
                spec, received, lease = waiting.popleft()
                outcome = await self._executor.run(spec, received, lease)
                if outcome not in _IN_ORDER and waiting:
                    self._log.info(
                        "fifo.group_released",
                        queue=group_key[0],
                        group_id=group_key[1],
                        after=outcome.value,
                        messages=len(waiting),
                    )
                    self._skip_all(waiting)
        finally:
            self._skip_all(waiting)
            del self._groups[group_key]

    def _skip_all(self, waiting: deque[_Entry]) -> None:
        while waiting:
            self._executor.skip(*waiting.popleft())
