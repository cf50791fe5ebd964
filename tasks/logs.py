"""The library's log lines (``ingest.*``) in the Prefect UI, stored with their run.

The library logs with the standard ``logging`` module and knows nothing of Prefect
(tests/test_layout.py). Its per-object failures, rate-limit waits and parser
crashes belong in the run's logs, so the ``ingest`` logger gets Prefect's API log
handler, as ``PREFECT_LOGGING_EXTRA_LOGGERS=ingest`` would do, but without
depending on the worker's environment. Lines logged outside any flow or task run
(a thread of the shared request lanes, a plain script) stay on the console instead
of raising Prefect's "without a flow run id" warning.
"""

from __future__ import annotations

import logging

from prefect.context import FlowRunContext, TaskRunContext
from prefect.logging.handlers import APILogHandler

from ingest.errors import TerminalError

LIBRARY_LOGGER = "ingest"


class RunLogHandler(APILogHandler):
    """Prefect's API log handler, for records emitted inside a flow or task run only."""

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "flow_run_id", None) is None and not (
            FlowRunContext.get() or TaskRunContext.get()
        ):
            return
        super().emit(record)


def send_library_logs(level: int = logging.WARNING) -> None:
    """Attach the handler to the ``ingest`` logger once per process, for WARNING and above:
    what the person on call must see (failed objects, rate-limit waits, parser crashes),
    without sending every INFO line to the server's database."""
    logger = logging.getLogger(LIBRARY_LOGGER)
    if not any(isinstance(h, RunLogHandler) for h in logger.handlers):
        handler = RunLogHandler()
        handler.setLevel(level)
        logger.addHandler(handler)
    if logger.level == logging.NOTSET or logger.level > level:
        logger.setLevel(level)


class OneTraceback(logging.Filter):
    """A configuration error (missing bucket, rejected credentials) ends the whole run,
    whose flow-run log line carries its traceback; the failed task's own lines keep their
    message without a second copy of the same traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, TerminalError):
            record.exc_info = None
            record.exc_text = None
            record.terminal_error = str(error)  # what the command's console says once itself
        return True


def one_traceback_per_failure() -> None:
    """Install ``OneTraceback`` on Prefect's task-run logger once per process."""
    logger = logging.getLogger("prefect.task_runs")
    if not any(isinstance(f, OneTraceback) for f in logger.filters):
        logger.addFilter(OneTraceback())
