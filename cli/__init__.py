"""The ``ingest`` command (``cli.main``): runs the flows of ``flows/`` and serves
``deployments/``. Kept outside ``ingest/`` so the library never imports the flows that
import it; nothing imports it but the console script (``tests/test_layout.py`` checks)."""

import os

# numpy comes in with pyarrow, and its OpenBLAS starts a thread per core that spins for a
# while after the import: ~60 ms of another core's CPU in every command, taken from the
# Prefect and S3 servers on a small machine. No command does linear algebra; a value the
# user set is kept, and the processes a command starts inherit it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
