"""The ``ingest`` command (``cli.main``): runs the flows of ``flows/`` and serves
``deployments/``. Kept outside ``ingest/`` so the library never imports the flows that
import it; nothing imports it but the console script (``tests/test_layout.py`` checks)."""
