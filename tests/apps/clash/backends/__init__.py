"""The user's own `backends/` package, beside their `app.py`, with the name of lease-worker's
own package. If anything imports it, the process ends saying so, and the tests see it."""

raise SystemExit("the user's backends/ was imported in place of lease-worker's 'backends'")
