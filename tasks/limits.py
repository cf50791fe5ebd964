"""Time limits of the flows and tasks (Prefect's ``timeout_seconds``).

A flow's limit is ``INGEST_FLOW_TIMEOUT`` (``Settings.flow_timeout``) of the
environment of the process that runs it, read when each run starts (the
flows' ``on_running`` hook ``read_flow_limit``, which Prefect calls before it
starts the run's clock), never when the flows are imported. A run past its limit ends
TimedOut instead of hanging; what it staged is committed on the way out.

Tasks have no limit of their own. The tasks a flow submits run in worker
threads, where Prefect cannot interrupt a blocking call (it only warns, once per
task run); the tasks it calls directly share the flow's alarm, and a task limit
there would be reported in place of the flow's. What bounds a task instead is
the I/O under it: the S3 read timeout and request backstop
(``s3_read_timeout``, ``s3_request_timeout``), the GitHub timeout, and the
extraction pool's per-document timeout.
"""

from __future__ import annotations

from typing import Any

from ingest.settings import Settings


def flow_seconds() -> float:
    """Seconds a flow run may take: ``INGEST_FLOW_TIMEOUT`` of this process, read now."""
    return Settings().flow_timeout


def read_flow_limit(flow: Any, flow_run: Any, state: Any) -> None:
    """The ``on_running`` hook of every ingestion flow: its time limit for this run,
    ``flow_seconds()`` now (Prefect calls the hooks of a Running state before it enters
    the run's timeout, which reads ``flow.timeout_seconds``)."""
    flow.timeout_seconds = flow_seconds()
