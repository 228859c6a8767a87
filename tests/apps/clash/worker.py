"""The user's own `worker.py`, beside their `app.py`: nothing to do with lease-worker, but it
has the name of lease-worker's own package. If anything imports it, the process ends saying
so, and the tests see it."""

raise SystemExit("the user's worker.py was imported in place of lease-worker's package 'worker'")
