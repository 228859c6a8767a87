# app.py
import anyio
import structlog

from worker import LeaseConfig, Message, Producer, Worker, WorkerConfig, WorkerContext

# Leases of 6 s, so that you see them renewed within seconds; the default is 30.
app = Worker(WorkerConfig(lease=LeaseConfig(visibility_s=6)))
log = structlog.get_logger()


@app.handler("orders")
async def ship_order(message: Message) -> None:
    order = message.body  # the JSON body, decoded
    await anyio.sleep(order["work_s"])  # longer than 6 s: the lease must be renewed
    log.info("order.shipped", order_id=order["id"], renewals=message.lease.renewals)


@app.background
async def send_orders(context: WorkerContext) -> None:
    producer = Producer(context.backend)
    for n in range(1, 6):
        await producer.send("orders", {"id": n, "work_s": 3 * n})
    log.info("orders.sent", count=5)
