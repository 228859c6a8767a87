"""Optional integrations with other systems, each behind its own extra.

`worker.integrations.spark` (extra `[spark]`): Spark jobs under lease, a leased streaming
source and a queue sink. Integrations use the public contract (`worker.types`,
`worker.backend`, `worker.message`, ...) and a backend the application hands them; nothing in
`worker` or `backends` imports them.
"""
