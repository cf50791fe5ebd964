"""Prefect flows: each composes tasks from ``tasks/`` and nothing else."""

from tasks.logs import one_traceback_per_failure, send_library_logs

# Every process that runs a flow (worker, `ingest serve`, the CLI) imports this package:
# the library's log lines then reach the Prefect UI with their run.
send_library_logs()
one_traceback_per_failure()
