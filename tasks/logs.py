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

import contextlib
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
    """One traceback per failure in a run's logs.

    Prefect's engine logs a failure's traceback at each level it passes: the failed
    task ("Task run failed with exception"), its flow ("Encountered exception during
    execution"), and again for a child flow's calling task and the parent flow: four
    copies of one traceback for one failed child of a nightly. The first record of an
    exception keeps it; later ones of the same exception (or one caused by it) keep
    their message, which names the exception, without the traceback; so do the lines
    of an error that reports failures logged where they happened (``reports_failures``).

    A configuration error (missing bucket, rejected credentials) ends the whole run,
    whose flow-run log line carries its traceback; the failed task's own lines keep their
    message without a second copy of the same traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, TerminalError) and record.name == TASK_RUNS_LOGGER:
            record.terminal_error = str(error)  # what the command's console says once itself
            self._drop_traceback(record)
        elif error is not None:
            chain = _chain(error)
            said = ("_traceback_logged", "reports_failures")
            if any(getattr(e, a, False) for e in chain for a in said):
                self._drop_traceback(record)
            else:
                for e in chain:
                    with contextlib.suppress(AttributeError):  # a type without a __dict__
                        e._traceback_logged = True  # type: ignore[attr-defined]
        return True

    @staticmethod
    def _drop_traceback(record: logging.LogRecord) -> None:
        record.exc_info = None
        record.exc_text = None


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and the exceptions it was raised from or during (cycles cut)."""
    found: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and not any(current is e for e in found) and len(found) < 20:
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


TASK_RUNS_LOGGER = "prefect.task_runs"
ENGINE_LOGGERS = (TASK_RUNS_LOGGER, "prefect.flow_runs")


def one_traceback_per_failure() -> None:
    """Install one ``OneTraceback`` on Prefect's task-run and flow-run loggers, once per
    process."""
    loggers = [logging.getLogger(name) for name in ENGINE_LOGGERS]
    found = [f for lg in loggers for f in lg.filters if isinstance(f, OneTraceback)]
    one = found[0] if found else OneTraceback()
    for lg in loggers:
        if one not in lg.filters:
            lg.addFilter(one)
