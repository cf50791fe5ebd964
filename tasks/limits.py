"""Time limits of the flows and tasks (Prefect's ``timeout_seconds``).

Prefect takes a limit when a flow or task is decorated, so these are read once,
when the flows are imported: from ``INGEST_FLOW_TIMEOUT`` and
``INGEST_TASK_TIMEOUT`` of the worker's environment (``Settings``). A run past its
limit ends TimedOut instead of hanging; what it staged is committed on the way out.

The task limit is set on the tasks the flows submit to their task runner (a listing
chunk, a change detection, a download or extraction batch). Tasks a flow calls
directly run under the flow's limit alone: Prefect's cancel scopes nest on one
alarm there, and a flow limit firing inside such a task would be reported as the
task's limit.
"""

from __future__ import annotations

from ingest.settings import Settings

_settings = Settings()
FLOW_SECONDS = _settings.flow_timeout
TASK_SECONDS = _settings.task_timeout
