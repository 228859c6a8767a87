"""A worker for the flow-control benches (bench/flow_rate.py, flow_tenants.py,
flow_adaptive.py): the limits come from `lease-worker run`'s options, or from here where an
option cannot say it (a tenant key read from the body).

    FLOW_QUEUE=q FLOW_OUT=/tmp/x.log lease-worker run bench.apps.flow_app:app \\
        --backend sqs --endpoint-url http://127.0.0.1:PORT --region us-east-1 --rate-limit 50

Each handled message appends one line to `FLOW_OUT`: `<wall time handled> <outcome>
<tenant> <sent wall time> <in flight downstream at start>`. Settings, from the environment:
- `FLOW_WORK_S`: what a handler does: sleep this long (default 0: nothing);
- `FLOW_DOWNSTREAM`: `serves,fails,service_s`: instead, call a downstream (in this process)
  that serves `serves` requests at once in `service_s` each and queues the rest, and fails a
  request that arrives while `fails` or more are inside (queued or served): a struggling
  service, for the adaptive limit;
- `FLOW_TENANT_CAP`: `N`: at most N messages of one tenant at once, the tenant read from the
  body's `tenant` (no MessageGroupId needed: the queue is then not a fair queue);
- `FLOW_TENANT_HOLD`: with `FLOW_TENANT_CAP`, the cap's `hold`;
- `FLOW_TENANT_KEY=raises`: with `FLOW_TENANT_CAP`, a key written as a handler would read
  the message (`message.body["tenant"]`: the key gets the raw string, so it raises on
  every message), to see the cap hold with its fallback tenant.
Without a downstream, `<in flight downstream at start>` is how many messages of the tenant
(by the body) run in this process at the handler's start, itself included. Each line ends
with the message id.
Prints "ready" at start-up.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter

import anyio

from worker import Message, Worker, WorkerConfig, WorkerContext
from worker.config import FlowControl, TenantCap
from worker.types import ReceivedMessage

QUEUE = os.environ.get("FLOW_QUEUE", "flow")
OUT = os.environ.get("FLOW_OUT", os.devnull)
WORK_S = float(os.environ.get("FLOW_WORK_S", "0"))
DOWNSTREAM = os.environ.get("FLOW_DOWNSTREAM", "")
TENANT_CAP = int(os.environ.get("FLOW_TENANT_CAP", "0"))
TENANT_KEY = os.environ.get("FLOW_TENANT_KEY", "body")
TENANT_HOLD = os.environ.get("FLOW_TENANT_HOLD")

#: `FLOW_WAIT_S`: each long poll's wait (default 20); a short one stops an idle worker fast.
app = Worker(WorkerConfig(wait_s=int(os.environ.get("FLOW_WAIT_S", "20"))), name="bench-flow")
_out = open(OUT, "a", buffering=1)  # noqa: SIM115 - a line per message, for the whole run


class Overloaded(Exception):
    """The downstream refused: too many requests inside."""


class Downstream:
    def __init__(self, spec: str) -> None:
        serves, fails, service_s = spec.split(",")
        self.fails = int(fails)
        self.service_s = float(service_s)
        self.servers = anyio.Semaphore(int(serves))
        self.inside = 0

    async def call(self) -> int:
        if self.inside >= self.fails:
            raise Overloaded(f"{self.inside} requests inside")
        self.inside += 1
        seen = self.inside
        try:
            async with self.servers:
                await anyio.sleep(self.service_s)
        finally:
            self.inside -= 1
        return seen


_downstream = Downstream(DOWNSTREAM) if DOWNSTREAM else None


def _tenant(message: ReceivedMessage) -> str | None:
    tenant: str | None = json.loads(message.body).get("tenant")
    return tenant


def _tenant_as_a_handler_reads_it(message: ReceivedMessage) -> str | None:
    tenant: str | None = message.body["tenant"]  # type: ignore[index]  # a str: TypeError
    return tenant


_key = _tenant_as_a_handler_reads_it if TENANT_KEY == "raises" else _tenant
_hold = {} if TENANT_HOLD is None else {"hold": int(TENANT_HOLD)}
_flow = (
    FlowControl(tenants=TenantCap(per_tenant=TENANT_CAP, key=_key, **_hold)) if TENANT_CAP else None
)
#: Messages of each tenant (by the body) running in this process now.
_running: Counter[str] = Counter()


@app.on_startup
async def ready(context: WorkerContext) -> None:
    print("ready", flush=True)


@app.handler(QUEUE, flow=_flow)
async def handle(message: Message) -> None:
    body = message.body
    tenant = body.get("tenant", "-") if isinstance(body, dict) else "-"
    _running[tenant] += 1
    inside = _running[tenant]
    outcome = "ok"
    try:
        if _downstream is not None:
            inside = await _downstream.call()
        elif WORK_S:
            await anyio.sleep(WORK_S)
    except Overloaded:
        outcome = "error"
        raise
    finally:
        _running[tenant] -= 1
        sent = body.get("t", 0) if isinstance(body, dict) else 0
        _out.write(f"{time.time():.6f} {outcome} {tenant} {sent} {inside} {message.message_id}\n")
