"""Budgets of the CI guard (tests/bench/test_budgets.py): figures that do not depend on
timing, each with where it came from. Lower a number when the runtime gets leaner; a test
fails when a change makes the figure worse than its budget.

Measured 2026-11-24 on commit 7471add (Python 3.11.7) with `python -m bench.footprint`, the
same functions the tests call; byte budgets are that figure plus 10-15 %, request
counts are exact (they are already at their floor).
"""

from __future__ import annotations

# -- API requests per message (exact) -------------------------------------------------------

#: Messages drained through the runtime in the request-count tests.
DRAIN_MESSAGES = 2_000
#: Memory engine, no-op handler, max_in_flight 100: one receive per 10 messages plus the
#: idle poll that finds the queue empty (201 for 2,000), one delete batch per 10 (200), no
#: extension or release. Measured: 0.2005 requests per message; the floor is 0.2.
RECEIVES_PER_10_MESSAGES = 1
IDLE_RECEIVES = 1
DELETES_PER_10_MESSAGES = 1

#: Over the SQS protocol against our own endpoint (`GET /_stats`), max_in_flight 10: for
#: 300 messages ReceiveMessage 31, DeleteMessageBatch 30, GetQueueAttributes 1 (the start-up
#: check), nothing else (the queue's URL is known from CreateQueue).
SQS_DRAIN_MESSAGES = 300
SQS_START_UP_REQUESTS = {"GetQueueAttributes": 1}

# -- bytes (tracemalloc) --------------------------------------------------------------------

# Measured with log lines filtered at INFO (bench.footprint.production_logging), so that
# pytest's unconfigured structlog, which prints every DEBUG line, does not count.

#: Peak bytes allocated above the baseline while draining DRAIN_MESSAGES with a no-op
#: handler, max_in_flight 100, after a 500-message warm-up: what a drain holds at its
#: busiest (about 100 messages between receive and delete, and their transients). It does
#: not grow with N. Measured 246,367-251,045 B (283,093 B before the runtime's metrics
#: became plain numbers).
DRAIN_PEAK_BYTES = 285_000
#: Bytes still allocated once the worker has shut down grow by at most this much per
#: message from a drain of DRAIN_MESSAGES to one of twice as many: a leak of even one small
#: object per message (a set entry, 30 B or more) shows. The absolute figure (7-9 KiB:
#: metric children, the engine's queue) depends on what ran before in the process.
#: Measured: 0 to 1.06 B per message (the absolute figure moves by 2 KiB, one container's
#: resize, whatever N is: 7,176 or 9,224 B at 1,000 to 16,000 messages).
RETAINED_BYTES_PER_MESSAGE = 2

#: Messages held at once (handlers blocked on an event) to measure bytes per lease.
HELD_MESSAGES = 5_000
#: Bytes per in-flight message at HELD_MESSAGES held: engine record, lease, message,
#: handler task and its scope together. Measured 3,060-3,177 B on commit 137ca32 (the
#: spread is the task's context: its two log variables land in one node of the context's
#: hash tree or two, by chance); 3,550-3,566 B on 7471add, 4,561-4,616 B before. Issue
#: 20's goal, 3 KiB (3,072 B), is for 100,000 in flight, where the maps cost less per entry.
BYTES_PER_LEASE = 3_500

# -- renewals (exact) -----------------------------------------------------------------------

#: Leases held through three renewal rounds (virtual time); every round must make exactly
#: ceil(N / 10) ChangeMessageVisibilityBatch calls (10 entries a call, the floor).
RENEWAL_LEASES = 5_000
RENEWAL_ROUNDS = 3
