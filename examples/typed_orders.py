"""Typed payloads, a batch handler with partial success, and the producer, on the in-memory engine.

Run it with `python -m examples.typed_orders` (or `lease-worker run examples.typed_orders:app`).

- `handle_order` takes an `Order` dataclass: the producer encodes it, the worker decodes it by
  the handler's annotation. One body is not an order: it fails validation, and with a
  maxReceiveCount of 1 lands in the dead-letter queue after its one receive.
- `send_receipts` is a batch handler: it gets up to 10 messages at once and returns the ids
  of those that failed (the bounced addresses); the rest are deleted in one call.
- With OpenTelemetry installed, the producer's trace continues in each handler's span.
"""

from __future__ import annotations

import dataclasses

import anyio
import structlog

from backends.memory import MemoryBackend
from worker import (
    Message,
    Outgoing,
    Producer,
    QueueAdmin,
    RedrivePolicy,
    Worker,
    WorkerConfig,
    WorkerContext,
    serve,
)
from worker.types import QueueSpec

ORDERS, RECEIPTS, DLQ = "orders", "receipts", "orders-dlq"
log = structlog.get_logger("examples.typed_orders")


@dataclasses.dataclass(frozen=True)
class Order:
    id: int
    email: str
    total: float


@dataclasses.dataclass
class Tally:
    orders: list[int] = dataclasses.field(default_factory=list)
    receipts_sent: int = 0
    receipts_failed: int = 0
    dead_lettered: int = 0


app = Worker(WorkerConfig(wait_s=1, max_in_flight=20))
tally = Tally()


@app.on_startup
async def create_queues(context: WorkerContext) -> None:
    if isinstance(context.backend, QueueAdmin):
        await context.backend.create_queue(QueueSpec(DLQ))
        await context.backend.create_queue(QueueSpec(ORDERS, redrive=RedrivePolicy(DLQ, 1)))
        await context.backend.create_queue(QueueSpec(RECEIPTS))


@app.handler(ORDERS)
async def handle_order(order: Order, message: Message) -> None:
    tally.orders.append(order.id)
    log.info("order.handled", order_id=order.id, receive_count=message.receive_count)


@app.batch_handler(RECEIPTS, max_size=10, max_wait_s=0.5)
async def send_receipts(messages: list[Message]) -> set[str]:
    # The mail server turns some addresses away once: those are retried, the rest deleted.
    bounced = {
        m.message_id
        for m in messages
        if m.body["email"].endswith("@bounce.test") and m.receive_count == 1
    }
    tally.receipts_sent += len(messages) - len(bounced)
    tally.receipts_failed += len(bounced)
    return bounced


@app.background
async def produce(context: WorkerContext) -> None:
    producer = Producer(context.backend)
    domains = ["bounce.test", "mail.test", "mail.test", "mail.test", "mail.test"]
    orders = [Order(n, f"user{n}@{domains[n % 5]}", 9.5) for n in range(20)]
    await producer.send_many(ORDERS, orders)  # 2 calls of 10
    await producer.send(ORDERS, {"id": "not a number"})  # refused by the Order decoder
    await producer.send_many(RECEIPTS, [Outgoing(body={"email": o.email}) for o in orders])
    with anyio.fail_after(30):
        while not _finished(len(orders)):  # a demo may poll
            await anyio.sleep(0.5)
            tally.dead_lettered = (await context.backend.queue_info(DLQ)).approximate_visible
    log.info(
        "demo.finished",
        orders=len(tally.orders),
        receipts_sent=tally.receipts_sent,
        receipts_failed=tally.receipts_failed,
        dead_lettered=tally.dead_lettered,
    )
    context.request_shutdown()


def _finished(orders: int) -> bool:
    return (
        len(tally.orders) == orders and tally.receipts_sent == orders and tally.dead_lettered == 1
    )


async def main() -> Tally:
    global tally
    tally = Tally()  # a fresh one per run
    await serve(app, MemoryBackend())
    return tally


if __name__ == "__main__":
    anyio.run(main)
