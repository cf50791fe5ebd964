"""Prefect flows: each composes tasks from ``tasks/`` and nothing else."""

import ingest
from tasks.logs import one_traceback_per_failure, send_library_logs

# Every process that runs a flow (worker, `ingest serve`, the CLI) imports this package: a
# worker loads a deployment's entrypoint module (flows/<name>.py), which imports
# flows.parameters. The process is set up here, once (ingest.setup_process: the Arrow
# allocator and OpenBLAS threads), and the library's log lines then reach the Prefect UI
# with their run.
ingest.setup_process()
send_library_logs()
one_traceback_per_failure()
