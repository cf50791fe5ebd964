"""The ``ingest`` command (``cli.main``): runs the flows of ``flows/`` and serves
``deployments/``. Kept outside ``ingest/`` so the library never imports the flows that
import it; nothing imports it but the console script (``tests/test_layout.py`` checks).

The command's process is set up here, before ``cli.main`` loads pyarrow and numpy: both
the console script (``cli.main:main``) and ``python -m cli.main`` import this package
first. ``ingest.setup_process`` says what it sets and the figures behind it.
"""

import ingest

ingest.setup_process(tables=False)  # the tables: command_lake, or the flows' own set-up
