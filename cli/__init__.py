"""The ``ingest`` command (``cli.main``): runs the flows of ``flows/``, serves
``deployments/`` and the demo of ``dev/``. Kept outside ``ingest/`` so the
library never imports the flows that import it."""
