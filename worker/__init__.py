"""lease-worker: an asyncio worker runtime for message queues whose leases extend themselves."""
