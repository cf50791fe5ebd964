"""Nightly ingestion of S3 documents and REST APIs into Parquet and DuckDB.

The package holds the plain, typed logic (listing, downloading, storing,
timing); ``tasks/`` wraps it in thin Prefect tasks and ``flows/`` composes
those tasks. Imports flow one way: cli -> flows -> tasks -> ingest; the
library never imports flows, tasks, deployments, cli or the development tools of
``dev/`` (tests/test_layout.py checks).
"""

import os
import sys

__version__ = "0.1.0"


def setup_process(*, tables: bool = True) -> None:
    """Set up this process for a run: the one call the command (``cli``) and every process
    that runs a flow (``flows``, which a worker's entrypoint module imports) make before
    their work. Importing the library changes nothing: a program or a test that imports
    it keeps its environment.

    Arrow's default allocator on Linux wheels is mimalloc, which keeps the pages of every
    thread that touched it: a run's many short-lived Arrow tables (a staged part per
    batch, state lookups) on a dozen task threads left 55-65 MB resident that Arrow
    itself counted as free (at most 3 MB allocated). Side by side on a first run over
    200,000 objects, the C library's allocator: peak RSS 452 MB against 526-538 MB, flow
    body 10-16 % shorter. Set before pyarrow makes its first allocation (or switched, when
    pyarrow came first); an explicit ``ARROW_DEFAULT_MEMORY_POOL`` wins. Child processes
    (Dask workers) inherit the setting.

    numpy comes in with pyarrow, and its OpenBLAS starts a thread per core that spins for
    a while after the import: ~60 ms of another core's CPU in every command, taken from
    the Prefect and S3 servers on a small machine. No run does linear algebra; a value the
    user set is kept, and the processes started from here inherit it. It only acts when
    set before numpy is first imported (the command's package does so before anything).

    Then (``tables``) every source's tables are handed to storage (``ingest.catalog.load``),
    so that whatever the process does first (a run's end-of-run hook) knows them all. The
    command leaves that to the commands that reach the lake (``cli.options.command_lake``) or
    run a flow: importing the sources' packages cost ``ingest --help`` 0.16 s of CPU
    (median of 7, 0.87 s against 0.71 s).
    """
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ:
        os.environ["ARROW_DEFAULT_MEMORY_POOL"] = "system"
        if "pyarrow" in sys.modules:
            pa = sys.modules["pyarrow"]
            pa.set_memory_pool(pa.system_memory_pool())
    if tables:
        from ingest import catalog  # after the settings above: it loads pyarrow

        catalog.load()
