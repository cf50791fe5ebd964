"""Time limits of the flows and tasks (Prefect's ``timeout_seconds``).

Prefect takes a limit when a flow or task is decorated, so these are read once,
when the flows are imported: from ``INGEST_FLOW_TIMEOUT`` of the worker's
environment (``Settings``). A run past its
limit ends TimedOut instead of hanging; what it staged is committed on the way out.

Tasks have no limit of their own. The tasks a flow submits run in worker
threads, where Prefect cannot interrupt a blocking call (it only warns, once per
task run); the tasks it calls directly share the flow's alarm, and a task limit
there would be reported in place of the flow's. What bounds a task instead is
the I/O under it: the S3 read timeout and request backstop
(``s3_read_timeout``, ``s3_request_timeout``), the GitHub timeout, and the
extraction pool's per-document timeout.
"""

from __future__ import annotations

from ingest.settings import Settings

_settings = Settings()
FLOW_SECONDS = _settings.flow_timeout
